"""The gated pods, cluster-wide, kept current by the reflector (``agent.kube.reflector``)
with a label selector.

Only pods labelled ``node-feature-agent.io/placement=gated`` (set by admission with the
gate) are listed and watched, so the controller's watch traffic and memory follow the gated
pods, not the cluster. A pod leaves the selection when the controller (or anyone) removes the
label: the API server's watch cache then sends DELETED. The reflector lists again after an
expired resourceVersion (410) and backs off 0.8 s doubling to 30 s on errors (client-go's
reflector policy: one controller watching a collection). What is the informer's own is the
pod cache: every ADDED/MODIFIED/DELETED and every relisted pod is handed to
``on_change(key, pod)`` (``pod`` None: gone); ``on_synced`` runs after each complete LIST.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from agent.kube.backoff import BackoffSettings
from agent.kube.reflector import Reflector, ReflectorSettings
from agent.placement.kube import PlacementApi

Json = dict[str, Any]
WATCH_SECONDS = 300
WATCH_BACKOFF = BackoffSettings(initial=0.8, maximum=30.0, jitter=0.0)
"""client-go's reflector policy (800 ms doubling to 30 s): one controller watching a collection."""
SETTINGS = ReflectorSettings(watch_timeout=WATCH_SECONDS, read_timeout=WATCH_SECONDS + 30.0,
                             request_timeout=(10.0, 60.0), page_size=500, backoff=WATCH_BACKOFF, max_delay=30.0)


def pod_key(pod: Json) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class PodInformer:
    def __init__(self, api: PlacementApi, selector: str, on_change: Callable[[str, Json | None], None],
                 on_synced: Callable[[], None] = lambda: None,
                 on_ignored: Callable[[str, str], None] | None = None) -> None:
        self.on_change, self.on_synced = on_change, on_synced
        self._lock = threading.Lock()
        self._pods: dict[str, Json] = {}
        self.synced = threading.Event()
        self.reflector = Reflector(api, "/api/v1/pods", "Pod", self, name="gated-pod watch", settings=SETTINGS,
                                   label_selector=selector, on_ignored=on_ignored)

    @property
    def lists(self) -> int:
        return self.reflector.lists

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
        self.reflector.start()

    def stop(self, timeout: float = 2.0) -> None:
        self.reflector.stop(timeout)

    def alive(self) -> bool:
        return self.reflector.alive()

    def list_once(self) -> None:
        """One LIST into the cache, in the caller's thread."""
        self.reflector.list_once()

    # -- what the reflector delivers ---------------------------------------------------------
    def replace(self, objects: list[Json]) -> None:
        fresh = {pod_key(p): p for p in objects}
        with self._lock:
            gone = [k for k in self._pods if k not in fresh]
            self._pods = fresh
        for key in gone:
            self.on_change(key, None)
        for key, pod in fresh.items():
            self.on_change(key, pod)
        self.synced.set()
        self.on_synced()

    def event(self, kind: str, obj: Json) -> None:
        key = pod_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(key, None)
            else:
                self._pods[key] = obj
        self.on_change(key, None if kind == "DELETED" else obj)

    def absent(self, status: int) -> None:
        """Never called: pods always exist (403/404 are errors, retried)."""
