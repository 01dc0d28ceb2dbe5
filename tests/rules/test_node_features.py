"""NodeFeature objects joined to discovery, judged by NFD's own e2e expectations
(``test/e2e/node_feature_discovery_test.go`` at the commit in ``tests/data/nfd/``: the labels
nfd-master gives a node for ``nodefeature-1/2/3.yaml``) and by ``MergeInto``'s rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agent.features import Feature, Instance
from agent.rules import RuleOptions, derive
from agent.rules.model import Catalogue
from agent.rules.node_features import join_node_features, parse_node_feature

EXAMPLES = Path(__file__).resolve().parents[1] / "data" / "nfd" / "examples"
NS = "feature.node.kubernetes.io/"


def obj(name: str, namespace: str = "ns") -> dict[str, Any]:
    found: dict[str, Any] = next(d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d)
    found["metadata"]["namespace"] = namespace
    return found


def labels_for(objects: list[dict[str, Any]], discovered: dict[str, str] | None = None,
               options: RuleOptions | None = None) -> dict[str, str]:
    parsed = []
    for item in objects:
        found, problems = parse_node_feature(item)
        assert problems == []
        parsed.append(found)
    features, labels, origins = join_node_features({}, discovered or {}, {}, parsed)
    return dict(derive(features, labels, {}, Catalogue(), options, origins).state.labels)


def test_nfd_e2e_labels_from_node_feature_objects() -> None:
    worker = {NS + "fake-fakefeature1": "true", NS + "fake-fakefeature2": "true", NS + "fake-fakefeature3": "true"}
    one = {NS + "e2e-nodefeature-test-1": "obj-1", NS + "e2e-nodefeature-test-2": "obj-1"}
    assert labels_for([obj("nodefeature-1.yaml")]) == {**one, NS + "fake-fakefeature3": "overridden"}
    assert labels_for([obj("nodefeature-1.yaml")], worker) == {**worker, **one, NS + "fake-fakefeature3": "overridden"}
    both = labels_for([obj("nodefeature-2.yaml", "extra"), obj("nodefeature-1.yaml")], worker)
    assert both == {**worker, **one, NS + "fake-fakefeature3": "overridden",
                    NS + "e2e-nodefeature-test-1": "overridden-from-obj-2", NS + "e2e-nodefeature-test-3": "obj-2"}


def test_nfd_e2e_denied_namespaces() -> None:
    options = RuleOptions(deny_label_ns=("*.denied.ns", "random.unwanted.ns", "*.vendor.io"),
                          extra_label_ns=("custom.vendor.io",))
    assert labels_for([obj("nodefeature-3.yaml")], options=options) == {
        NS + "e2e-nodefeature-test-4": "obj-4", "custom.vendor.io/e2e-nodefeature-test-3": "vendor-ns"}


def test_features_merge_as_nfd_merges_them() -> None:
    """MergeInto: flags added, attributes overridden per name, instances appended."""
    discovered = {"fake.flags": Feature(flags=["a"], origin="/host"),
                  "fake.attribute": Feature(attributes={"attr_1": "x", "attr_2": "false"}, origin="/host"),
                  "fake.instance": Feature(instances=[Instance({"name": "instance-1"})], origin="/host")}
    found, _ = parse_node_feature(obj("nodefeature-1.yaml"))
    features, _, _ = join_node_features(discovered, {}, {}, [found])
    assert features["fake.attribute"].attributes == {"attr_1": "x", "attr_2": "true"}
    assert features["fake.attribute"].origin_of("attr_2") == "NodeFeature/ns/zzz-e2e-features-1"
    assert [i.attributes["name"] for i in features["fake.instance"].instances] == ["instance-1", "instance-x"]
    assert features["e2e.flags"].flags == {"flag_1", "flag_2"} and features["e2e.flags"].kinds == {"flags"}
    assert features["fake.flags"] is discovered["fake.flags"]


def test_an_empty_instance_set_is_an_instance_feature_and_bad_parts_are_skipped() -> None:
    found, problems = parse_node_feature(obj("nodefeature.yaml"))
    assert found.features["usb.device"].kinds == {"instances"} and found.features["usb.device"].instances == ()
    hostile = {"metadata": {"name": "x", "namespace": "y"}, "spec": {
        "features": {"attributes": {"bad.attr": {"elements": {"k": 1}}, "good.attr": {"elements": {"k": "v"}}},
                     "instances": {"bad.inst": {"elements": "nope"}}},
        "labels": {"ok": "1"}}}
    found, problems = parse_node_feature(hostile)
    assert set(found.features) == {"good.attr"} and found.labels == {NS + "ok": "1"}
    assert len(problems) == 2 and all(p.origin.startswith("NodeFeature/y/x:spec.features.") for p in problems)
