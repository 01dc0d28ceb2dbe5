"""Rule evaluation: matchFeatures/matchAny, instances, templates, vars, back-references,
node.label, @references and @count, errors failing one rule only."""

from __future__ import annotations

import textwrap

from agent.features import Feature
from tests.rules.helpers import attrs, flags, instances, nfr, plan_for

PCI = instances(
    {"vendor": "10de", "class": "0302", "device": "20b0", "address": "0000:03:00.0"},
    {"vendor": "10de", "class": "0302", "device": "20b0", "address": "0000:05:00.0"},
    {"vendor": "8086", "class": "0300", "device": "56c0", "address": "0000:29:00.0"},
)
FEATURES = {
    "pci.device": PCI,
    "kernel.loadedmodule": flags("i915", "nvidia"),
    "system.osrelease": attrs(ID="ubuntu", VERSION_ID="22.04"),
    "cpu.cpuid": Feature(flags=frozenset({"AVX2"}), attributes={"AVX10_VERSION": "1"}),
}


def run(tmp_path, rules_yaml, features=FEATURES, node=None, raw=None, options=None):
    catalogue, plan = plan_for(tmp_path, {"r.yaml": nfr(rules_yaml)}, features, raw, node, options)
    assert catalogue.problems == (), catalogue.problems
    return plan


def test_all_expressions_must_hold_in_the_same_instance(tmp_path):
    plan = run(tmp_path, """
        - name: mixed
          labels: {"ex.com/mixed": "true"}
          matchFeatures:
            - feature: pci.device
              matchExpressions:
                vendor: {op: In, value: ["10de"]}
                class: {op: In, value: ["0300"]}
        - name: same
          labels: {"ex.com/same": "true"}
          matchFeatures:
            - feature: pci.device
              matchExpressions:
                vendor: {op: In, value: ["8086"]}
                class: {op: In, value: ["0300"]}
    """)
    assert "ex.com/mixed" not in plan.state.labels
    assert plan.state.labels["ex.com/same"] == "true"
    failed = plan.evaluation.rules[0].failure()
    assert "no instance satisfies all conditions" in failed and "r.yaml:" in failed


def test_match_features_is_and_match_any_is_or_and_both_must_hold(tmp_path):
    plan = run(tmp_path, """
        - name: and-fails
          labels: {"ex.com/a": "true"}
          matchFeatures:
            - feature: kernel.loadedmodule
              matchExpressions: {i915: {op: Exists}}
            - feature: kernel.loadedmodule
              matchExpressions: {amdgpu: {op: Exists}}
        - name: any-matches
          labels: {"ex.com/b": "true"}
          matchAny:
            - matchFeatures:
                - feature: kernel.loadedmodule
                  matchExpressions: {amdgpu: {op: Exists}}
            - matchFeatures:
                - feature: kernel.loadedmodule
                  matchExpressions: {nvidia: {op: Exists}}
        - name: both-needed
          labels: {"ex.com/c": "true"}
          matchFeatures:
            - feature: system.osrelease
              matchExpressions: {ID: {op: In, value: [debian]}}
          matchAny:
            - matchFeatures:
                - feature: kernel.loadedmodule
                  matchExpressions: {nvidia: {op: Exists}}
        - name: no-conditions
          labels: {"ex.com/d": "true"}
    """)
    assert {k for k in plan.state.labels if k.startswith("ex.com")} == {"ex.com/b", "ex.com/d"}
    assert "ID In [debian] is false" in plan.evaluation.rules[2].failure()


def test_missing_feature_fails_even_does_not_exist_and_names_are_case_insensitive(tmp_path):
    plan = run(tmp_path, """
        - name: missing
          labels: {"ex.com/missing": "true"}
          matchFeatures:
            - feature: usb.device
              matchExpressions: {vendor: {op: DoesNotExist}}
        - name: case
          labels: {"ex.com/case": "true"}
          matchFeatures:
            - feature: Kernel.LoadedModule
              matchExpressions: {nvidia: {op: Exists}, amdgpu: {op: DoesNotExist}}
    """)
    assert "ex.com/missing" not in plan.state.labels
    assert "usb.device not discovered" in plan.evaluation.rules[0].failure()
    assert plan.state.labels["ex.com/case"] == "true"


