"""``@`` values resolved where nfd-master resolves them (76e6cc8c, ``pkg/nfd-master/nfd-master.go``):
``processNodeFeatureRule`` feeds every rule's labels and vars into ``rule.matched`` first, then
``filterFeatureLabel`` / ``filterExtendedResource`` resolve each ``@dom.feature.element`` value
(``getDynamicValue``) against the merged features, for the NodeFeature objects' labels and the
rules' labels and extended resources alike. So ``@rule.matched.X`` may name the same rule or a
later object, and a NodeFeature label may be ``@kernel.version.major``. NodeFeature objects of
nfd-master's own namespace merge first (``getAndMergeNodeFeatures``'s sort).
"""

from __future__ import annotations

from agent.rules import RuleOptions, derive
from agent.rules.node_features import join_node_features, parse_node_feature
from tests.rules.helpers import attrs, catalogue_from, nfr

FEATURES = {"kernel.version": attrs(origin="/proc/sys/kernel/osrelease", major="6", minor="8")}


def _plan(tmp_path, files, raw=None, features=FEATURES):
    catalogue = catalogue_from(tmp_path, files)
    return derive(features, raw or {}, {}, catalogue, RuleOptions()).state


def test_rule_matched_may_name_the_same_rule_and_a_later_object(tmp_path):
    state = _plan(tmp_path, {
        "a.yaml": nfr("""
- name: first
  vars: {tier: gold}
  labels:
    example.com/own: "@rule.matched.tier"
    example.com/later: "@rule.matched.from-b"
  extendedResources: {example.com/slots: "@rule.matched.slots"}
""", name="a"),
        "b.yaml": nfr("""
- name: second
  vars: {from-b: "yes", slots: "4"}
""", name="b"),
    })
    assert state.labels["example.com/own"] == "gold"
    assert state.labels["example.com/later"] == "yes"
    assert state.extended_resources["example.com/slots"] == "4"


def test_a_reference_no_rule_produces_is_refused_with_why(tmp_path):
    state = _plan(tmp_path, {"a.yaml": nfr("""
- name: first
  labels: {example.com/x: "@rule.matched.nobody"}
""")})
    assert "example.com/x" not in state.labels
    assert any("example.com/x" in p.item and "any matched rule" in p.reason for p in state.problems)


def test_node_feature_labels_resolve_references(tmp_path):
    obj, problems = parse_node_feature({
        "metadata": {"namespace": "vendor", "name": "x"},
        "spec": {"labels": {"kver": "@kernel.version.major", "example.com/tier": "@rule.matched.tier",
                            "example.com/bad": "@kernel.version.nope"}}})
    assert not problems
    features, labels, origins = join_node_features(FEATURES, {}, {}, [obj])
    catalogue = catalogue_from(tmp_path, {"a.yaml": nfr("- name: t\n  vars: {tier: gold}\n")})
    state = derive(features, labels, {}, catalogue, RuleOptions(), origins).state
    assert state.labels["feature.node.kubernetes.io/kver"] == "6"
    assert state.labels["example.com/tier"] == "gold"
    assert "example.com/bad" not in state.labels
    assert any("example.com/bad" in p.item for p in state.problems)


def test_objects_of_nfds_namespace_merge_first():
    def obj(namespace, name, value):
        found, _ = parse_node_feature({"metadata": {"namespace": namespace, "name": name},
                                       "spec": {"labels": {"example.com/who": value},
                                                "features": {"attributes": {"x.y": {"elements": {"who": value}}}}}})
        return found
    objects = [obj("vendor", "aaa", "vendor-aaa"), obj("node-feature-discovery", "zzz", "nfd-zzz")]
    features, labels, _ = join_node_features({}, {}, {}, objects)
    assert labels["example.com/who"] == "vendor-aaa"  # NFD's own came first; the later one overrides
    assert features["x.y"].attributes["who"] == "vendor-aaa"
    _, labels, _ = join_node_features({}, {}, {}, objects, nfd_namespace="elsewhere")
    assert labels["example.com/who"] == "nfd-zzz"  # plain name order: aaa, then zzz
