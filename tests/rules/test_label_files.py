"""Auto-labeller label files: the seed format, comments, key=value, ConfigMap mounts, hostile input."""

from __future__ import annotations

import os

from agent import rules
from agent.k8s_validation import label_value_errors, qualified_name_errors
from tests.conftest import LABELS_DIR
from tests.rules.helpers import catalogue_from

SEED = ("kkohtaka.org/edgetpu\nfeature.node.kubernetes.io/usb-fe_1a6e_089a.present\n"
        "feature.node.kubernetes.io/pci-0880_1ac1.present\nbeta.devicetree.org/fsl-imx8mq-phanbell\n")


def plan(catalogue, raw=None, node=None):
    return rules.derive({}, raw or {}, node or {}, catalogue)


def test_auto_labeller_directory_works_unchanged(tmp_path):
    catalogue = catalogue_from(tmp_path, {"accelerators/edgetpu": SEED,
                                          "accelerators/ncs2": "feature.node.kubernetes.io/usb-ff_03e7_2485.present"})
    assert catalogue.problems == () and [f.key for f in catalogue.label_files] == ["accelerators/edgetpu", "accelerators/ncs2"]
    assert plan(catalogue).state.labels == {}
    by_plugin = plan(catalogue, node={"kkohtaka.org/edgetpu": ""}).state
    assert by_plugin.labels == {"accelerators/edgetpu": "true"}
    prov = by_plugin.provenance["accelerators/edgetpu"]
    assert prov.origin == f"{tmp_path}/accelerators/edgetpu:1" and "on the Node" in prov.feature_instance
    by_discovery = plan(catalogue, raw={"beta.devicetree.org/fsl-imx8mq-phanbell": "1"}).state
    assert by_discovery.labels["accelerators/edgetpu"] == "true"
    assert by_discovery.provenance["accelerators/edgetpu"].origin.endswith("edgetpu:4")


def test_comments_blank_lines_and_required_values(tmp_path):
    catalogue = catalogue_from(tmp_path, {"hw/gpu": "# GPUs\n\n  vendor.io/gpu = yes  \r\nother.io/flag\n"})
    assert catalogue.problems == ()
    assert plan(catalogue, node={"vendor.io/gpu": "no"}).state.labels == {}
    assert plan(catalogue, node={"vendor.io/gpu": "yes"}).state.labels == {"hw/gpu": "true"}
    assert plan(catalogue, node={"other.io/flag": "anything"}).state.labels == {"hw/gpu": "true"}


def test_label_files_see_rule_outputs_and_each_other(tmp_path):
    catalogue = catalogue_from(tmp_path, {
        "a/first": "vendor.io/x\n", "b/second": "a/first\n", "c/third": "ex.com/from-rule\n",
        "r.yaml": "apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: r}\n"
                  "spec:\n  rules:\n    - name: always\n      labels: {ex.com/from-rule: 'true'}\n",
    })
    labels = plan(catalogue, node={"vendor.io/x": "1"}).state.labels
    assert labels == {"a/first": "true", "b/second": "true", "c/third": "true", "ex.com/from-rule": "true"}


def test_configmap_mount_layout_with_data_symlink(tmp_path):
    """What the kubelet writes for a configMap volume with items: visible entries are symlinks
    into ..data, which points at a timestamped directory."""
    stamp = tmp_path / "..2026_01_01_00_00_00.000000001"
    (stamp / "accelerators").mkdir(parents=True)
    (stamp / "accelerators" / "edgetpu").write_text(SEED)
    (stamp / "rules").mkdir()
    (stamp / "rules" / "x.yaml").write_text("apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: x}\nspec: {rules: [{name: r, labels: {ex.com/y: 'true'}}]}\n")
    os.symlink(stamp.name, tmp_path / "..data")
    os.symlink("..data/accelerators", tmp_path / "accelerators")
    os.symlink("..data/rules", tmp_path / "rules")
    catalogue = rules.load_catalogue([str(tmp_path)])
    assert catalogue.problems == () and catalogue.warnings == ()
    assert [f.path for f in catalogue.label_files] == [f"{tmp_path}/accelerators/edgetpu"]  # visible path, loaded once
    assert len(list(catalogue.rules())) == 1
    assert plan(catalogue, node={"kkohtaka.org/edgetpu": ""}).state.labels["accelerators/edgetpu"] == "true"


