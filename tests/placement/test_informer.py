"""The gated-pod informer on the reflector, against the in-repo API server: its pod cache
follows LIST, watch and 410; stop closes the open watch; a Node (another kind) or junk on the
pod watch is ignored and counted in ``nfa_placement_watch_ignored_total``. The reflector's
own paths (backoff cap, Retry-After, absent collections) are in tests/kube/test_reflector.py."""

from __future__ import annotations

import json
import threading

from kubernetes.client import ApiClient

from agent.placement.informer import PodInformer
from agent.placement.kube import PlacementApi
from agent.placement.metrics import PlacementMetrics
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

SELECTOR = "node-feature-agent.io/placement=gated"
GATED = {"node-feature-agent.io/placement": "gated"}


class Changes:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[tuple[str, bool]] = []

    def __call__(self, key: str, pod: dict | None) -> None:
        with self.lock:
            self.seen.append((key, pod is not None))


def test_the_cache_follows_list_watch_and_410_and_stop_closes_the_watch() -> None:
    with FakeApiServer(bookmark_interval=300) as server:
        server.add_pod("apps", "a", None, labels=GATED)
        server.add_pod("apps", "plain", None)
        changes = Changes()
        informer = PodInformer(PlacementApi(ApiClient(server.client_configuration())), SELECTOR, changes)
        informer.start()
        try:
            wait_for(informer.synced.is_set, what="the first LIST")
            assert informer.pod_keys() == ["apps/a"]
            wait_for(lambda: server.watches.count() >= 1, what="the watch open")
            server.add_pod("apps", "b", None, labels=GATED)
            wait_for(lambda: informer.get("apps/b"), what="b through the watch")
            server.expire_resource_versions()  # ERROR 410: LIST again
            wait_for(lambda: informer.lists >= 2, what="the LIST after 410")
            server.store.delete("pods", "a", "apps")
            wait_for(lambda: informer.get("apps/a") is None, what="a gone")
            assert ("apps/a", False) in changes.seen
        finally:
            informer.stop(timeout=10)
        assert not informer.alive()  # the watch's read timeout is 330 s: only closing it ends the thread


def test_another_kind_on_the_pod_watch_is_ignored_and_counted() -> None:
    with FakeApiServer(bookmark_interval=300) as server:
        metrics = PlacementMetrics()
        changes = Changes()
        informer = PodInformer(PlacementApi(ApiClient(server.client_configuration())), SELECTOR, changes,
                               on_ignored=metrics.watch_item_ignored)
        node = {"kind": "Node", "apiVersion": "v1", "metadata": {"name": "n", "namespace": "apps", "uid": "u",
                                                                  "labels": GATED}}
        server.faults.stream(json.dumps({"type": "ADDED", "object": node}).encode() + b"\nnot json\n",
                             path="/api/v1/pods")
        informer.start()
        try:
            wait_for(lambda: informer.reflector.ignored["undecodable"] >= 1, what="the junk stream read")
            assert informer.pod_keys() == [] and changes.seen == []
            text = metrics.render().decode()
            assert 'nfa_placement_watch_ignored_total{reason="wrong-kind"} 1.0' in text
            assert 'nfa_placement_watch_ignored_total{reason="undecodable"} 1.0' in text
        finally:
            informer.stop()
