"""NFD's objects in the cluster (``--rules-from-cluster``), end to end: the agent in-process
against the in-repo API server serving NFD's own CRDs (recorded from NFD, 76e6cc8c), on the
recorded Intel server fixture.

Intel's NodeFeatureRule applied as an object gives the Node exactly what the same file gives;
a third-party NodeFeature joins discovery; edits and deletions of both are followed; an
invalid edit keeps the last good version and is reported on the Node; without the CRDs the
agent labels as before.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime import cluster_watch
from agent.runtime.agent import Agent, Settings
from tests.conftest import FIXTURES, LABELS_DIR
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODE = "intel-1"
INTEL_FILE = LABELS_DIR / "vendor" / "intel-device-plugins.node-feature-rules.yaml"
INTEL = yaml.safe_load(INTEL_FILE.read_text())
EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "nfd" / "examples"
#: a rule on a feature only the third-party NodeFeature provides (NFD's e2e nodefeature-1.yaml)
THIRD_PARTY_RULE = {
    "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": {"name": "third-party"},
    "spec": {"rules": [{
        "name": "e2e instance",
        "labels": {"example.com/e2e-instance": "true"},
        "labelsTemplate": "{{ range .fake.instance }}example.com/e2e-{{ .name }}={{ .attr_2 }}\n{{ end }}",
        "matchFeatures": [{"feature": "fake.instance", "matchExpressions": {"attr_1": {"op": "IsTrue"}}},
                          {"feature": "e2e.flags", "matchExpressions": {"flag_1": {"op": "Exists"}}}],
    }]},
}


def node_feature(name: str = "nodefeature-1.yaml", node: str = NODE, namespace: str = "vendor") -> dict[str, Any]:
    obj: dict[str, Any] = next(d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d)
    obj["metadata"].setdefault("labels", {})["nfd.node.kubernetes.io/node-name"] = node
    obj["metadata"]["namespace"] = namespace
    return obj


def start_agent(server: FakeApiServer, rules_dir: Path, tmp_path: Path) -> Agent:
    settings = Settings(node_name=NODE, rules_dirs=[str(rules_dir)], host_root=str(FIXTURES / "intel-server"),
                        metrics_port=None, udev_mode="off", watch_timeout=30, rules_from_cluster=True,
                        backoff=BackoffSettings(initial=0.05, maximum=0.2))
    api = NodeApi.from_configuration(server.client_configuration())
    agent = Agent(settings, api).start()
    wait_for(agent.ready.is_set, what="first reconcile")
    return agent


def labels_of(server: FakeApiServer) -> dict[str, str]:
    return dict(server.node(NODE)["metadata"].get("labels") or {})


def published(server: FakeApiServer) -> tuple[dict[str, str], dict[str, str]]:
    node = server.node(NODE)
    labels = {k: v for k, v in (node["metadata"].get("labels") or {}).items() if not k.startswith("kubernetes.io/")}
    return labels, dict(node["status"].get("capacity") or {})


@pytest.fixture(autouse=True)
def quick_absent_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_watch, "ABSENT_RETRY", BackoffSettings(initial=0.05, maximum=0.2, jitter=0.0))


def _node_after(tmp_path: Path, files: dict[str, Any], objects: list[dict[str, Any]]) -> tuple[dict[str, str], dict[str, str]]:
    rules = tmp_path / f"rules-{len(files)}"
    rules.mkdir()
    for name, doc in files.items():
        (rules / name).write_text(yaml.safe_dump(doc))
    with FakeApiServer(nfd_crds=True) as server:
        server.add_node(NODE)
        for obj in objects:
            server.custom.apply(obj)
        agent = start_agent(server, rules, tmp_path)
        try:
            wait_for(lambda: "example.com/e2e-instance-x" in labels_of(server), what="third-party labels")
            # the extended resources are a second write (status), after the labels'
            wait_for(lambda: "sgx.intel.com/epc" in published(server)[1], what="extended resources")
            return published(server)
        finally:
            agent.stop(timeout=5)


def test_rules_as_objects_give_the_node_the_files_give(tmp_path: Path) -> None:
    as_files = _node_after(tmp_path, {"intel.yaml": INTEL, "third.yaml": THIRD_PARTY_RULE}, [node_feature()])
    as_objects = _node_after(tmp_path, {}, [INTEL, THIRD_PARTY_RULE, node_feature()])
    assert as_objects == as_files
    labels, capacity = as_objects
    intel = {k for k in labels if k.startswith("intel.feature.node.kubernetes.io/")}
    assert intel == {f"intel.feature.node.kubernetes.io/{n}" for n in ("qat", "dsa", "iaa", "gpu", "sgx")}
    assert capacity["sgx.intel.com/epc"] == "137170518016"
    # NodeFeature labels: auto-prefixed, the prefixed key winning in its object (NFD's e2e data)
    assert labels["feature.node.kubernetes.io/e2e-nodefeature-test-1"] == "obj-1"
    assert labels["example.com/e2e-instance-x"] == "9"


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    empty = tmp_path / "no-rules"
    empty.mkdir()
    with FakeApiServer(nfd_crds=True, bookmark_interval=0.5) as server:
        server.add_node(NODE)
        agent = start_agent(server, empty, tmp_path)
        try:
            yield server, agent
        finally:
            agent.stop(timeout=5)


def _warnings(server: FakeApiServer) -> list[str]:
    return [e.get("message") or e.get("note") or "" for e in server.events() if e.get("type") == "Warning"]


def test_edits_and_deletions_are_followed_and_an_invalid_edit_keeps_the_last_good(cluster: Any) -> None:
    server, _agent = cluster
    server.custom.apply(INTEL)
    wait_for(lambda: "intel.feature.node.kubernetes.io/qat" in labels_of(server), what="Intel labels")
    edited = copy.deepcopy(INTEL)
    edited["spec"]["rules"][5]["labels"] = {"intel.feature.node.kubernetes.io/qat": "edited"}
    server.custom.apply(edited)
    wait_for(lambda: labels_of(server).get("intel.feature.node.kubernetes.io/qat") == "edited", what="edit")
    broken = copy.deepcopy(edited)  # valid for the CRD's schema, not for the rule parser
    broken["spec"]["rules"][5]["labelsTemplate"] = "{{ range"
    broken["spec"]["rules"][5]["labels"] = {"intel.feature.node.kubernetes.io/qat": "broken"}
    server.custom.apply(broken)
    warning = wait_for(lambda: [w for w in _warnings(server) if "NodeFeatureRule/intel-dp-devices" in w],
                       what="a Warning naming the object")
    assert "spec.rules[5].labelsTemplate" in warning[0] and "last good" in warning[0]
    assert labels_of(server)["intel.feature.node.kubernetes.io/qat"] == "edited"
    server.custom.delete("NodeFeatureRule", "intel-dp-devices")
    wait_for(lambda: not [k for k in labels_of(server) if k.startswith("intel.")], what="labels removed")


def test_node_feature_objects_are_followed_and_only_this_nodes_count(cluster: Any) -> None:
    server, _agent = cluster
    server.custom.apply(node_feature("nodefeature-2.yaml", node="another-node"))
    server.custom.apply(node_feature("nodefeature-1.yaml"))
    wait_for(lambda: labels_of(server).get("feature.node.kubernetes.io/e2e-nodefeature-test-2") == "obj-1",
             what="NodeFeature labels")
    assert "feature.node.kubernetes.io/e2e-nodefeature-test-3" not in labels_of(server)  # another node's object
    server.custom.apply(node_feature("nodefeature-2.yaml"))  # sorts after -1: overrides it (nfd-master's order)
    wait_for(lambda: labels_of(server).get("feature.node.kubernetes.io/e2e-nodefeature-test-1")
             == "overridden-from-obj-2", what="the later object's label")
    server.custom.delete("NodeFeature", "zzz-e2e-features-2", "vendor")
    server.custom.delete("NodeFeature", "zzz-e2e-features-1", "vendor")
    wait_for(lambda: not [k for k in labels_of(server) if "e2e-nodefeature" in k], what="labels removed")


def test_without_the_crds_the_agent_labels_and_picks_them_up_later(tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="agent.runtime.cluster_watch")
    empty = tmp_path / "no-rules"
    empty.mkdir()
    with FakeApiServer() as server:  # NFD's CRDs not installed: 404 on their collections
        server.add_node(NODE)
        agent = start_agent(server, empty, tmp_path)
        try:
            assert "feature.node.kubernetes.io/cpu-cpuid.AVX512F" in labels_of(server)  # discovery as ever
            wait_for(lambda: sum(1 for r in server.requests if "nodefeaturerules" in r.path) >= 4,
                     what="a few retries")
            absent = [r for r in caplog.records if getattr(r, "event", "") == "crd-absent"]
            assert len(absent) == 2 and all(r.levelno == logging.INFO for r in absent)  # one line per kind
            assert agent.is_ready()[0] and agent.healthy()[0]
            server.custom.install()
            server.custom.apply(INTEL)
            wait_for(lambda: "intel.feature.node.kubernetes.io/qat" in labels_of(server), what="rules once installed")
        finally:
            agent.stop(timeout=5)


def _passes_with(caplog: pytest.LogCaptureFixture, kind: str) -> list[str]:
    """The agent's "reconcile (<kinds>)" lines of passes whose batch held ``kind`` (each pass that
    reaches the Node logs one, after posting its Event)."""
    lines = [r.getMessage() for r in caplog.records if r.name == "agent.runtime.agent"]
    return [m for m in lines if m.startswith("reconcile (") and kind in m[len("reconcile ("):m.index(")")].split(",")]


def test_an_object_named_as_a_rule_file_overrides_it(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One precedence: the cluster object replaces the file's rule set of the same name (a
    cluster admin updates a vendor's rules without rebuilding the image), logged once; its
    edits are followed; deleting it brings the file's rules back."""
    caplog.set_level(logging.INFO, logger="agent.runtime.cluster_objects")
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "intel.yaml").write_text(INTEL_FILE.read_text())
    with FakeApiServer(nfd_crds=True) as server:
        server.add_node(NODE)
        changed = copy.deepcopy(INTEL)
        changed["spec"]["rules"][5]["labels"] = {"intel.feature.node.kubernetes.io/qat": "from-object"}
        server.custom.apply(changed)
        agent = start_agent(server, rules, tmp_path)
        try:
            wait_for(lambda: labels_of(server).get("intel.feature.node.kubernetes.io/qat") == "from-object",
                     what="the object's value")
            again = copy.deepcopy(changed)
            again["spec"]["rules"][5]["labels"] = {"intel.feature.node.kubernetes.io/qat": "from-object-2"}
            server.custom.apply(again)
            wait_for(lambda: labels_of(server).get("intel.feature.node.kubernetes.io/qat") == "from-object-2",
                     what="the object's edit")
            overrides = [r.getMessage() for r in caplog.records if "overrides the rule file" in r.getMessage()]
            assert len(overrides) == 1 and "intel-dp-devices" in overrides[0]
            assert not [w for w in _warnings(server) if "intel-dp-devices" in w]  # not a problem: no Warning
            server.custom.delete("NodeFeatureRule", "intel-dp-devices")
            wait_for(lambda: labels_of(server).get("intel.feature.node.kubernetes.io/qat") == "true",
                     what="the file's rules back")
        finally:
            agent.stop(timeout=5)


