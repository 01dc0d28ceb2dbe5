"""NFD's objects in the cluster are tenant input: the agent in-process against the in-repo API
server (NFD's own CRDs, etcd's 1.5 MiB object limit), on the recorded Intel server.

1. Taints from a NodeFeatureRule object apply only with ``--enable-taints`` (nfd-master's
   ``-enable-taints``, off by default); a rule file's taints always apply.
2. More objects than the bound, named before a legitimate one: a restarted agent keeps the
   legitimate object's label (held, one Warning Event, a metric), never removes it.
3. One object with 10,000 rules (as large as the API server accepts): refused before it is
   parsed, the rest of the cluster's output stays, a Warning Event names it.
4. A tenant creating and deleting objects while the collection is over its bound: a LIST
   after each pause (doubling), not one per deletion.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.rules.budget import MAX_RULE_OBJECTS
from agent.runtime import cluster_watch
from agent.runtime.agent import Agent, Settings
from agent.runtime.metrics import AgentMetrics
from tests.conftest import FIXTURES
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODE = "intel-1"
MATCH = [{"feature": "cpu.model", "matchExpressions": {"vendor_id": {"op": "Exists"}}}]


def rule_object(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": {"name": name},
            "spec": {"rules": rules}}


LEGIT = rule_object("zz-legit", [{"name": "legit", "labels": {"example.com/legit": "true"}, "matchFeatures": MATCH}])
EVICT = rule_object("evict", [{"name": "evict", "labels": {"example.com/evict-rule": "true"}, "matchFeatures": MATCH,
                               "taints": [{"key": "example.com/evict", "effect": "NoExecute"},
                                          {"key": "feature.node.kubernetes.io/evict", "value": "all",
                                           "effect": "NoExecute"}]}])
FILE_TAINT = rule_object("admin-file", [{"name": "dedicated", "labels": {"example.com/from-file": "true"},
                                         "matchFeatures": MATCH,
                                         "taints": [{"key": "example.com/dedicated", "effect": "NoSchedule"}]}])


@pytest.fixture(autouse=True)
def quick_absent_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_watch, "ABSENT_RETRY", BackoffSettings(initial=0.05, maximum=0.2, jitter=0.0))
    monkeypatch.setattr(cluster_watch, "RELIST", BackoffSettings(initial=0.05, maximum=0.2, jitter=0.0))


def start_agent(server: FakeApiServer, rules_dir: Path, *, enable_taints: bool = False,
                metrics: AgentMetrics | None = None) -> Agent:
    settings = Settings(node_name=NODE, rules_dirs=[str(rules_dir)], host_root=str(FIXTURES / "intel-server"),
                        metrics_port=None, udev_mode="off", watch_timeout=30, rules_from_cluster=True,
                        enable_taints=enable_taints, backoff=BackoffSettings(initial=0.05, maximum=0.2))
    agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()), metrics=metrics).start()
    wait_for(agent.ready.is_set, what="first reconcile")
    return agent


def labels_of(server: FakeApiServer) -> dict[str, str]:
    return dict(server.node(NODE)["metadata"].get("labels") or {})


def taints_of(server: FakeApiServer) -> set[str]:
    return {f"{t['key']}:{t['effect']}" for t in server.node(NODE).get("spec", {}).get("taints") or []}


def warnings(server: FakeApiServer, reason: str) -> list[str]:
    return [e.get("message") or e.get("note") or "" for e in server.events()
            if e.get("type") == "Warning" and e.get("reason") == reason]


def metric(metrics: AgentMetrics, name: str) -> str:
    return "\n".join(line for line in metrics.render().decode().splitlines() if line.startswith(name))


@pytest.fixture
def rules_dir(tmp_path: Path) -> Path:
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "admin.yaml").write_text(yaml.safe_dump(FILE_TAINT))
    return rules


@pytest.mark.parametrize("enable", [False, True], ids=["default", "enable-taints"])
def test_taints_from_an_object_need_enable_taints(rules_dir: Path, enable: bool,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    with FakeApiServer(nfd_crds=True) as server:
        server.add_node(NODE)
        server.custom.apply(EVICT)
        agent = start_agent(server, rules_dir, enable_taints=enable)
        try:
            wait_for(lambda: "example.com/evict-rule" in labels_of(server), what="the object's label")
            wait_for(lambda: "example.com/dedicated:NoSchedule" in taints_of(server), what="the file's taint")
            evict = {"example.com/evict:NoExecute", "feature.node.kubernetes.io/evict:NoExecute"}
            if enable:
                wait_for(lambda: evict <= taints_of(server), what="the object's taints")
            else:
                before = agent.passes
                agent.queue.put("resync", sources=None)  # another pass: the note stays one line
                wait_for(lambda: agent.passes > before, what="another pass")
                assert not evict & taints_of(server)
                notes = [r for r in caplog.records if getattr(r, "event", "") == "taints-ignored"]
                assert len(notes) == 1 and "--enable-taints" in notes[0].getMessage()
                assert "example.com/evict:NoExecute" in notes[0].getMessage()
        finally:
            agent.stop(timeout=5)


def test_more_objects_than_the_bound_named_first_keep_the_legitimate_label_after_a_restart(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with FakeApiServer(nfd_crds=True) as server:
        server.add_node(NODE)
        server.custom.apply(LEGIT)
        agent = start_agent(server, empty)
        try:
            wait_for(lambda: labels_of(server).get("example.com/legit") == "true", what="the legitimate label")
        finally:
            agent.stop(timeout=5)
        for index in range(MAX_RULE_OBJECTS + 1):  # junk, named before the legitimate object
            server.custom.apply(rule_object(f"aa-junk-{index:05d}", [{"name": "x", "matchFeatures": MATCH}]))
        metrics = AgentMetrics()
        agent = start_agent(server, empty, metrics=metrics)
        try:
            wait_for(lambda: warnings(server, "ClusterObjectsBounded"), what="the bound's Warning Event")
            wait_for(lambda: agent.passes >= 2, what="a pass after the LIST")
            assert labels_of(server).get("example.com/legit") == "true"
            assert "example.com/legit" in server.node(NODE)["metadata"]["annotations"][
                "node-feature-agent.io/owned-labels"]
            (event,) = warnings(server, "ClusterObjectsBounded")
            assert f"{MAX_RULE_OBJECTS + 2} NodeFeatureRule objects, over the bound of {MAX_RULE_OBJECTS}" in event
            assert "aa-junk-00000" in event
            assert 'nfa_cluster_objects_bounded{bound="NodeFeatureRule"} 1.0' in metric(metrics, "nfa_cluster_objects")
            assert "nfa_cluster_objects_undetermined 1.0" in metric(metrics, "nfa_cluster_objects")
            # back under the bound: the legitimate object is read again and nothing is held
            for index in range(MAX_RULE_OBJECTS + 1):
                server.custom.delete("NodeFeatureRule", f"aa-junk-{index:05d}")
            wait_for(lambda: "nfa_cluster_objects_undetermined 0.0" in metric(metrics, "nfa_cluster_objects"),
                     what="the bound cleared")
            assert labels_of(server).get("example.com/legit") == "true"
            assert len(warnings(server, "ClusterObjectsBounded")) == 1
        finally:
            agent.stop(timeout=5)


def test_an_object_with_10000_rules_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    huge = rule_object("huge", [{"name": f"r{i}", "labels": {f"example.com/l{i}": "true"}, "matchFeatures": MATCH}
                                for i in range(10_000)])
    with FakeApiServer(nfd_crds=True) as server:
        server.add_node(NODE)
        server.custom.apply(LEGIT)
        server.custom.apply(huge)  # as large as etcd takes (see the next test)
        agent = start_agent(server, empty)
        try:
            wait_for(lambda: labels_of(server).get("example.com/legit") == "true", what="the legitimate label")
            wait_for(lambda: [w for w in warnings(server, "RulesInvalid") if "huge" in w], what="the refusal's Event")
            (event,) = [w for w in warnings(server, "RulesInvalid") if "huge" in w]
            assert "its spec is" in event and "bytes (at most 262144)" in event
            assert not [k for k in labels_of(server) if k.startswith("example.com/l") and k[13:].isdigit()]
            # under the size bound, over the rule count: refused the same way, by its count
            server.custom.apply(rule_object("many", huge["spec"]["rules"][:101]))
            wait_for(lambda: [w for w in warnings(server, "RulesInvalid") if "many" in w], what="the count's Event")
            assert [w for w in warnings(server, "RulesInvalid") if "101 rules (at most 100 per object)" in w]
            assert not [k for k in labels_of(server) if k.startswith("example.com/l") and k[13:].isdigit()]
            assert not [p for p in agent.last_outcome.problems if p.origin == "api-server"] if agent.last_outcome else True
        finally:
            agent.stop(timeout=5)


def test_the_server_refuses_an_object_over_etcds_request_limit() -> None:
    from kubernetes.client.exceptions import ApiException

    too_big = rule_object("too-big", [{"name": f"r{i}", "labels": {f"example.com/l{i}": "true"},
                                       "matchFeatures": MATCH} for i in range(12_000)])
    with FakeApiServer(nfd_crds=True) as server:
        from kubernetes.client.api_client import ApiClient

        from agent.kube.light_core import LightCoreV1Api

        core = LightCoreV1Api(ApiClient(server.client_configuration()))
        with pytest.raises(ApiException) as refused:
            core._call("POST", "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules", body=too_big)
        assert refused.value.status == 500 and "etcdserver: request is too large" in str(refused.value.body)


def test_deletions_while_bounded_cost_one_list_per_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_watch, "RELIST", BackoffSettings(initial=10.0, maximum=300.0, jitter=0.2))
    pauses: list[float] = []
    resume = threading.Semaphore(0)
    bounded: list[str | None] = []

    class Watch(cluster_watch.CollectionWatch):
        def _pause(self) -> None:  # the pause it would take, held until the test lets it end
            pauses.append(self.relist_backoff.next_delay())
            while not resume.acquire(timeout=0.05) and not self._stop.is_set():
                pass

    def lists() -> int:
        return sum(1 for r in server.requests if r.path.endswith("/nodefeaturerules") and "watch" not in r.query)

    def churn(times: int) -> None:  # a tenant creating and deleting an object
        for index in range(times):
            server.custom.apply(rule_object(f"churn-{index}", [{"name": "x", "matchFeatures": MATCH}]))
            server.custom.delete("NodeFeatureRule", f"churn-{index}")

    with FakeApiServer(nfd_crds=True) as server:
        for name in ("a", "b", "c"):
            server.custom.apply(rule_object(name, [{"name": "x", "matchFeatures": MATCH}]))
        core = NodeApi.from_configuration(server.client_configuration()).core
        watch = Watch(core, "nodefeaturerules", "NodeFeatureRule", lambda _changes, _everything: None,
                      max_objects=2, on_bounded=bounded.append, timeout_seconds=30).start()
        try:
            wait_for(lambda: len(bounded) == 1 and bounded[0] is not None, what="bounded at the first LIST")
            churn(20)
            wait_for(lambda: len(pauses) == 1, what="a pause after the first deletion")
            assert lists() == 1  # the deletions while paused asked for nothing
            resume.release()
            wait_for(lambda: lists() == 2, what="the LIST after the pause")
            churn(20)  # still over the bound: the next pause is longer
            wait_for(lambda: len(pauses) == 2, what="a second pause")
            assert lists() == 2 and pauses[1] > pauses[0] >= 8.0
            server.custom.delete("NodeFeatureRule", "c")
            resume.release()
            wait_for(lambda: bounded[-1:] == [None], what="within the bound after the LIST")
            assert lists() == 3
            churn(1)  # bounded again by a new object, then a deletion: the pause starts over
            wait_for(lambda: len(pauses) == 3, what="a third pause")
            assert pauses[2] <= 10.0 and lists() == 3
        finally:
            watch.stop(timeout=5)
