"""The Helm chart, rendered by a real Helm engine (deploy/render_chart.py in the Python >= 3.12
side environment ``.venv-helm`` that ``.ci/run`` makes) for the default values and a matrix of
non-default ones; every object of every render is checked with ``kubernetes-validate`` against
each supported Kubernetes version's schema, and the rendered args with the agent's own parser.

The supported versions are one statement, checked here: the oldest version whose schema
accepts daemonset.yaml and every render is the chart's ``kubeVersion`` floor and the version
README.md and deploy/install.md name, and the version before it does not accept them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from agent.cli import build_parser
from agent.runtime.event_sources import MODES
from tests.conftest import REPO
from tests.test_manifests import FLOOR, INTRODUCED, SCHEMA_VERSIONS

CHART = REPO / "deploy" / "helm" / "node-feature-agent"
HELM_PYTHON = Path(os.environ.get("NFA_HELM_PYTHON", REPO / ".venv-helm" / "bin" / "python"))
SUPPORTED = SCHEMA_VERSIONS
ALL_VERSIONS = sorted(set(all_versions()), key=lambda v: tuple(map(int, v.split("."))))
BELOW_FLOOR = ALL_VERSIONS[ALL_VERSIONS.index(FLOOR) - 1]

CASES: dict[str, dict[str, Any]] = {
    "default": {},
    **{f"udev-mode-{mode}": {"udev": {"mode": mode}} for mode in MODES},
    "poll-interval": {"udev": {"mode": "poll"}, "pollInterval": 2.5, "resyncInterval": 120},
    "device-plugin": {"devicePlugin": {"enabled": True, "hostDir": "/var/snap/microk8s/common/var/lib/kubelet/device-plugins"}},
    "dra-auto": {"dra": {"mode": "auto"}},
    "dra-classes": {"dra": {"mode": "auto", "deviceClasses": True}},
    "dra-classes-1.34": {"dra": {"mode": "auto", "deviceClasses": True}},
    "dra-classes-1.33-v1beta1-served": {"dra": {"mode": "auto", "deviceClasses": True}},
    "bad-dra-classes-1.33-not-served": {"dra": {"mode": "auto", "deviceClasses": True}},
    "pod-guard-evict": {"podGuard": {"enabled": True, "evictOrphans": True}},
    "no-admission-policy": {"admissionPolicy": {"enabled": False}},
    "own-catalogue-only": {"catalogue": {"builtin": False, "extraRules": {
        "accelerators/npu": "feature.node.kubernetes.io/pci-1200_1e60.present\nvendor.example.com/npu\n"}}},
    "worker-config": {"workerConfig": {"core": {"labelWhiteList": "^(pci|usb)"},
                                       "sources": {"pci": {"deviceClassWhitelist": ["0200", "03"]}}}},
    "proc-config-gz": {"hostProcConfigGz": True},
    "scheduling": {"nodeSelector": {"kubernetes.io/os": "linux"}, "priorityClassName": "",
                   "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   "imagePullSecrets": [{"name": "regcred"}], "podAnnotations": {"example.com/team": "edge"},
                   "image": {"repository": "registry.example.com/nfa", "tag": "0.1.0-rc1"}},
    "extra-args": {"metricsPort": 9108, "globalArgs": ["--log-level=debug"], "extraArgs": ["--startup-jitter=0"],
                   "startupTaints": []},
    **{f"placement-{admission}": {"placement": {"enabled": True, "admission": admission}}
       for admission in ("policy", "policy-v1beta1", "webhook", "none")},
    # placement on, admission left to the chart (auto), on a cluster of each supported version
    **{f"placement-auto-{version}": {"placement": {"enabled": True}} for version in SUPPORTED},
    "placement-auto-1.35-v1beta1-served": {"placement": {"enabled": True}},
    "bad-udev-mode": {"udev": {"mode": "inject:/run/x.sock"}},
    "bad-placement-policy-on-1.33": {"placement": {"enabled": True, "admission": "policy"}},
    "bad-placement-v1beta1-not-served": {"placement": {"enabled": True, "admission": "policy-v1beta1"}},
    "bad-placement-admission-word": {"placement": {"enabled": True, "admission": "mutating"}},
}
V1BETA1_POLICY = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
#: the cluster a case renders for (helm template --kube-version/--api-versions; helm install
#: reads them from the cluster); the others render as the engine's default cluster
CLUSTERS: dict[str, dict[str, Any]] = {
    "placement-policy": {"kube_version": "v1.36.0"},
    "placement-policy-v1beta1": {"kube_version": "v1.35.0", "api_versions": [V1BETA1_POLICY]},
    **{f"placement-auto-{version}": {"kube_version": f"v{version}"} for version in SUPPORTED},
    "placement-auto-1.35-v1beta1-served": {"kube_version": "v1.35.0", "api_versions": [V1BETA1_POLICY]},
    "bad-placement-policy-on-1.33": {"kube_version": "v1.33.4"},
    "bad-placement-v1beta1-not-served": {"kube_version": "v1.35.0"},
    "dra-classes-1.34": {"kube_version": "v1.34.0"},
    "dra-classes-1.33-v1beta1-served": {"kube_version": "v1.33.4", "api_versions": ["resource.k8s.io/v1beta1/DeviceClass"]},
    "bad-dra-classes-1.33-not-served": {"kube_version": "v1.33.4"},
}


@pytest.fixture(scope="module")
def renders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    assert HELM_PYTHON.exists(), (
        f"{HELM_PYTHON}: no Helm engine. `bash .ci/run` makes it; by hand: "
        "python3.12 -m venv .venv-helm && .venv-helm/bin/pip install helm-python-sdk")
    cases = tmp_path_factory.mktemp("helm") / "cases.json"
    cases.write_text(json.dumps({name: {"values": values, **CLUSTERS.get(name, {})} for name, values in CASES.items()}))
    done = subprocess.run([str(HELM_PYTHON), str(REPO / "deploy" / "render_chart.py"), "--cases", str(cases)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, dict[str, Any]] = json.loads(done.stdout)
    return result


def objects(render: dict[str, Any]) -> list[dict[str, Any]]:
    assert "error" not in render, render.get("error")
    docs = [d for path, text in render["manifests"].items() if path.endswith(".yaml")
            for d in yaml.safe_load_all(text) if d]
    assert docs
    return docs


def daemonset(render: dict[str, Any]) -> dict[str, Any]:
    (ds,) = [d for d in objects(render) if d["kind"] == "DaemonSet"]
    return ds


def container(render: dict[str, Any]) -> dict[str, Any]:
    (agent,) = daemonset(render)["spec"]["template"]["spec"]["containers"]
    return agent


def valid_in(docs: list[dict[str, Any]], version: str) -> list[str]:
    """The problems kubernetes-validate finds in ``docs`` for ``version`` (a kind without a
    schema there is a problem: that API does not exist in that version); a kind in
    ``INTRODUCED`` is checked against the later of ``version`` and its first release."""
    problems = []
    for doc in docs:
        # a kind newer than the floor (placement's MutatingAdmissionPolicy) from its first release on
        first = INTRODUCED.get((doc["apiVersion"], doc["kind"]), version)
        try:
            kubernetes_validate.validate(doc, max(version, first, key=lambda v: tuple(map(int, v.split(".")))), strict=True)
        except kubernetes_validate.utils.SchemaNotFoundError:
            problems.append(f"{doc['kind']} {doc['apiVersion']}: no such API")
        except kubernetes_validate.ValidationError as exc:
            problems.append(f"{doc['kind']}: {exc.message}")
    return problems


RENDERED = [name for name in CASES if not name.startswith("bad-")]


@pytest.mark.parametrize("version", SUPPORTED)
@pytest.mark.parametrize("case", RENDERED)
def test_every_render_is_valid_in_every_supported_version(renders, case, version):
    assert valid_in(objects(renders[case]), version) == []


@pytest.mark.parametrize("case", RENDERED)
def test_rendered_args_parse_with_the_agent_cli(renders, case):
    args = build_parser().parse_args(container(renders[case])["args"])
    assert args.command == "run" and args.host_root == "/host"
    values = CASES[case]
    assert args.udev_mode == values.get("udev", {}).get("mode", "kernel")
    assert args.poll_interval == values.get("pollInterval", 5)
    assert args.resync_interval == values.get("resyncInterval", 600)
    assert args.metrics_port == values.get("metricsPort", 8080)


def test_the_chart_accepts_every_udev_mode_the_cli_accepts_and_refuses_others(renders):
    for mode in MODES:
        ds = daemonset(renders[f"udev-mode-{mode}"])
        assert f"--udev-mode={mode}" in container(renders[f"udev-mode-{mode}"])["args"]
        assert ds["spec"]["template"]["spec"]["hostNetwork"] is (mode == "udev")
    # inject:<socket> is the CLI's test interface (a socket a test binds), not a way to deploy
    assert "udev.mode must be kernel, udev, poll or off" in renders["bad-udev-mode"]["error"]


def _vt(version: str) -> tuple[int, ...]:
    return tuple(map(int, version.split(".")))


@pytest.mark.parametrize("version", SUPPORTED)
def test_placement_admission_follows_the_cluster_s_version(renders, version):
    """auto picks MutatingAdmissionPolicy v1 where the version serves it (GA in 1.36, KEP-3962;
    decided here by the upstream OpenAPI schemas kubernetes-validate ships) and the webhook
    below it, and what it picks exists in that very version: every object validates against
    that version's own schema, with no allowance for kinds newer than the floor, so the chart's
    kubeVersion (>= the floor) holds with placement on."""
    docs = objects(renders[f"placement-auto-{version}"])
    kinds = {(d["apiVersion"], d["kind"]) for d in docs}
    policy = ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy")
    webhook = ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration")
    probe = {"apiVersion": policy[0], "kind": policy[1], "metadata": {"name": "probe"}, "spec": {}}
    try:
        kubernetes_validate.validate(probe, version, strict=True)
        served = True
    except kubernetes_validate.utils.SchemaNotFoundError:
        served = False
    except kubernetes_validate.ValidationError:
        served = True
    assert served == (_vt(version) >= (1, 36, 0)), "the chart's 1.36 threshold is not where v1 appears upstream"
    if served:
        assert policy in kinds and webhook not in kinds
    else:
        assert webhook in kinds and policy not in kinds
    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except (kubernetes_validate.utils.SchemaNotFoundError, kubernetes_validate.ValidationError) as exc:
            problems.append(f"{doc['kind']} {doc['apiVersion']}: {exc}")
    assert problems == []


def test_placement_admission_takes_the_v1beta1_policy_where_the_cluster_serves_it(renders):
    kinds = {(d["apiVersion"], d["kind"]) for d in objects(renders["placement-auto-1.35-v1beta1-served"])}
    assert ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy") in kinds
    assert not any(kind == "MutatingWebhookConfiguration" for _, kind in kinds)


def test_an_admission_form_the_cluster_cannot_serve_is_refused_at_install(renders):
    """Rendering (helm install/template) fails with one message naming the form, what it needs,
    the cluster's version and what to set instead; no object is rendered."""
    policy = renders["bad-placement-policy-on-1.33"]
    assert "manifests" not in policy
    assert "placement.admission=policy needs MutatingAdmissionPolicy v1 (Kubernetes 1.36 or newer)" in policy["error"]
    assert "v1.33.4" in policy["error"] and "placement.admission=auto" in policy["error"]
    v1beta1 = renders["bad-placement-v1beta1-not-served"]
    assert "manifests" not in v1beta1
    assert "admissionregistration.k8s.io/v1beta1 MutatingAdmissionPolicy" in v1beta1["error"]
    assert "v1.35.0" in v1beta1["error"] and "--api-versions" in v1beta1["error"]
    word = renders["bad-placement-admission-word"]
    assert 'must be auto, policy, policy-v1beta1, webhook or none, not "mutating"' in word["error"]