def test_multi_type_feature_flags_and_attributes(tmp_path):
    plan = run(tmp_path, """
        - name: cpuid
          labels: {"ex.com/avx10": "true"}
          matchFeatures:
            - feature: cpu.cpuid
              matchExpressions:
                AVX2: {op: Exists}
                AVX10_VERSION: {op: Ge, value: ["1"]}
                AVX512F: {op: DoesNotExist}
    """)
    assert plan.state.labels["ex.com/avx10"] == "true"


def test_match_name_and_templates_see_matched_elements(tmp_path):
    plan = run(tmp_path, """
        - name: names
          labelsTemplate: |
            {{ range .kernel.loadedmodule }}ex.com/mod-{{ .Name }}=true
            {{ end }}
          matchFeatures:
            - feature: kernel.loadedmodule
              matchName: {op: InRegexp, value: ["^nv"]}
        - name: instances
          labelsTemplate: |
            {{ range .pci.device }}ex.com/gpu-{{ .address | replace ":" "-" }}={{ .device }}
            {{ end }}
          matchFeatures:
            - feature: pci.device
              matchExpressions: {vendor: {op: In, value: ["10de"]}}
    """)
    labels = plan.state.labels
    assert labels["ex.com/mod-nvidia"] == "true" and "ex.com/mod-i915" not in labels
    assert labels["ex.com/gpu-0000-03-00.0"] == "20b0" and labels["ex.com/gpu-0000-05-00.0"] == "20b0"
    assert "ex.com/gpu-0000-29-00.0" not in labels


def test_static_labels_override_the_template_and_match_any_unions_templates(tmp_path):
    plan = run(tmp_path, """
        - name: t
          labels: {"ex.com/x": "static"}
          labelsTemplate: |
            ex.com/x=templated
            {{ range .kernel.loadedmodule }}ex.com/m-{{ .Name }}=1
            {{ end }}
          matchAny:
            - matchFeatures:
                - feature: kernel.loadedmodule
                  matchExpressions: {i915: {op: Exists}}
            - matchFeatures:
                - feature: kernel.loadedmodule
                  matchExpressions: {nvidia: {op: Exists}}
    """)
    labels = plan.state.labels
    assert labels["ex.com/x"] == "static"
    assert labels["ex.com/m-i915"] == "1" and labels["ex.com/m-nvidia"] == "1"


def test_vars_and_back_references_in_rule_order(tmp_path):
    plan = run(tmp_path, """
        - name: remember
          vars: {is-gpu-host: "true"}
          varsTemplate: "gpus={{ len .pci.device }}"
          matchFeatures:
            - feature: pci.device
              matchExpressions: {vendor: {op: In, value: ["10de"]}}
        - name: use
          labels: {"ex.com/gpu-host": "true"}
          labelsTemplate: "ex.com/gpus={{ range .rule.matched }}{{ if eq .Name \\"gpus\\" }}{{ .Value }}{{ end }}{{ end }}"
          matchFeatures:
            - feature: rule.matched
              matchExpressions:
                is-gpu-host: {op: IsTrue}
                gpus: {op: Ge, value: ["2"]}
        - name: label-backref
          labels: {"ex.com/chained": "true"}
          matchFeatures:
            - feature: rule.matched
              matchExpressions: {"ex.com/gpu-host": {op: IsTrue}}
    """)
    labels = plan.state.labels
    assert labels["ex.com/gpu-host"] == "true" and labels["ex.com/gpus"] == "2" and labels["ex.com/chained"] == "true"
    assert "is-gpu-host" not in labels and "feature.node.kubernetes.io/is-gpu-host" not in labels  # vars are not published


