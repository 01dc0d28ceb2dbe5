"""Hypothesis: the label-file and rule-YAML parsers never crash on hostile input, report only
Problems, and never let an invalid label, annotation, resource or taint into a desired state
(the diff sends it unchecked)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import rules
from agent.desired import OWNERSHIP_ANNOTATIONS
from agent.k8s_validation import (
    annotation_key_errors,
    extended_resource_name_errors,
    label_value_errors,
    qualified_name_errors,
    reserved_namespace_problem,
    taint_errors,
)
from agent.rules.label_files import parse_label_file
from agent.rules.nfr_parser import parse_rule_file
from tests.rules.helpers import flags, instances

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEATURES = {"kernel.loadedmodule": flags("i915"), "pci.device": instances({"vendor": "10de", "class": "0300", "address": "0"})}
TOKENS = st.sampled_from([
    "apiVersion: nfd.k8s-sigs.io/v1alpha1\n", "kind: NodeFeatureRule\n", "metadata: {name: f}\n", "spec:\n", "  rules:\n",
    "    - name: r\n", "      labels: {", "ex.com/a: 'true'", "kubernetes.io/x: y", "'bad key': v", "a/b: '@count'", "}\n",
    "      labelsTemplate: '{{ range .pci.device }}x/{{ .vendor }}=v\n{{ end }}'\n", "      matchFeatures:\n",
    "        - feature: pci.device\n", "          matchExpressions: {vendor: {op: In, value: ['10de']}}\n",
    "          matchExpressions: {vendor: {op: Gt, value: ['x']}}\n", "      extendedResources: {ex.com/r: '@count'}\n",
    "      taints: [{key: ex.com/t, effect: NoSchedule}]\n", "      taints: [{key: 'x y', effect: Bad}]\n",
    "---\n", "&a [*a]\n", "\t", ": :\n", "- - -\n", "\x00", "{{", "\n",
])


def _assert_plan_is_valid(state):
    for key, value in state.labels.items():
        assert not qualified_name_errors(key) and not label_value_errors(value), (key, value)
    for name, value in state.extended_resources.items():
        assert not extended_resource_name_errors(name) and not reserved_namespace_problem(name)
        assert value.isdigit() and value == str(int(value))  # the count exactly as sent
    for key in state.annotations:
        assert not annotation_key_errors(key) and key not in OWNERSHIP_ANNOTATIONS
    for taint in state.taints:
        assert not taint_errors(taint.key, taint.value, taint.effect)


@SETTINGS
@given(st.binary(max_size=400))
def test_label_file_parser_on_arbitrary_bytes(data):
    label_file, problems, _ = parse_label_file("f", "ns", "name", data)
    assert label_file is not None
    for dep in label_file.dependencies:
        assert not qualified_name_errors(dep.key)
    assert all(p.origin.startswith("f:") for p in problems)
    state = rules.desired_state({}, {}, {d.key: d.value or "" for d in label_file.dependencies if d.value is None or not label_value_errors(d.value)},
                            rules.Catalogue(label_files=(label_file,)))
    _assert_plan_is_valid(state)


@SETTINGS
@given(st.lists(TOKENS, max_size=30).map("".join) | st.text(max_size=300))
def test_rule_yaml_parser_and_planner_on_hostile_text(text):
    rule_sets, problems = parse_rule_file("r.yaml", text)
    assert all(p.origin.startswith("r.yaml:") for p in problems)
    catalogue = rules.Catalogue(rule_sets=tuple(rule_sets))
    _assert_plan_is_valid(rules.desired_state(FEATURES, {}, {}, catalogue))


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.sampled_from(["a/b", "a.yaml", "x", "ns/..", "..data", "n/m.yml"]), st.binary(max_size=200), max_size=4))
def test_loader_on_hostile_trees(tree):
    with tempfile.TemporaryDirectory() as tmp:
        for rel, data in tree.items():
            path = Path(tmp) / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_dir():
                path.write_bytes(data)
        catalogue = rules.load_catalogue([tmp])
        _assert_plan_is_valid(rules.desired_state(FEATURES, {}, {}, catalogue))
