"""``NodeApi`` that remembers what the server answered, so the loop can tell its own echoes.

Every write the agent makes comes back through the Node watch as a MODIFIED event. Those
are not news: reconciling on them would cost CPU, and, for the intermediate version between
a metadata and a status write, could even look like drift. The server's answer to each of
our writes carries the resulting ``resourceVersion``; a watch event with one of those
versions is our own echo (resourceVersions are compared for equality only, as the API
contract allows). ``last_node`` is the freshest Node the server returned to us.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping, Sequence
from typing import Any

from agent.reconcile.node_api import NodeApi


class RecordingNodeApi(NodeApi):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lock = threading.Lock()
        self._own: collections.deque[str] = collections.deque(maxlen=256)
        self.last_node: dict[str, Any] | None = None
        self.writes = 0

    @classmethod
    def wrap(cls, api: NodeApi) -> RecordingNodeApi:
        return cls(api.core, request_timeout=api.request_timeout)

    def _seen(self, node: dict[str, Any], *, own_write: bool) -> dict[str, Any]:
        rv = str((node.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            if own_write and rv:
                self._own.append(rv)
                self.writes += 1
            self.last_node = node
        return node

    def is_own_version(self, resource_version: str) -> bool:
        with self._lock:
            return bool(resource_version) and resource_version in self._own

    def last_own_version(self) -> str:
        """resourceVersion our newest write produced ("" before the first write)."""
        with self._lock:
            return self._own[-1] if self._own else ""

    def get_node(self, name: str) -> dict[str, Any]:
        return self._seen(super().get_node(name), own_write=False)

    def patch_metadata(self, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return self._seen(super().patch_metadata(name, body), own_write=True)

    def patch_status(self, name: str, ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        return self._seen(super().patch_status(name, ops), own_write=True)
