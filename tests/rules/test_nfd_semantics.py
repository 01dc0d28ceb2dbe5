"""Where our matcher once differed from NFD, each pinned as NFD's code settles it.

NFD's unit tables (``test_nfd_tables.py``) cover the expression functions; these cover what
``pkg/apis/nfd/nodefeaturerule/rule.go`` (``Execute``, ``evaluateFeatureMatcher``) and
``expression.go`` (``MatchMulti``) decide at the rule level, read from that code at the commit
named in ``tests/data/nfd/``: zero instances, DoesNotExist keys as template elements,
multi-type features, per-branch templates, which errors fail a rule.
"""

from __future__ import annotations

from pathlib import Path

from agent.features import Feature
from tests.rules.helpers import flags, instances, nfr, plan_for

NO_USB = Feature(instances=[], origin="/sys/bus/usb/devices")


def _labels(tmp_path: Path, rules_yaml: str, features: dict[str, Feature]) -> tuple[dict[str, str], list[str]]:
    catalogue, plan = plan_for(tmp_path, {"r.yaml": nfr(rules_yaml)}, features)
    assert catalogue.problems == (), catalogue.problems
    return dict(plan.state.labels), [p.reason for p in plan.state.problems]


def test_zero_instances_fail_a_does_not_exist_term(tmp_path: Path) -> None:
    """MatchMulti: no flag or attribute set and no instance -> false, whatever the expressions."""
    labels, _ = _labels(tmp_path, """
        - name: no-vendor-x
          labels: {"ex.com/no-vendor-x": "true"}
          matchFeatures:
            - feature: usb.device
              matchExpressions: {vendor: {op: DoesNotExist}}
        - name: empty-set
          labels: {"ex.com/empty-set": "true"}
          matchFeatures: [{feature: usb.device, matchExpressions: {}}]
        - name: no-expressions
          labels: {"ex.com/feature-exists": "true"}
          matchFeatures: [{feature: usb.device}]
    """, {"usb.device": NO_USB})
    # matchExpressions absent: MatchMulti is not run, the term holds when the feature exists
    assert labels == {"ex.com/feature-exists": "true"}


def test_an_empty_flag_set_satisfies_does_not_exist(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, """
        - name: no-module
          labels: {"ex.com/no-nvidia": "true"}
          matchFeatures:
            - feature: kernel.loadedmodule
              matchExpressions: {nvidia: {op: DoesNotExist}}
    """, {"kernel.loadedmodule": Feature(flags=[], origin="/proc/modules")})
    assert labels == {"ex.com/no-nvidia": "true"}


def test_does_not_exist_keys_are_template_elements(tmp_path: Path) -> None:
    labels, _ = _labels(tmp_path, """
        - name: t
          labelsTemplate: "{{ range .kernel.loadedmodule }}ex.com/m-{{ .Name }}=x\\n{{ end }}"
          matchFeatures:
            - feature: kernel.loadedmodule
              matchExpressions: {i915: {op: Exists}, nouveau: {op: DoesNotExist}}
    """, {"kernel.loadedmodule": flags("i915")})
    assert labels == {"ex.com/m-i915": "x", "ex.com/m-nouveau": "x"}


def test_multi_type_feature_matches_its_instances_and_keeps_both_elements(tmp_path: Path) -> None:
    multi = Feature(flags=["AVX2", "X"], attributes={"X": "1"}, instances=[], origin="/proc/cpuinfo")
    labels, _ = _labels(tmp_path, """
        - name: both
          labelsTemplate: "{{ range .cpu.cpuid }}ex.com/e-{{ .Name }}={{ len . }}\\n{{ end }}ex.com/n={{ len .cpu.cpuid }}"
          matchFeatures:
            - feature: cpu.cpuid
              matchExpressions: {X: {op: Exists}}
    """, {"cpu.cpuid": multi})
    # X is a flag and an attribute: two elements, {Name} and {Name, Value}
    assert labels == {"ex.com/e-X": "2", "ex.com/n": "2"}
    gpu = Feature(flags=["present"], instances=instances({"vendor": "10de"}).instances, origin="/sys")
    labels, _ = _labels(tmp_path, """
        - name: instance
          labels: {"ex.com/nvidia": "true"}
          matchFeatures:
            - feature: pci.device
              matchExpressions: {vendor: {op: In, value: ["10de"]}}
    """, {"pci.device": gpu})
    assert labels == {"ex.com/nvidia": "true"}