def test_flat_configmap_keys_without_items(tmp_path):
    stamp = tmp_path / "..2026_01_01"
    stamp.mkdir()
    (stamp / "accelerators.edgetpu").write_text(SEED)
    (stamp / "kkohtaka.org.tpu-ready").write_text("kkohtaka.org/edgetpu\n")
    (stamp / "README.md").write_text("docs are ignored\n")
    os.symlink(stamp.name, tmp_path / "..data")
    for name in ("accelerators.edgetpu", "kkohtaka.org.tpu-ready", "README.md"):
        os.symlink(f"..data/{name}", tmp_path / name)
    catalogue = rules.load_catalogue([str(tmp_path)])
    assert catalogue.problems == ()
    assert sorted(f.key for f in catalogue.label_files) == ["accelerators/edgetpu", "kkohtaka.org/tpu-ready"]


def test_renderer_keys_read_back_as_the_same_label_files(tmp_path):
    """deploy/render_catalogue_configmap.py and the loader agree on the flat key of every
    shipped label file."""
    from tests.test_manifests import renderer

    files = renderer.catalogue_files(LABELS_DIR)
    label_files = [f for f in files if renderer.is_label_file(f.path)]
    assert label_files
    flat = tmp_path / "flat"
    flat.mkdir()
    for f in files:
        (flat / f.key).write_text(f.text)
    from_tree = rules.load_catalogue([str(LABELS_DIR)])
    from_flat = rules.load_catalogue([str(flat)])
    assert from_flat.problems == ()
    assert [(f.key, [d.describe() for d in f.dependencies]) for f in from_flat.label_files] == \
           [(f.key, [d.describe() for d in f.dependencies]) for f in from_tree.label_files]
    assert [r.qualified_name for r in from_flat.rules()] == [r.qualified_name for r in from_tree.rules()]
    bad = tmp_path / "bad" / "ns"
    bad.mkdir(parents=True)
    (bad / "gpu.present").write_text("a.io/b\n")
    import pytest
    with pytest.raises(renderer.CatalogueError, match="would not read back"):
        renderer.catalogue_files(tmp_path / "bad")


def test_hostile_lines_are_problems_with_file_line_and_are_skipped(tmp_path):
    content = (b"good.io/ok\n\x00\x01\xff\xfebinary\nnot a key\nkubernetes.io/\n" + b"x" * 600 + b"\n"
               b"ok.io/v=bad value\n-starts-with-dash.io/x\nfine.io/also\n")
    catalogue = catalogue_from(tmp_path, {"ns/name": content})
    (label_file,) = catalogue.label_files
    assert [d.key for d in label_file.dependencies] == ["good.io/ok", "fine.io/also"]
    lines = sorted(int(p.origin.rsplit(":", 1)[1]) for p in catalogue.problems)
    assert lines == [2, 3, 4, 5, 6, 7]
    assert all(p.origin.startswith(f"{tmp_path}/ns/name:") for p in catalogue.problems)


def test_invalid_label_file_names_and_layouts(tmp_path):
    catalogue = catalogue_from(tmp_path, {
        "Bad_NS/name": "a.io/b\n",  # namespace must be a lowercase DNS subdomain
        "kubernetes.io/mine": "a.io/b\n",  # reserved namespace: refused by policy
        "nodots": "a.io/b\n",  # top-level file without a flat key
        "deep/er/file": "a.io/b\n",  # not <namespace>/<name>: warning only
        "empty/file": "# nothing\n",
        "blob.yaml": b"\xff\xfe\x00not utf8",
    })
    reasons = "\n".join(str(p) for p in catalogue.problems)
    assert "Bad_NS/name:1" in reasons and "nodots:1" in reasons and "blob.yaml:1" in reasons
    assert "kubernetes.io/mine:1" in reasons and "reserved by Kubernetes" in reasons
    assert any("deep/er/file" in str(w) for w in catalogue.warnings)
    assert any("can never match" in str(w) for w in catalogue.warnings)
    state = plan(catalogue, node={"a.io/b": "x"}).state
    assert state.labels == {}
    for key, value in state.labels.items():
        assert not qualified_name_errors(key) and not label_value_errors(value)
