"""deploy/smoke_flags.py: the smoke run's ``docker run`` flags come from daemonset.yaml, so the
container it proves is the one the DaemonSet runs (the smoke run itself needs Docker and is
not in CI; this checks the translation it relies on)."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest
import yaml

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("smoke_flags", REPO / "deploy" / "smoke_flags.py")
smoke_flags = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = smoke_flags
spec.loader.exec_module(smoke_flags)

MANIFEST = (REPO / "daemonset.yaml").read_text()
POD = smoke_flags.daemonset(MANIFEST)["spec"]["template"]["spec"]
(CONTAINER,) = POD["containers"]


def fake_host(tmp_path):
    """A host root with every hostPath the manifest names (files as files)."""
    for volume in POD["volumes"]:
        if "hostPath" in volume:
            path = tmp_path / volume["hostPath"]["path"].lstrip("/")
            if volume["hostPath"].get("type") == "File":
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text("x\n")
            else:
                path.mkdir(parents=True, exist_ok=True)
    return tmp_path


def test_flags_follow_the_manifest(tmp_path):
    run = smoke_flags.docker_run(MANIFEST, node_name="n1", catalogue_dir="/cat", host_root=str(fake_host(tmp_path)),
                                 configmap_root=str(tmp_path / "cm"))
    flags = list(run.flags)
    ctx = CONTAINER["securityContext"]
    assert run.user == f"{ctx['runAsUser']}:{ctx['runAsGroup']}" == flags[flags.index("--user") + 1]
    assert "--read-only" in flags and flags[flags.index("--cap-drop") + 1] == "ALL"
    assert "no-new-privileges" in flags and "--privileged" not in flags
    mounts = [flags[i + 1] for i, f in enumerate(flags) if f == "--mount"]
    for mount in CONTAINER["volumeMounts"]:
        volume = next(v for v in POD["volumes"] if v["name"] == mount["name"])
        if "hostPath" in volume:
            want = f"type=bind,source={tmp_path}/{volume['hostPath']['path'].lstrip('/')},target={mount['mountPath']},readonly"
            assert want in mounts
    assert not any(m.startswith(f"type=bind,source={tmp_path}/proc,") for m in mounts)
    assert run.args == tuple(CONTAINER["args"]) and "-e" in flags and "NODE_NAME=n1" in flags
    # every ConfigMap volume is there: the catalogue where --rules points, any other rendered
    # from the manifest's data (a missing --config file made `run` exit 2 in the smoke run)
    for mount in CONTAINER["volumeMounts"]:
        volume = next(v for v in POD["volumes"] if v["name"] == mount["name"])
        if "configMap" in volume:
            (bound,) = [m for m in mounts if m.endswith(f",target={mount['mountPath']},readonly")]
            source = bound.split("source=", 1)[1].split(",", 1)[0]
            for arg in CONTAINER["args"]:
                if arg.startswith("--config="):
                    wanted = arg.split("=", 1)[1]
                    if wanted.startswith(mount["mountPath"] + "/"):
                        assert os.path.isfile(os.path.join(source, wanted[len(mount["mountPath"]) + 1:])), wanted


def test_a_missing_typed_file_would_stop_the_kubelet(tmp_path):
    host = fake_host(tmp_path)
    (host / "proc/modules").unlink()
    with pytest.raises(smoke_flags.ManifestError, match="/proc/modules"):
        smoke_flags.docker_run(MANIFEST, node_name="n", catalogue_dir="/c", host_root=str(host),
                               configmap_root=str(tmp_path / "cm"))
    run = smoke_flags.docker_run(MANIFEST, node_name="n", catalogue_dir="/c", host_root=str(host), drop_missing_files=True,
                                 configmap_root=str(tmp_path / "cm"))
    assert any("/proc/modules" in n for n in run.notes)
    assert not any("proc/modules" in f for f in run.flags)


@pytest.mark.parametrize("change,match", [
    (lambda c: c["securityContext"].update(privileged=True), "privileged"),
    (lambda c: next(m for m in c["volumeMounts"] if m["name"] == "host-sys").update(readOnly=False), "writable"),
])
def test_weakened_manifests_are_refused(tmp_path, change, match):
    docs = [d for d in yaml.safe_load_all(MANIFEST) if d]
    ds = next(d for d in docs if d["kind"] == "DaemonSet")
    change(ds["spec"]["template"]["spec"]["containers"][0])
    with pytest.raises(smoke_flags.ManifestError, match=match):
        smoke_flags.docker_run(yaml.safe_dump_all(docs), node_name="n", catalogue_dir="/c", host_root=str(fake_host(tmp_path)))