def test_templates_run_per_matchany_branch_and_not_without_matchers(tmp_path: Path) -> None:
    features = {"kernel.loadedmodule": flags("i915", "xe"), "pci.device": instances({"vendor": "8086"})}
    labels, problems = _labels(tmp_path, """
        - name: branches
          labelsTemplate: "{{ range .kernel.loadedmodule }}ex.com/m-{{ .Name }}=x\\n{{ end }}"
          matchAny:
            - matchFeatures: [{feature: kernel.loadedmodule, matchExpressions: {i915: {op: Exists}}}]
            - matchFeatures: [{feature: kernel.loadedmodule, matchExpressions: {xe: {op: Exists}}}]
        - name: no-matchers
          labels: {"ex.com/static": "true"}
          labelsTemplate: "ex.com/templated=true"
        - name: template-needs-the-other-part
          labels: {"ex.com/mixed": "true"}
          labelsTemplate: "{{ range .pci.device }}ex.com/pci-{{ .vendor }}=x\\n{{ end }}"
          matchFeatures: [{feature: pci.device, matchExpressions: {vendor: {op: In, value: ["8086"]}}}]
          matchAny:
            - matchFeatures: [{feature: kernel.loadedmodule, matchExpressions: {i915: {op: Exists}}}]
    """, features)
    assert labels == {"ex.com/m-i915": "x", "ex.com/m-xe": "x", "ex.com/static": "true"}
    # the branch's data has no .pci: missingkey=error fails the rule, as in NFD
    assert any("template failed" in p and "pci" in p for p in problems)


def test_an_error_after_a_failed_condition_is_not_reached(tmp_path: Path) -> None:
    features = {"kernel.loadedmodule": flags("i915"), "pci.device": instances({"vendor": "8086", "class": "x"})}
    labels, problems = _labels(tmp_path, """
        - name: fails-first
          labels: {"ex.com/a": "true"}
          matchFeatures:
            - feature: kernel.loadedmodule
              matchExpressions: {nvidia: {op: Exists}}
            - feature: pci.device
              matchExpressions: {class: {op: Gt, value: ["1"]}}
        - name: matchany-fails
          labels: {"ex.com/b": "true"}
          matchAny:
            - matchFeatures: [{feature: kernel.loadedmodule, matchExpressions: {nvidia: {op: Exists}}}]
          matchFeatures:
            - feature: pci.device
              matchExpressions: {class: {op: Gt, value: ["1"]}}
        - name: error-reached
          labels: {"ex.com/c": "true"}
          matchFeatures:
            - feature: pci.device
              matchExpressions: {class: {op: Gt, value: ["1"]}}
    """, features)
    assert labels == {}
    assert len([p for p in problems if "not an integer" in p]) == 1


def test_nil_and_empty_sets_survive_a_node_feature_object(tmp_path: Path) -> None:
    """MatchMulti starts from "matched" only when the flag or attribute set is non-nil
    (``keys != nil || values != nil``): through a NodeFeature object, an empty ``elements``
    of flags or attributes is a present, empty set (an empty term matches), an instance
    feature with no instances is not (an empty term fails, as TestMatchMulti's "empty
    expression and empty input instances")."""
    from agent.rules.node_features import join_node_features, parse_node_feature

    obj, problems = parse_node_feature({"metadata": {"namespace": "v", "name": "o"}, "spec": {"features": {
        "flags": {"e2e.noflags": {"elements": {}}}, "attributes": {"e2e.noattrs": {"elements": {}}},
        "instances": {"e2e.noinst": {"elements": []}}}}})
    assert not problems
    features, _, _ = join_node_features({}, {}, {}, [obj])
    labels, _ = _labels(tmp_path, """
        - name: flags
          labels: {"ex.com/flags": "true"}
          matchFeatures: [{feature: e2e.noflags, matchExpressions: {}}]
        - name: attrs
          labels: {"ex.com/attrs": "true"}
          matchFeatures: [{feature: e2e.noattrs, matchExpressions: {x: {op: DoesNotExist}}}]
          labelsTemplate: "{{ range .e2e.noattrs }}ex.com/v-{{ .Name }}=v{{ .Value }}\\n{{ end }}"
        - name: instances
          labels: {"ex.com/instances": "true"}
          matchFeatures: [{feature: e2e.noinst, matchExpressions: {}}]
    """, features)
    assert labels == {"ex.com/flags": "true", "ex.com/attrs": "true", "ex.com/v-x": "v"}