def test_back_references_only_see_earlier_rules_and_objects_run_in_name_order(tmp_path):
    files = {
        "b.yaml": nfr("""
            - name: late
              labels: {"ex.com/late": "true"}
        """, name="20-late"),
        "a.yaml": nfr("""
            - name: early
              labels: {"ex.com/early": "true"}
              matchFeatures:
                - feature: rule.matched
                  matchExpressions: {"ex.com/late": {op: DoesNotExist}}
            - name: after-late
              labels: {"ex.com/after": "true"}
              matchFeatures:
                - feature: rule.matched
                  matchExpressions: {"ex.com/late": {op: Exists}}
        """, name="30-after"),
        "c.yaml": nfr("""
            - name: first
              labels: {"ex.com/first": "true"}
              matchFeatures:
                - feature: rule.matched
                  matchExpressions: {"ex.com/late": {op: DoesNotExist}}
        """, name="10-first"),
    }
    _, plan = plan_for(tmp_path, files, FEATURES)
    labels = plan.state.labels
    assert labels["ex.com/first"] == "true" and labels["ex.com/late"] == "true" and labels["ex.com/after"] == "true"
    assert "ex.com/early" not in labels
    assert [r.rule.rule_set for r in plan.evaluation.rules] == ["10-first", "20-late", "30-after", "30-after"]


def test_node_label_feature_sees_foreign_and_raw_labels(tmp_path):
    plan = run(tmp_path, """
        - name: plugin
          labels: {"ex.com/tpu": "true"}
          matchFeatures:
            - feature: node.label
              matchExpressions: {kkohtaka.org/edgetpu: {op: Exists}}
        - name: raw
          labels: {"ex.com/raw": "true"}
          matchFeatures:
            - feature: node.label
              matchExpressions: {feature.node.kubernetes.io/pci-0302_10de.present: {op: IsTrue}}
    """, node={"kkohtaka.org/edgetpu": ""}, raw={"feature.node.kubernetes.io/pci-0302_10de.present": "true"})
    assert plan.state.labels["ex.com/tpu"] == "true" and plan.state.labels["ex.com/raw"] == "true"


def test_extended_resources_constant_reference_and_count(tmp_path):
    features = dict(FEATURES, **{
        "cpu.security": attrs(origin="/sys/devices/system/node", **{"sgx.epc": "4096"}),
        "usb.device": instances(
            {"vendor": "18d1", "device": "9302", "sysfs_name": "2-2", "interface": "2-2:1.0"},
            {"vendor": "18d1", "device": "9302", "sysfs_name": "2-2", "interface": "2-2:1.1"},  # same device, 2nd interface
            {"vendor": "1a6e", "device": "089a", "sysfs_name": "1-2"},
            origin="/sys/bus/usb/devices"),
    })
    plan = run(tmp_path, """
        - name: res
          extendedResources:
            ex.com/const: "3"
            ex.com/epc: "@cpu.security.sgx.epc"
            ex.com/gpus: "@count"
          matchFeatures:
            - feature: pci.device
              matchExpressions: {vendor: {op: In, value: ["10de"]}}
        - name: tpu
          extendedResources: {ex.com/tpu: "@count"}
          matchAny:
            - matchFeatures:
                - feature: usb.device
                  matchExpressions: {vendor: {op: In, value: ["18d1"]}}
            - matchFeatures:
                - feature: usb.device
                  matchExpressions: {vendor: {op: In, value: ["1a6e"]}}
        - name: flag-only
          extendedResources: {ex.com/one: "@count"}
          matchFeatures:
            - feature: kernel.loadedmodule
              matchExpressions: {nvidia: {op: Exists}}
        - name: dangling
          extendedResources: {ex.com/none: "@cpu.security.sev.asids"}
    """, features=features)
    res = plan.state.extended_resources
    assert res == {"ex.com/const": "3", "ex.com/epc": "4096", "ex.com/gpus": "2", "ex.com/tpu": "2", "ex.com/one": "1"}
    epc = plan.state.provenance["ex.com/epc"]
    assert epc.origin.endswith("r.yaml:10") and epc.host_path == "/sys/devices/system/node"
    assert plan.state.provenance["ex.com/tpu"].host_path.count("/sys/bus/usb/devices/") == 3
    assert any("ex.com/none" in p.item and "not discovered" in p.reason for p in plan.state.problems)