def test_the_chart_s_default_admission_is_auto():
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["placement"]["admission"] == "auto"


def test_every_interval_the_chart_documents_is_a_value():
    values_text = (CHART / "values.yaml").read_text()
    values = yaml.safe_load(values_text)
    assert values["pollInterval"] == 5 and values["resyncInterval"] == 600
    assert "rescan every resyncInterval" not in values_text  # poll mode lists devices every pollInterval


def test_device_plugin_render_mounts_its_host_dir_read_write(renders):
    render = renders["device-plugin"]
    pod = daemonset(render)["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v.get("hostPath", {}).get("path", "").endswith("device-plugins")]
    assert volume["hostPath"]["path"] == CASES["device-plugin"]["devicePlugin"]["hostDir"]
    (mount,) = [m for m in container(render)["volumeMounts"] if m["name"] == volume["name"]]
    assert mount["mountPath"] == "/var/lib/kubelet/device-plugins" and not mount.get("readOnly")
    assert "--device-plugin=on" in container(render)["args"]


def test_a_serving_mode_requests_the_memory_grpcio_needs(renders):
    """grpcio's server adds ~16 MiB RSS in both serving modes (bench/dra.py): the request follows."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for case in ("device-plugin", "dra-auto"):
        resources = container(renders[case])["resources"]
        assert resources["requests"] == {"cpu": values["resources"]["requests"]["cpu"],
                                         "memory": values["servingMemoryRequest"]}
        assert resources["limits"] == values["resources"]["limits"]
    assert container(renders["default"])["resources"] == values["resources"]


def test_dra_render_mounts_the_plugin_s_directories_read_write_and_runs_as_root(renders):
    from tests.test_manifests import DRA_HOST_DIRS

    render = renders["dra-auto"]
    pod = daemonset(render)["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in container(render)["volumeMounts"]}
    for name, (path, kind) in DRA_HOST_DIRS.items():
        assert volumes[name] == {"path": path, "type": kind}
        assert mounts[name]["mountPath"] == path and not mounts[name].get("readOnly")
    assert "--dra=auto" in container(render)["args"]
    assert pod["securityContext"]["runAsUser"] == 0 and container(render)["securityContext"]["runAsUser"] == 0
    default = daemonset(renders["default"])["spec"]["template"]["spec"]
    assert not set(DRA_HOST_DIRS) & {v["name"] for v in default["volumes"]}


def test_device_classes_are_of_the_version_the_cluster_serves(renders):
    """dra.deviceClasses renders deploy/device-classes.yaml (v1, extendedResourceName) where the
    cluster serves resource.k8s.io/v1 (1.34+: GA), deploy/device-classes-v1beta1.yaml where it
    serves only v1beta1 (1.32-1.33 with the API on; discovery lists the kind), and refuses a
    cluster serving neither; without it no class is rendered."""
    def classes(case: str) -> list[dict[str, Any]]:
        return [d for d in objects(renders[case]) if d["kind"] == "DeviceClass"]

    def shipped(name: str) -> list[dict[str, Any]]:
        return [d for d in yaml.safe_load_all((REPO / "deploy" / name).read_text()) if d]

    assert classes("dra-auto") == []
    assert classes("dra-classes") == shipped("device-classes.yaml")  # the engine's default cluster: 1.36
    assert classes("dra-classes-1.34") == shipped("device-classes.yaml")
    assert classes("dra-classes-1.33-v1beta1-served") == shipped("device-classes-v1beta1.yaml")
    assert all("extendedResourceName" not in d["spec"] for d in classes("dra-classes-1.33-v1beta1-served"))
    refused = renders["bad-dra-classes-1.33-not-served"]
    assert "manifests" not in refused
    assert "dra.deviceClasses=true needs DeviceClasses of resource.k8s.io v1" in refused["error"]
    assert "v1.33.4" in refused["error"] and "--api-versions resource.k8s.io/v1beta1/DeviceClass" in refused["error"]


def test_optional_objects_render_only_when_asked(renders):
    kinds = {case: sorted(d["kind"] for d in objects(renders[case])) for case in ("default", "no-admission-policy", "pod-guard-evict")}
    assert "ValidatingAdmissionPolicy" in kinds["default"]
    assert "ValidatingAdmissionPolicy" not in kinds["no-admission-policy"]
    assert kinds["pod-guard-evict"].count("ClusterRole") == kinds["default"].count("ClusterRole") + 1


def test_the_default_render_runs_the_pod_daemonset_yaml_runs(renders):
    """The chart's default DaemonSet and the plain manifest describe the same container: the
    same security, probes, resources and host mounts (the chart adds its extra-rules ConfigMap
    and takes the catalogue from the image instead of a ConfigMap)."""
    (plain_ds,) = [d for d in yaml.safe_load_all((REPO / "daemonset.yaml").read_text()) if d and d["kind"] == "DaemonSet"]
    plain_pod, chart_pod = plain_ds["spec"]["template"]["spec"], daemonset(renders["default"])["spec"]["template"]["spec"]
    (plain,) = plain_pod["containers"]
    chart = container(renders["default"])
    for key in ("securityContext", "livenessProbe", "readinessProbe", "resources", "ports"):
        assert chart[key] == plain[key], key
    for key in ("securityContext", "hostNetwork", "tolerations", "priorityClassName"):
        assert chart_pod[key] == plain_pod[key], key

    def host_mounts(pod: dict[str, Any], agent: dict[str, Any]) -> dict[str, tuple[str, str, Any]]:
        volumes = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
        return {volumes[m["name"]]["path"]: (m["mountPath"], volumes[m["name"]].get("type", ""), m.get("recursiveReadOnly"))
                for m in agent["volumeMounts"] if m["name"] in volumes}

    assert host_mounts(chart_pod, chart) == host_mounts(plain_pod, plain)


def test_supported_versions_are_one_statement(renders):
    plain = [d for d in yaml.safe_load_all((REPO / "daemonset.yaml").read_text()) if d]
    everything = plain + [d for case in RENDERED for d in objects(renders[case])]
    assert valid_in(everything, FLOOR) == []
    assert valid_in(plain, BELOW_FLOOR), f"daemonset.yaml validates in {BELOW_FLOOR}: the floor {FLOOR} is too high"
    floor = ".".join(FLOOR.split(".")[:2])
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["kubeVersion"] == f">={FLOOR}-0"
    for doc in (REPO / "README.md", REPO / "deploy" / "install.md"):
        stated = set(re.findall(r"Kubernetes\s+(1\.\d+)\s+or\s+newer", doc.read_text()))
        assert stated == {floor}, f"{doc.name} states {stated or 'no supported version'}, not {floor}"
