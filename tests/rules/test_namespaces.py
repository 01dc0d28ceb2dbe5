"""NFD's namespace policy plus Kubernetes validation of everything a rule writes."""

from __future__ import annotations

import pytest

from agent.rules import RuleOptions
from agent.rules.namespaces import namespace_problem
from tests.rules.helpers import nfr, plan_for


@pytest.mark.parametrize("key,options,allowed", [
    ("feature.node.kubernetes.io/x", RuleOptions(), True),
    ("sub.feature.node.kubernetes.io/x", RuleOptions(), True),
    ("profile.node.kubernetes.io/x", RuleOptions(), True),
    ("kubernetes.io/arch", RuleOptions(), False),
    ("node.kubernetes.io/x", RuleOptions(), False),
    ("k8s.io/x", RuleOptions(), False),
    ("foo.k8s.io/x", RuleOptions(), False),
    ("node-restriction.kubernetes.io/x", RuleOptions(extra_label_ns=("node-restriction.kubernetes.io",)), False),
    ("node.kubernetes.io/x", RuleOptions(extra_label_ns=("node.kubernetes.io",)), True),
    ("vendor.com/x", RuleOptions(deny_label_ns=("vendor.com",)), False),
    ("a.vendor.com/x", RuleOptions(deny_label_ns=("*.vendor.com",)), False),
    ("vendor.com/x", RuleOptions(deny_label_ns=("*.vendor.com",)), True),
    ("feature.node.kubernetes.io/x", RuleOptions(deny_label_ns=("*",)), False),  # NFD code: deny list applies to all
    ("feature.node.kubernetes.io/x", RuleOptions(deny_label_ns=("*",), extra_label_ns=("feature.node.kubernetes.io",)), True),
    ("accelerators/edgetpu", RuleOptions(), True),
])
def test_namespace_policy(key, options, allowed):
    assert (namespace_problem(key, options) is None) is allowed


def test_refused_items_are_problems_with_file_line_and_never_in_the_plan(tmp_path):
    catalogue, plan = plan_for(tmp_path, {"r.yaml": nfr("""
        - name: bad
          labels:
            kubernetes.io/arch: "arm64"
            ex.com/bad-value: "has spaces"
            ex.com/ok: "true"
            "ex.com/Bad Key": "x"
            ex.com/templated: "@system.osrelease.PRETTY_NAME"
          annotations:
            node-feature-agent.io/owned-labels: "[]"
          extendedResources:
            ex.com/neg: "-1"
            ex.com/frac: "1.5"
          taints:
            - {key: ex.com/t, effect: NoWhere}
            - {key: kubernetes.io/t, effect: NoSchedule}
            - {key: ex.com/good, effect: NoExecute}
        - name: tmpl
          labelsTemplate: "ex.com/from-template=not valid!"
          matchFeatures: [{feature: system.osrelease, matchExpressions: {}}]  # NFD runs no template without a matcher
    """)}, {"system.osrelease": __import__("tests.rules.helpers", fromlist=["attrs"]).attrs(PRETTY_NAME="Ubuntu 22.04.4 LTS")},
        options=RuleOptions(deny_label_ns=("denied.io",)))
    state = plan.state
    assert dict(state.labels) == {"ex.com/ok": "true"}
    assert dict(state.extended_resources) == {} and dict(state.annotations) == {}
    assert [t.to_string() for t in state.taints] == ["ex.com/good:NoExecute"]
    load_lines = {int(p.origin.rsplit(":", 1)[1]) for p in catalogue.problems}
    assert load_lines == {9, 10, 12, 15, 17, 18, 20, 21}  # static checks at load, each with its line
    plan_items = " ".join(p.item for p in state.problems)
    assert "ex.com/templated" in plan_items and "ex.com/from-template" in plan_items  # only known at evaluation
