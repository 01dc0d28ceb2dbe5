"""The gated pods, cluster-wide, kept current by LIST + WATCH with a label selector.

Only pods labelled ``node-feature-agent.io/placement=gated`` (set by admission with the
gate) are listed and watched, so the controller's watch traffic and memory follow the gated
pods, not the cluster. A pod leaves the selection when the controller (or anyone) removes the
label: the API server's watch cache then sends DELETED. After an expired resourceVersion
(410) or a broken watch the informer lists again (backoff 0.8 s doubling to 30 s on errors).
Every ADDED/MODIFIED/DELETED and every relisted pod is handed to ``on_change(key, pod)``
(``pod`` None: gone); ``on_synced`` runs after each complete LIST.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from agent.placement.kube import PlacementApi
from agent.kube.backoff import Backoff, BackoffSettings
from agent.runtime.node_watch import WatchExpired, consume

log = logging.getLogger(__name__)
Json = dict[str, Any]
WATCH_SECONDS = 300
WATCH_BACKOFF = BackoffSettings(initial=0.8, maximum=30.0, jitter=0.0)
"""client-go's reflector policy (800 ms doubling to 30 s): one controller watching a collection."""


def pod_key(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class PodInformer:
    def __init__(self, api: PlacementApi, selector: str, on_change: Callable[[str, Json | None], None],
                 on_synced: Callable[[], None] = lambda: None) -> None:
        self.api, self.selector = api, selector
        self.on_change, self.on_synced = on_change, on_synced
        self._lock = threading.Lock()
        self._pods: dict[str, Json] = {}
        self._rv = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.synced = threading.Event()
        self.lists = 0

    def get(self, key: str) -> Json | None:
        with self._lock:
            return self._pods.get(key)

    def remember(self, key: str, pod: Json) -> None:
        """A pod read or written directly (after a write conflict; our own PATCH's answer):
        newer than the watch has delivered."""
        with self._lock:
            if key in self._pods:
                self._pods[key] = pod

    def pod_keys(self) -> list[str]:
        with self._lock:
            return list(self._pods)

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="placement-informer", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        backoff = Backoff(WATCH_BACKOFF)
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch()
                backoff.success()
            except WatchExpired:
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any failure: back off, then list again
                if self._stop.is_set():
                    return
                delay = backoff.next_delay()
                log.warning("gated-pod watch failed (%s); retrying in %.1fs", " ".join(str(exc).split())[:200], delay)
                self._stop.wait(delay)
                need_list = True

    def _list(self) -> None:
        answer = self.api.list_pods(self.selector)
        self.lists += 1
        fresh = {pod_key(p): p for p in answer.get("items") or [] if isinstance(p, dict)}
        with self._lock:
            gone = [k for k in self._pods if k not in fresh]
            self._pods = fresh
            self._rv = str((answer.get("metadata") or {}).get("resourceVersion") or "")
        for key in gone:
            self.on_change(key, None)
        for key, pod in fresh.items():
            self.on_change(key, pod)
        self.synced.set()
        self.on_synced()

    def _watch(self) -> None:
        consume(self.api.watch_pods(self.selector, self._rv, WATCH_SECONDS), self._stop, self._event)

    def _event(self, line: bytes) -> None:
        event = json.loads(line)
        kind, obj = event.get("type"), event.get("object")
        if not isinstance(obj, dict):
            return
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired()
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message', '')}")
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        with self._lock:
            self._rv = rv or self._rv
        if kind == "BOOKMARK":
            return
        key = pod_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(key, None)
            else:
                self._pods[key] = obj
        self.on_change(key, None if kind == "DELETED" else obj)