def test_label_value_reference_and_taints_and_annotations(tmp_path):
    plan = run(tmp_path, """
        - name: os
          labels: {"ex.com/os": "@system.osrelease.ID"}
          annotations: {"ex.com/note": "free text, spaces allowed"}
          taints:
            - {key: ex.com/gpu, value: "true", effect: NoSchedule}
            - {key: ex.com/soft, effect: PreferNoSchedule}
    """)
    assert plan.state.labels["ex.com/os"] == "ubuntu"
    assert plan.state.annotations["ex.com/note"] == "free text, spaces allowed"
    assert [t.to_string() for t in plan.state.taints] == ["ex.com/gpu=true:NoSchedule", "ex.com/soft:PreferNoSchedule"]
    assert plan.state.provenance["taint:ex.com/gpu:NoSchedule"].rule == "test/os"


def test_evaluation_error_fails_only_that_rule(tmp_path):
    plan = run(tmp_path, """
        - name: bad-int
          labels: {"ex.com/bad": "true"}
          matchFeatures:
            - feature: system.osrelease
              matchExpressions: {VERSION_ID: {op: Gt, value: ["20"]}}
        - name: bad-template
          labelsTemplate: "{{ .nothing.here }}"
          matchFeatures: [{feature: system.osrelease, matchExpressions: {}}]  # NFD runs no template without a matcher
        - name: good
          labels: {"ex.com/good": "true"}
          matchFeatures:
            - feature: system.osrelease
              matchExpressions: {VERSION_ID: {op: Gt, value: ["20"]}, ID: {op: In, value: [ubuntu]}}
              # note: same failing expression -> error again
        - name: good2
          labels: {"ex.com/good2": "true"}
    """)
    assert "ex.com/bad" not in plan.state.labels and "ex.com/good" not in plan.state.labels
    assert plan.state.labels["ex.com/good2"] == "true"
    reasons = [p.reason for p in plan.state.problems]
    assert any("not an integer" in r for r in reasons) and any("template failed" in r for r in reasons)


def test_unprefixed_keys_are_auto_prefixed_and_still_validated(tmp_path):
    catalogue, plan = plan_for(tmp_path, {"r.yaml": nfr("""
        - name: plain
          labels: {"my-feature": "true"}
          extendedResources: {"my-res": "2"}
    """)}, FEATURES)
    assert plan.state.labels["feature.node.kubernetes.io/my-feature"] == "true"
    # NFD prefixes extended resources too (nfd-master processNodeFeatureRule: addNsToMapKeys
    # with ExtendedResourceNs); the result is a prefixed native name a pod may request
    assert plan.state.extended_resources == {"feature.node.kubernetes.io/my-res": "2"}
    assert not catalogue.problems


def test_an_ownership_record_over_the_annotation_budget_is_reported_at_plan_time(tmp_path):
    """3,000 labels of ~120 bytes need a ~360 KB record, over the API
    server's 256 KiB budget for all annotations: plan says so instead of a 422 later."""
    from agent.desired import annotation_bytes

    lines = "\n".join(f"{'p' * 50}.example.com/{'x' * 50}-{n:05d}: \"true\"" for n in range(3000))
    _, plan = plan_for(tmp_path, {"big.yaml": nfr(f"""
        - name: many
          labels:
            {textwrap.indent(lines, ' ' * 12).strip()}
    """)})
    assert len(plan.state.labels) == 3000
    assert annotation_bytes(plan.state) > 262144
    assert any("262144-byte budget" in p.reason for p in plan.state.problems)
    _, small = plan_for(tmp_path / "small", {"one.yaml": nfr("""
        - name: one
          labels: {"example.com/one": "true"}
    """)})
    assert not any("budget" in p.reason for p in small.state.problems)
