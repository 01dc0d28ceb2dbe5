"""plan / explain / validate through the real command line entry point."""

from __future__ import annotations

import json

from agent.cli import main
from tests.conftest import FIXTURES, LABELS_DIR


def test_plan_json_on_a_fixture(capsys):
    assert main(["plan", f"--host-root={FIXTURES / 'coral-pcie'}", f"--rules={LABELS_DIR}"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"labels", "extended_resources", "taints", "annotations"}
    assert out["labels"]["accelerators/edgetpu"] == "true"
    assert out["extended_resources"] == {"node-feature-agent.io/edgetpu": "1"}


def test_plan_table_with_node_labels_and_problems_on_stderr(capsys, tmp_path):
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "tpu").write_text("kkohtaka.org/edgetpu\nnot a key\n")
    labels = tmp_path / "node.json"
    labels.write_text(json.dumps({"metadata": {"labels": {"kkohtaka.org/edgetpu": ""}}}))
    assert main(["plan", f"--host-root={FIXTURES / 'minimal'}", f"--rules={tmp_path}", f"--node-labels={labels}", "--format=table"]) == 0
    captured = capsys.readouterr()
    assert "ns/tpu" in captured.out and f"{tmp_path}/ns/tpu:1" in captured.out
    assert f"{tmp_path}/ns/tpu:2" in captured.err


def test_plan_refuses_invalid_node_labels(capsys):
    assert _exit(["plan", f"--host-root={FIXTURES / 'minimal'}", "--node-labels=bad key=1"]) == 2
    assert "invalid node label" in capsys.readouterr().err


def _exit(argv):
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_explain_present_item_names_file_line_expression_instance_and_host_file(capsys):
    assert main(["explain", "accelerators/edgetpu", "node-feature-agent.io/edgetpu", f"--host-root={FIXTURES / 'coral-usb'}", f"--rules={LABELS_DIR}"]) == 0
    out = capsys.readouterr().out
    assert f"{LABELS_DIR}/rules/accelerators.yaml:15" in out
    assert "usb.device: vendor In [18d1], device In [9302]" in out
    assert "usb.device[sysfs_name=2-2" in out and "host file:  /sys/devices/" in out
    assert f"label file {LABELS_DIR}/accelerators/edgetpu matched on feature.node.kubernetes.io/usb-ff_18d1_9302.present" in out


def test_explain_absent_item_names_the_failing_condition(capsys):
    assert main(["explain", "intel.feature.node.kubernetes.io/dlb", f"--host-root={FIXTURES / 'intel-server'}", f"--rules={LABELS_DIR}"]) == 0
    out = capsys.readouterr().out
    assert "not produced" in out and "intel-dp-devices/intel.dlb" in out
    assert "device In [2710]" in out and "intel-device-plugins.node-feature-rules.yaml:17" in out


def test_explain_unknown_name_exits_non_zero(capsys):
    assert main(["explain", "nobody.io/makes-this", f"--host-root={FIXTURES / 'minimal'}", f"--rules={LABELS_DIR}"]) == 1
    assert "no rule or label file" in capsys.readouterr().out


def test_validate_shipped_catalogue_and_broken_files(capsys, tmp_path):
    assert main(["validate", f"--rules={LABELS_DIR}", f"--rules={LABELS_DIR.parent / 'deploy/optional-rules'}"]) == 0
    assert "0 error(s)" in capsys.readouterr().out
    (tmp_path / "r.yaml").write_text(
        "apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: x}\nspec:\n  rules:\n"
        "    - name: typo\n      matchFeature: []\n"
        "    - name: badop\n      matchFeatures:\n        - feature: pci.device\n          matchExpressions:\n            vendor: {op: Equals, value: [a]}\n"
        "    - name: badtemplate\n      labelsTemplate: '{{ .x '\n"
        "---\nnot: a rule\n")
    assert main(["validate", f"--rules={tmp_path}"]) == 1
    err = capsys.readouterr().err
    for line, why in ((6, "unknown field(s) ['matchFeature']"), (12, "unknown op 'Equals'"), (14, "labelsTemplate"), (16, "not a NodeFeatureRule")):
        assert f"{tmp_path}/r.yaml:{line}" in err and why in err, (line, err)
