"""Pod guard against the in-repo API server: which pods are reported, evictions, failures."""

from agent.reconcile import NodeApi
from agent.runtime.pod_guard import REASON_EVICTED, REASON_ORPHANED, PodGuard
from tests.support.apiserver import FakeApiServer

LABEL = "accelerators/edgetpu"


def needs_tpu():
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": LABEL, "operator": "In", "values": ["true"]}]}]}}}


def setup(server):
    server.add_node("n1")
    server.add_pod("ml", "by-selector", "n1", node_selector={LABEL: "true"})
    server.add_pod("ml", "by-affinity", "n1", affinity=needs_tpu())
    server.add_pod("ml", "unrelated", "n1", node_selector={"kubernetes.io/os": "linux"})
    server.add_pod("ml", "elsewhere", "n2", node_selector={LABEL: "true"})
    server.add_pod("ml", "no-affinity", "n1")
    return NodeApi.from_configuration(server.client_configuration())


def test_reports_only_pods_that_required_the_lost_label():
    with FakeApiServer() as server:
        guard = PodGuard(setup(server), "n1")
        orphans = guard.check({LABEL}, {"kubernetes.io/os": "linux"})
        assert sorted(o.name for o in orphans) == ["by-affinity", "by-selector"]
        assert all(o.missing == (LABEL,) and not o.evicted for o in orphans)
        events = [e for e in server.events() if e["involvedObject"]["kind"] == "Pod"]
        assert sorted(e["involvedObject"]["name"] for e in events) == ["by-affinity", "by-selector"]
        assert {e["reason"] for e in events} == {REASON_ORPHANED} and {e["type"] for e in events} == {"Warning"}
        assert {p["metadata"]["name"] for p in server.pods("n1")} >= {"by-selector", "by-affinity"}  # not evicted
        lists = [r for r in server.requests if r.method == "GET" and r.path.endswith("/pods")]
        assert lists and lists[0].query.get("fieldSelector") == "spec.nodeName=n1"


def test_still_matching_pods_and_other_removed_labels_are_left_alone():
    with FakeApiServer() as server:
        guard = PodGuard(setup(server), "n1")
        assert guard.check({LABEL}, {LABEL: "true", "kubernetes.io/os": "linux"}) == []  # label came back
        assert guard.check({"something/else"}, {}) == []
        assert guard.check(set(), {}) == []
        assert not server.events()


def test_evicts_with_the_eviction_api():
    with FakeApiServer() as server:
        guard = PodGuard(setup(server), "n1", evict=True)
        orphans = guard.check({LABEL}, {})
        assert all(o.evicted for o in orphans) and len(orphans) == 2
        assert {p["metadata"]["name"] for p in server.pods("n1")} == {"unrelated", "no-affinity"}
        assert any(r.path.endswith("/by-selector/eviction") and r.method == "POST" for r in server.requests)
        assert {e["reason"] for e in server.events() if e["involvedObject"]["kind"] == "Pod"} == {REASON_EVICTED}


def test_failures_are_contained():
    with FakeApiServer() as server:
        guard = PodGuard(setup(server), "n1", evict=True)
        server.faults.fail(403, verb="GET", path="/pods")
        assert guard.check({LABEL}, {}) == []  # cannot list: logged, nothing done
        server.faults.fail(429, count=2, verb="POST", path="/eviction")  # a PodDisruptionBudget says no
        orphans = guard.check({LABEL}, {})
        assert len(orphans) == 2 and not any(o.evicted for o in orphans) and all("429" in o.error for o in orphans)
        assert len(server.pods("n1")) == 4  # nothing evicted
