"""A second writer that insists on its own value for one label of a Node.

It stands for another controller owning the same key (an NFD master with a different rule, a
second labeller, an admin's reconcile loop): whenever the Node's label differs from its value,
it sets the value back at once. Against an agent that rewrites every foreign change, the two
form a permanent tug-of-war. It edits through the store (as ``SecondWriter`` does), so each
revert is a new Node version the agent's watch delivers, and is never counted as the agent's
request.
"""

from __future__ import annotations

import threading
from typing import Any, Self

from tests.support.store import NotFound


class Reverter:
    def __init__(self, server: Any, node: str, key: str, value: str) -> None:
        self.server, self.node, self.key, self.value = server, node, key, value
        self.reverts = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"reverter-{node}", daemon=True)

    def _set(self, node: dict[str, Any]) -> None:
        node["metadata"].setdefault("labels", {})[self.key] = self.value

    def _differs(self) -> bool:
        try:
            labels = self.server.node(self.node)["metadata"].get("labels") or {}
        except NotFound:
            return False
        return labels.get(self.key) != self.value

    def _run(self) -> None:
        store = self.server.store
        seen = -1
        while not self._stop.is_set():
            with store.changed:
                if store.rv == seen:
                    store.changed.wait(0.2)
                    continue
                seen = store.rv
                if not self._differs():
                    continue
                try:
                    self.server.edit_node(self.node, self._set)
                except NotFound:
                    continue
                except Exception as exc:  # noqa: BLE001 - surfaced through .errors, never lost
                    self.errors.append(exc)
                    return
                self.reverts += 1
                seen = store.rv

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.server.store.wake()
        if self._thread.is_alive():
            self._thread.join(5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