def test_plan_and_explain_read_the_cluster_only_with_a_kubeconfig(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli import main

    empty = tmp_path / "no-rules"
    empty.mkdir()
    with FakeApiServer(nfd_crds=True) as server:
        server.custom.apply(INTEL)
        server.custom.apply(node_feature())
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        common = ["--host-root", str(FIXTURES / "intel-server"), "--rules", str(empty), "--node-name", NODE]
        assert main(["explain", "intel.feature.node.kubernetes.io/qat", *common, "--kubeconfig", str(kubeconfig)]) == 0
        out = capsys.readouterr().out
        assert "NodeFeatureRule/intel-dp-devices:spec.rules[5].labels" in out
        assert main(["plan", *common, "--kubeconfig", str(kubeconfig), "--format", "json"]) == 0
        planned = json.loads(capsys.readouterr().out)["labels"]
        assert planned["feature.node.kubernetes.io/e2e-nodefeature-test-2"] == "obj-1"
        requests = len(server.requests)
        assert main(["plan", *common, "--format", "json"]) == 0  # no kubeconfig: the cluster is not asked
        assert "intel.feature.node.kubernetes.io/qat" not in json.loads(capsys.readouterr().out)["labels"]
        assert len(server.requests) == requests


def test_a_watch_expired_midstream_lists_again_and_follows(cluster: Any) -> None:
    server, _agent = cluster
    server.custom.apply(INTEL)
    wait_for(lambda: "intel.feature.node.kubernetes.io/qat" in labels_of(server), what="Intel labels")
    lists = sum(1 for r in server.requests if r.path.endswith("/nodefeaturerules") and not r.query.get("watch"))
    server.expire_resource_versions()  # the open watches get ERROR 410 and must LIST again
    wait_for(lambda: sum(1 for r in server.requests if r.path.endswith("/nodefeaturerules")
                         and not r.query.get("watch")) > lists, what="a new LIST")
    server.custom.delete("NodeFeatureRule", "intel-dp-devices")
    wait_for(lambda: not [k for k in labels_of(server) if k.startswith("intel.")], what="labels removed")


def test_the_watch_keeps_digests_only_and_a_bound_holds_instead_of_dropping() -> None:
    delivered: list[tuple[dict[Any, Any], bool]] = []
    bounded: list[str | None] = []
    watch = cluster_watch.CollectionWatch(None, "nodefeaturerules", "NodeFeatureRule",
                                          lambda changes, everything: delivered.append((dict(changes), everything)),
                                          max_objects=2, on_bounded=bounded.append)

    def event(kind: str, name: str, spec: Any) -> None:
        obj = {"metadata": {"name": name, "resourceVersion": "7", "managedFields": [{"big": "x" * 100}]}, "spec": spec}
        watch.event(kind, obj)  # what the reflector hands its handler, the line checked

    event("ADDED", "a", {"rules": []})
    event("ADDED", "b", {"rules": []})
    event("ADDED", "c", {"rules": []})  # over the bound: not delivered, the collection is bounded once
    event("ADDED", "d", {"rules": []})
    event("MODIFIED", "a", {"rules": []})  # no change: nothing delivered
    event("MODIFIED", "a", {"rules": [{"name": "x"}]})  # a known object is still followed
    with pytest.raises(cluster_watch.Relist):  # a deletion while bounded: LIST again (after a pause)
        event("DELETED", "b", None)
    assert [(sorted(k[1] for k in changes), everything) for changes, everything in delivered] == \
        [(["a"], False), (["b"], False), (["a"], False), (["b"], False)]
    assert delivered[2][0][("", "a")] == {"apiVersion": None, "kind": None, "metadata": {"name": "a", "namespace": None},
                                          "spec": {"rules": [{"name": "x"}]}, "specBytes": 24}
    assert set(watch.digests) == {("", "a")} and all(isinstance(d, str) for d in watch.digests.values())
    assert len(bounded) == 1 and "over 2 NodeFeatureRule objects" in str(bounded[0]) and "c" in str(bounded[0])


def test_a_junk_watch_stream_backs_off_and_keeps_the_objects_output(cluster: Any) -> None:
    """An HTML page and an object of another kind on the NodeFeatureRule watch: no usable event,
    so the stream is an error, backed off as one (here 0.05 s doubling to 0.2 s: about ten
    requests in two seconds; without that a stream of lines re-watched at once, hundreds a
    second); what the objects gave stays, and the watch follows them again once it heals."""
    server, _agent = cluster
    server.custom.apply(INTEL)
    wait_for(lambda: "intel.feature.node.kubernetes.io/qat" in labels_of(server), what="Intel labels")
    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "intel-dp-devices", "uid": "u", "resourceVersion": "9"}}
    body = b"<html><body>Please sign in</body></html>\n" + json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n"
    server.faults.stream(body, count=100_000, path="/nodefeaturerules")
    wait_for(lambda: any(w.drop is None for w in list(server.watches.open)), what="an open watch to drop")
    server.drop_watches()
    wait_for(lambda: server.faults.injected, what="the first junk stream served")
    served = len(server.faults.injected)
    time.sleep(2.0)  # a window to count requests in; the assertion is on the count
    assert len(server.faults.injected) - served <= 25
    assert "intel.feature.node.kubernetes.io/qat" in labels_of(server)
    server.faults.clear()
    server.custom.delete("NodeFeatureRule", "intel-dp-devices")
    wait_for(lambda: not [k for k in labels_of(server) if k.startswith("intel.")], what="labels removed")


