"""NFD's own e2e data (``tests/data/nfd/e2e``, NFD 76e6cc8c ``test/e2e/data``) applied as cluster
objects to a running agent, with the expectations NFD's Go e2e states
(``test/e2e/node_feature_discovery_test.go``: "custom features from the NodeFeatureRule rules
should be created", "labels from the NodeFeature objects should be created", "denied labels
should not be created by the NodeFeature object").

nfd-worker's part is played by a NodeFeature object in NFD's namespace named after the node,
holding what NFD's ``fake`` source publishes with its default config (``source/fake/fake.go``
``newDefaultConfig``): the e2e's worker runs ``featureSources: [fake]``, ``labelSources: []`` for
the rules, and ``-label-sources=fake`` for the NodeFeature case. The agent discovers nothing
itself (``sources=("local",)`` on a host without feature files), so every label, taint, resource and annotation on the Node comes from
the objects. nfd-master runs with ``-enable-taints`` in that e2e; the agent applies object
taints without a switch here. Where the agent keeps its own record (not NFD's annotation
names), the record is checked for the same set.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.desired import (
    ANNOTATION_OWNED_ANNOTATIONS,
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
)
from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.rules import RuleOptions
from agent.runtime import cluster_watch
from agent.runtime.agent import Agent, Settings
from tests.conftest import FIXTURES
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

DATA = Path(__file__).resolve().parents[1] / "data" / "nfd" / "e2e"
NODE = "e2e-worker"
NFD_NS = "node-feature-discovery"
NS = "feature.node.kubernetes.io"


def data(name: str) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all((DATA / name).read_text()) if d)


def node_feature(name: str, namespace: str) -> dict[str, Any]:
    """As ``testutils.CreateOrUpdateNodeFeaturesFromFile``: the node-name label set, in ``namespace``."""
    obj = data(name)
    obj["metadata"]["namespace"] = namespace
    obj["metadata"].setdefault("labels", {})["nfd.node.kubernetes.io/node-name"] = NODE
    return obj


def fake_worker(labels: bool) -> dict[str, Any]:
    """nfd-worker's NodeFeature with the fake source's default features (and labels)."""
    instances = [{"name": "instance_1", "attr_1": "true", "attr_2": "false", "attr_3": "10", "attr_4": "foobar"},
                 {"name": "instance_2", "attr_1": "true", "attr_2": "true", "attr_3": "100"},
                 {"name": "instance_3"}]
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
            "metadata": {"name": NODE, "namespace": NFD_NS, "labels": {"nfd.node.kubernetes.io/node-name": NODE}},
            "spec": {"features": {
                "flags": {"fake.flag": {"elements": {"flag_1": {}, "flag_2": {}, "flag_3": {}}}},
                "attributes": {"fake.attribute": {"elements": {"attr_1": "true", "attr_2": "false", "attr_3": "10"}}},
                "instances": {"fake.instance": {"elements": [{"attributes": a} for a in instances]}}},
                "labels": {f"fake-fakefeature{n}": "true" for n in (1, 2, 3)} if labels else {}}}


@pytest.fixture(autouse=True)
def quick_absent_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_watch, "ABSENT_RETRY", BackoffSettings(initial=0.05, maximum=0.2, jitter=0.0))


def start(server: FakeApiServer, tmp_path: Path, options: RuleOptions | None = None) -> Agent:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    settings = Settings(node_name=NODE, rules_dirs=[str(rules)], host_root=str(FIXTURES / "minimal"), sources=("local",),
                        metrics_port=None, udev_mode="off", watch_timeout=30, rules_from_cluster=True,
                        enable_taints=True,  # NFD's e2e runs nfd-master with -enable-taints
                        rule_options=options, backoff=BackoffSettings(initial=0.05, maximum=0.2))
    agent = Agent(settings, NodeApi.from_configuration(server.client_configuration())).start()
    wait_for(agent.ready.is_set, what="first reconcile")
    return agent


def labels(server: FakeApiServer) -> dict[str, str]:
    return dict(server.node(NODE)["metadata"].get("labels") or {})


def annotations(server: FakeApiServer) -> dict[str, str]:
    return dict(server.node(NODE)["metadata"].get("annotations") or {})


def taints(server: FakeApiServer) -> list[tuple[str, str, str]]:
    return sorted((t["key"], t.get("value", ""), t["effect"]) for t in server.node(NODE)["spec"].get("taints") or [])


def capacity(server: FakeApiServer) -> dict[str, str]:
    return dict(server.node(NODE)["status"].get("capacity") or {})


def owned(server: FakeApiServer, record: str) -> set[str]:
    return {e for e in annotations(server).get(record, "").split(",") if e}


def settles(server: FakeApiServer, want_labels: dict[str, str], what: str) -> None:
    """The Node's agent-owned labels are exactly ``want_labels`` (NFD's MatchLabels)."""
    def ok() -> bool:
        have = labels(server)
        return owned(server, ANNOTATION_OWNED_LABELS) == set(want_labels) and \
            all(have.get(k) == v for k, v in want_labels.items())
    wait_for(ok, what=what)


def test_node_feature_rules_e2e(tmp_path: Path) -> None:
    with FakeApiServer(nfd_crds=True, bookmark_interval=0.5) as server:
        server.add_node(NODE, capacity={"cpu": "4"})
        server.custom.apply(fake_worker(labels=False))
        agent = start(server, tmp_path)
        try:
            expected = {f"{NS}/e2e-{kind}-test-{n}": "true" for kind in ("flag", "attribute", "instance") for n in (1, 2)}
            server.custom.apply(data("nodefeaturerule-1.yaml"))
            settles(server, expected, "NodeFeatureRules #1")

            server.custom.apply(data("nodefeaturerule-2.yaml"))
            expected |= {f"{NS}/e2e-matchany-test-1": "true", f"{NS}/e2e-template-test-1-instance_1": "found",
                         f"{NS}/e2e-template-test-1-instance_2": "found", f"{NS}/e2e-template-test-2-attr_2": "false",
                         f"{NS}/e2e-template-test-2-attr_3": "10", f"{NS}/dynamic-label": "true"}
            settles(server, expected, "NodeFeatureRules #1 and #2")

            server.custom.apply(data("nodefeaturerule-3.yaml"))
            rule3 = [(f"{NS}/fake-dedicated-node", "true", "NoExecute"), (f"{NS}/fake-special-node", "exists", "PreferNoSchedule"),
                     (f"{NS}/performance-optimized-node", "true", "NoExecute")]
            wait_for(lambda: taints(server) == rule3, what="taints from #3")
            assert owned(server, ANNOTATION_OWNED_TAINTS) == {f"{k}={v}:{e}" for k, v, e in rule3}

            server.custom.apply(data("nodefeaturerule-3-updated.yaml"))  # the denied and unprefixed keys refused
            updated = [(f"{NS}/fake-special-node", "exists", "PreferNoSchedule"), (f"{NS}/foo", "true", "NoExecute")]
            wait_for(lambda: taints(server) == updated, what="updated taints from #3")
            server.custom.delete("NodeFeatureRule", "e2e-test-3")
            wait_for(lambda: taints(server) == [] and not owned(server, ANNOTATION_OWNED_TAINTS), what="#3's taints removed")

            server.custom.apply(data("nodefeaturerule-4.yaml"))  # `matchFeatures:` null, pruned by the server
            resources = {f"{NS}/nons": "123", "vendor.io/dynamic": "10", f"vendor.{NS}/static": "123"}
            wait_for(lambda: all(capacity(server).get(k) == v for k, v in resources.items()), what="capacity from #4")
            assert owned(server, ANNOTATION_OWNED_RESOURCES) == set(resources)
            assert "bad.kubernetes.io/malo" not in capacity(server)
            server.custom.delete("NodeFeatureRule", "e2e-extened-resource-test")
            wait_for(lambda: not set(resources) & set(capacity(server)), what="#4's resources removed")

            server.custom.apply(data("nodefeaturerule-5.yaml"))
            wanted = {f"{NS}/defaul-ns-annotation": "foo", f"{NS}/defaul-ns-annotation-2": "bar",
                      "custom.vendor.io/feature": "baz"}
            wait_for(lambda: owned(server, ANNOTATION_OWNED_ANNOTATIONS) == set(wanted), what="annotations from #5")
            assert all(annotations(server)[k] == v for k, v in wanted.items())
            assert not {"kubernetes.io/feature", "subns.kubernetes.io/blah", "nfd.node.kubernetes.io/xyz"} & set(annotations(server))
            server.custom.delete("NodeFeatureRule", "e2e-feature-annotations-test")
            wait_for(lambda: not set(wanted) & set(annotations(server)), what="#5's annotations removed")

            server.custom.delete("NodeFeature", NODE, NFD_NS)  # the worker gone: its features' labels go
            settles(server, {}, "labels garbage-collected")
        finally:
            agent.stop(timeout=5)


def test_node_feature_objects_e2e(tmp_path: Path) -> None:
    options = RuleOptions(deny_label_ns=("*.denied.ns", "random.unwanted.ns", "*.vendor.io"),
                          extra_label_ns=("custom.vendor.io",))
    with FakeApiServer(nfd_crds=True, bookmark_interval=0.5) as server:
        server.add_node(NODE)
        agent = start(server, tmp_path, options)
        try:
            server.custom.apply(node_feature("nodefeature-1.yaml", NFD_NS))
            first = {f"{NS}/e2e-nodefeature-test-1": "obj-1", f"{NS}/e2e-nodefeature-test-2": "obj-1",
                     f"{NS}/fake-fakefeature3": "overridden"}
            settles(server, first, "labels from NodeFeature #1")
            server.custom.delete("NodeFeature", "zzz-e2e-features-1", NFD_NS)
            settles(server, {}, "NodeFeature #1's labels removed")

            server.custom.apply(fake_worker(labels=True))
            worker = {f"{NS}/fake-fakefeature{n}": "true" for n in (1, 2, 3)}
            settles(server, worker, "labels from nfd-worker")
            server.custom.apply(node_feature("nodefeature-1.yaml", NFD_NS))
            both = {**worker, **first}
            settles(server, both, "NodeFeature #1 over the worker's")
            server.custom.apply(node_feature("nodefeature-2.yaml", "node-feature-discvery-extra-ns"))
            settles(server, {**both, f"{NS}/e2e-nodefeature-test-1": "overridden-from-obj-2",
                             f"{NS}/e2e-nodefeature-test-3": "obj-2"}, "NodeFeature #2 in the extra namespace")
            server.custom.delete("NodeFeature", "zzz-e2e-features-2", "node-feature-discvery-extra-ns")
            settles(server, both, "NodeFeature #2's labels removed")
            for name in ("zzz-e2e-features-1", NODE):
                server.custom.delete("NodeFeature", name, NFD_NS)
            settles(server, {}, "all removed")

            server.custom.apply(node_feature("nodefeature-3.yaml", NFD_NS))
            settles(server, {f"{NS}/e2e-nodefeature-test-4": "obj-4",
                             "custom.vendor.io/e2e-nodefeature-test-3": "vendor-ns"}, "denied labels not created")
            server.custom.delete("NodeFeature", "zzz-e2e-features-3", NFD_NS)
            settles(server, {}, "NodeFeature #3's labels removed")
        finally:
            agent.stop(timeout=5)


def test_every_e2e_file_is_accepted_by_the_api_server_as_nfds_crds_define_it() -> None:
    """The real server accepts each file (NFD's e2e creates every one); ``matchFeatures: null``
    is pruned, not refused."""
    with FakeApiServer(nfd_crds=True) as server:
        for path in sorted(DATA.glob("*.yaml")):
            obj = copy.deepcopy(data(path.name))
            if obj["kind"] != "NodeFeatureRule":
                obj["metadata"]["namespace"] = NFD_NS
            stored = server.custom.apply(obj)
            assert stored["metadata"]["name"] == obj["metadata"]["name"], path.name
        stored = server.custom.apply(data("nodefeaturerule-4.yaml"))
        assert "matchFeatures" not in stored["spec"]["rules"][2]