def test_objects_of_another_kind_or_without_uid_are_ignored_and_counted() -> None:
    """The NFD-object watch checks what the reflector checks on every watch (client-go's
    ``expectedGVK``): in a LIST and in a stream, an object of another kind or without uid is
    not taken as a NodeFeatureRule, and each is counted under the watch's name (the metric
    ``nfa_watch_ignored_total{watch,reason}``)."""
    def rule(name: str, uid: str | None, rv: str) -> dict[str, Any]:
        metadata = {"name": name, "resourceVersion": rv, **({"uid": uid} if uid else {})}
        return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": metadata,
                "spec": {"rules": []}}

    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p", "uid": "pod-uid", "resourceVersion": "3"}}
    delivered: list[tuple[list[str], bool]] = []
    ignored: list[tuple[str, str]] = []
    with FakeApiServer(nfd_crds=True) as server:
        server.faults.answer({"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRuleList",
                              "metadata": {"resourceVersion": "2"},
                              "items": [pod, rule("no-uid", None, "2"), rule("listed", "u1", "2")]},
                             path="/nodefeaturerules")
        events = [("ADDED", pod), ("ADDED", rule("no-uid-2", None, "4")), ("ADDED", rule("watched", "u2", "5"))]
        server.faults.stream(b"".join(json.dumps({"type": t, "object": o}).encode() + b"\n" for t, o in events),
                             path="/nodefeaturerules")
        core = NodeApi.from_configuration(server.client_configuration()).core
        watch = cluster_watch.CollectionWatch(
            core, "nodefeaturerules", "NodeFeatureRule",
            lambda changes, everything: delivered.append((sorted(k[1] for k in changes), everything)),
            on_ignored=lambda name, reason: ignored.append((name, reason)), timeout_seconds=30).start()
        try:
            wait_for(lambda: len(delivered) == 2, what="the LIST and the watched object")
            assert delivered == [(["listed"], True), (["watched"], False)]
            assert sorted(ignored) == [("watch-nodefeaturerules", "no-uid")] * 2 + \
                [("watch-nodefeaturerules", "wrong-kind")] * 2
        finally:
            watch.stop(timeout=5)
