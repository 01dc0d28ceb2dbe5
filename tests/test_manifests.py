"""daemonset.yaml and deploy/*.yaml: schema-valid, least privilege, in step with the CLI, the
catalogue in labels/ and the host paths discovery actually reads; the Helm chart in step too."""

from __future__ import annotations

import importlib.util
import json
import os
import posixpath
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import all_versions

from agent.cli import build_parser
from agent.config import IMAGE_RULES_DIR
from agent.discovery import DiscoveryConfig, discover
from agent.hostfs import HostFS
from agent.k8s_validation import qualified_name_errors
from tests.conftest import FIXTURES, LABELS_DIR, REPO

DAEMONSET = REPO / "daemonset.yaml"
DEPLOY = REPO / "deploy"
CHART = DEPLOY / "helm" / "node-feature-agent"
MANIFESTS = [DAEMONSET, *sorted(DEPLOY.glob("*.yaml"))]
#: the oldest Kubernetes the manifests support (ValidatingAdmissionPolicy v1 and a mount's
#: recursiveReadOnly are 1.30's), and every version from it to the newest schema shipped
#: (tests/test_helm_chart.py checks that the version before it does not validate)
FLOOR = "1.30.0"
SCHEMA_VERSIONS = tuple(v for v in sorted(set(all_versions()), key=lambda v: tuple(map(int, v.split("."))))
                        if tuple(map(int, v.split("."))) >= tuple(map(int, FLOOR.split("."))))
# kinds newer than the oldest version we support: checked against the first release serving them
INTRODUCED = {("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicy"): "1.34.0",
              ("resource.k8s.io/v1", "DeviceClass"): "1.34.0",
              ("resource.k8s.io/v1beta1", "DeviceClass"): "1.32.0",
              ("admissionregistration.k8s.io/v1beta1", "MutatingAdmissionPolicyBinding"): "1.34.0",
              ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy"): "1.36.0",
              ("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicyBinding"): "1.36.0"}
FIXTURE_CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []
FORBIDDEN_VERBS = {"update", "delete", "deletecollection", "escalate", "bind", "impersonate", "*"}
#: the one host mount not under --host-root (udev mode only): libudev reads /run/udev in its own mount namespace
UDEV_MOUNT = "/run/udev"
#: the only host /proc files discovery reads (test_every_host_file_discovery_reads_is_mounted proves it)
PROC_FILES = ("/proc/cpuinfo", "/proc/meminfo", "/proc/swaps", "/proc/modules", "/proc/sys/kernel/osrelease")
#: optional host files discovery tries but the DaemonSet cannot mount (a hostPath of a missing
#: /proc file fails the pod): /proc/config.gz exists only with CONFIG_IKCONFIG_PROC; the kernel
#: source then uses /boot/config-<release> (mounted); /proc/device-tree is a link into /sys
UNMOUNTABLE = ("/proc/config.gz", "/proc/device-tree")


def load(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def objects(kind: str, path: Path = DAEMONSET) -> list[dict]:
    return [d for d in load(path) if d["kind"] == kind]


def _load_renderer():
    spec = importlib.util.spec_from_file_location("render_catalogue_configmap", DEPLOY / "render_catalogue_configmap.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


renderer = _load_renderer()
(DS,) = objects("DaemonSet")
POD = DS["spec"]["template"]["spec"]
(CONTAINER,) = POD["containers"]
ARGS = CONTAINER["args"]
MOUNTS = {m["name"]: m for m in CONTAINER["volumeMounts"]}
VOLUMES = {v["name"]: v for v in POD["volumes"]}


def flag(name: str) -> list[str]:
    return [a.split("=", 1)[1] for a in ARGS if a.startswith(f"--{name}=")]


HOST_ROOT = flag("host-root")[0]


# -- schema ---------------------------------------------------------------------------------
@pytest.mark.parametrize("version", SCHEMA_VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_object_is_valid_against_the_kubernetes_schema(path, version):
    docs = load(path)
    assert docs, f"{path} holds no objects"
    for doc in docs:
        first = INTRODUCED.get((doc["apiVersion"], doc["kind"]), "1.0.0")
        kubernetes_validate.validate(doc, max(version, first, key=lambda v: tuple(map(int, v.split(".")))), strict=True)


def test_schema_validation_can_fail():
    broken = json.loads(json.dumps(DS))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsUsr"] = 0
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, SCHEMA_VERSIONS[-1], strict=True)


def test_namespaced_objects_share_the_namespace_and_it_allows_hostpath():
    (namespace,) = objects("Namespace")
    name = namespace["metadata"]["name"]
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    for doc in load(DAEMONSET):
        if doc["kind"] in ("ServiceAccount", "ConfigMap", "DaemonSet"):
            assert doc["metadata"]["namespace"] == name, doc["kind"]


# -- command line -----------------------------------------------------------------------------
def test_args_parse_with_the_agent_cli():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    assert "run" in subcommands, "the DaemonSet runs `run`: the agent's CLI must have it"
    args = parser.parse_args(ARGS)
    assert args.command == "run"
    assert args.host_root == "/host"
    assert args.rules == [IMAGE_RULES_DIR]


def test_args_use_the_agreed_run_flags():
    """The flag names agreed with the run-loop helper, with values the parser will accept."""
    assert ARGS[0] == "run"
    assert HOST_ROOT == "/host"
    assert flag("rules") == [IMAGE_RULES_DIR]
    assert flag("metrics-port") == ["8080"]
    assert flag("resync-interval") == ["600"]
    assert flag("udev-mode") == ["kernel"]
    for taint in flag("startup-taint"):
        assert re.fullmatch(r"[^=:]+(=[^:]*)?:(NoSchedule|PreferNoSchedule|NoExecute)", taint)
        assert not qualified_name_errors(taint.split(":")[0].split("=")[0])
    known = {"host-root", "rules", "config", "node-name", "metrics-port", "resync-interval", "udev-mode", "startup-taint",
             "pod-guard", "evict-orphans", "rules-from-cluster"}
    assert flag("rules-from-cluster") == ["on"]
    for arg in ARGS[1:]:
        assert arg.startswith("--") and arg[2:].split("=")[0] in known, arg


def test_node_name_comes_from_the_downward_api():
    env = {e["name"]: e for e in CONTAINER["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert build_parser().parse_args(["discover"]).host_root  # discover shares --host-root


# -- host access ------------------------------------------------------------------------------
def host_mounts() -> dict[str, str]:
    """host path -> container mount path, for every hostPath volume."""
    out = {}
    for name, volume in VOLUMES.items():
        if "hostPath" in volume:
            assert name in MOUNTS, f"hostPath volume {name} is never mounted"
            out[volume["hostPath"]["path"]] = MOUNTS[name]["mountPath"]
    return out


def test_every_hostpath_is_read_only_and_under_the_host_root():
    mounts = host_mounts()
    assert set(mounts) >= {"/sys", "/etc/os-release", "/boot", "/lib/modules", *PROC_FILES}
    assert "/proc" not in mounts, "the host's whole /proc shows every host process: mount only the files read"
    assert UDEV_MOUNT not in mounts, "the default is --udev-mode=kernel: /run/udev only in udev mode"
    for name, volume in VOLUMES.items():
        if "hostPath" in volume:
            assert MOUNTS[name].get("readOnly") is True, f"{name} is writable"
            kind = volume["hostPath"].get("type", "")
            path = volume["hostPath"]["path"]
            assert kind == ("File" if path.startswith("/proc/") or path == "/etc/os-release" else
                            "" if path in ("/boot", "/lib/modules") else
                            "DirectoryOrCreate" if path.endswith("features.d") else "Directory"), (path, kind)
            if kind != "File":  # directories: sub-mounts read-only too where the runtime can
                assert MOUNTS[name].get("recursiveReadOnly") == "IfPossible", name
    for host_path, mount_path in mounts.items():
        assert host_path not in ("/", "/dev", "/var/run", "/run", "/var/run/docker.sock", "/run/containerd")
        if host_path == UDEV_MOUNT:
            assert mount_path == UDEV_MOUNT
        else:
            assert mount_path == posixpath.join(HOST_ROOT, host_path.lstrip("/"))


def test_catalogue_volume_is_mounted_where_rules_point():
    catalogue = next(n for n, m in MOUNTS.items() if m["mountPath"] == IMAGE_RULES_DIR)
    assert MOUNTS[catalogue]["readOnly"] is True
    assert "subPath" not in MOUNTS[catalogue], "subPath mounts never see ConfigMap updates (no hot reload)"
    (configmap,) = [c for c in objects("ConfigMap") if c["metadata"]["name"] == "node-feature-agent-catalogue"]
    assert VOLUMES[catalogue]["configMap"]["name"] == configmap["metadata"]["name"]


# removed when the test process ends (TemporaryDirectory's finalizer); was left in /tmp per run
_WORKER_CONFIG_DIR = tempfile.TemporaryDirectory(prefix="nfa-shipped-worker-config-")


def shipped_worker_config() -> Path:
    """The DaemonSet's worker-config ConfigMap content, written where a test can pass it as --config."""
    (configmap,) = [c for c in objects("ConfigMap") if c["metadata"]["name"] == "node-feature-agent-worker-config"]
    path = Path(_WORKER_CONFIG_DIR.name) / "nfd-worker.conf"
    path.write_text(configmap["data"]["nfd-worker.conf"])
    return path


def test_worker_config_configmap_is_valid_and_mounted_where_config_points():
    from agent.worker_config import load_worker_config

    loaded = load_worker_config(str(shipped_worker_config()))
    assert loaded.warnings == () and dict(loaded.discovery.sources) == {}  # shipped: NFD's defaults
    (config,) = flag("config")
    mount = MOUNTS["worker-config"]
    assert config == mount["mountPath"] + "/nfd-worker.conf" and mount["readOnly"] is True
    assert "subPath" not in mount, "subPath mounts never see ConfigMap updates (no hot reload)"
    assert VOLUMES["worker-config"]["configMap"]["name"] == "node-feature-agent-worker-config"
    # the commented example in the shipped file parses too once uncommented
    _header, *body = shipped_worker_config().read_text().splitlines(keepends=True)
    text = "".join(line[1:] if line.startswith("#") else line for line in body)
    assert "pci" in load_worker_config_text(text).discovery.sources


def load_worker_config_text(text: str):
    from agent.worker_config import parse_worker_config

    return parse_worker_config(text, "shipped")


def discovery_flags(host_root: Path) -> list[str]:
    """The DaemonSet's discovery-relevant flags (those `discover` takes), re-rooted at a fixture."""
    discover_parser = build_parser()._subparsers._group_actions[0].choices["discover"]
    accepted = {opt for action in discover_parser._actions for opt in action.option_strings}
    out = []
    for arg in ARGS[1:]:
        name = arg.split("=", 1)[0]
        if name in accepted:
            out.append(f"--host-root={host_root}" if name == "--host-root" else
                       f"--config={shipped_worker_config()}" if name == "--config" else arg)
    assert any(a.startswith("--host-root=") for a in out)
    return out


@pytest.mark.parametrize("case", FIXTURE_CASES)
def test_what_the_image_would_run_discovers_a_fixture(case):
    script = Path(sys.executable).parent / "node-feature-agent"
    if not script.exists():
        pytest.skip("node-feature-agent console script not installed in this environment")
    root = FIXTURES / case
    # a recording of /sys alone (no /proc was recorded) is a partial host root, said so by flag
    partial = [] if (root / "proc").is_dir() else ["--allow-partial-host-root"]
    done = subprocess.run([str(script), "--log-level=error", "discover", *discovery_flags(root), *partial],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["labels"], f"{case}: no labels"
    assert result["labels"] == discover(HostFS(root), DiscoveryConfig()).labels


def image_run_args(host_root: Path) -> list[str]:
    """The DaemonSet's args as they are, re-rooted at a fixture host and the repo's labels/ (the
    image copies labels/ to --rules, checked in tests/test_dockerfile.py), with the metrics port
    moved to a free loopback one (8080 may be taken on a shared test machine)."""
    out = []
    for arg in ARGS:
        name = arg.split("=", 1)[0]
        if name == "--host-root":
            arg = f"--host-root={host_root}"
        elif name == "--rules":
            arg = f"--rules={LABELS_DIR}"
        elif name == "--metrics-port":
            arg = "--metrics-port=0"
        elif name == "--config":
            arg = f"--config={shipped_worker_config()}"
        out.append(arg)
    return [*out, "--metrics-address=127.0.0.1"]


@pytest.mark.slow
def test_what_the_image_would_run_labels_its_node_and_stops_on_sigterm(tmp_path):
    """The container's command (console script + the DaemonSet's args, NODE_NAME from the
    environment) against the in-repo API server: it labels the Node, removes the startup taint
    and exits 0 on SIGTERM, as the kubelet stops it."""
    import signal
    import time

    from tests.support.apiserver import FakeApiServer

    script = Path(sys.executable).parent / "node-feature-agent"
    if not script.exists():
        pytest.skip("node-feature-agent console script not installed in this environment")
    node_name = "image-node-1"
    (taint,) = flag("startup-taint")
    taint_key, effect = taint.split(":")[0].split("=")[0], taint.rsplit(":", 1)[1]
    with FakeApiServer(bookmark_interval=0.5) as server:
        server.add_node(node_name, register_taints=[{"key": taint_key, "effect": effect}])
        env = {**os.environ, "NODE_NAME": node_name, "KUBECONFIG": str(server.kubeconfig(tmp_path / "kubeconfig"))}
        env.pop("NODE_FEATURE_AGENT_RULES", None)
        log_path = tmp_path / "agent.log"
        with open(log_path, "w") as log:
            proc = subprocess.Popen([str(script), *image_run_args(FIXTURES / "coral-usb")], env=env,
                                    stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.monotonic() + 60
            while True:
                node = server.node(node_name)
                labels = node["metadata"].get("labels") or {}
                taints = [t["key"] for t in node["spec"].get("taints") or []]
                if labels.get("accelerators/edgetpu") == "true" and taint_key not in taints:
                    break
                assert proc.poll() is None, log_path.read_text()
                assert time.monotonic() < deadline, f"node not labelled: {log_path.read_text()}"
                time.sleep(0.05)
            assert any(k.startswith("feature.node.kubernetes.io/usb-") for k in labels)
            assert node["status"]["capacity"]["node-feature-agent.io/edgetpu"] == "1"
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        # labels stay after shutdown (removing them is `clean`'s job)
        assert server.node(node_name)["metadata"]["labels"].get("accelerators/edgetpu") == "true"


@pytest.mark.parametrize("case", FIXTURE_CASES)
def test_every_host_file_discovery_reads_is_mounted(case):
    """A source reading a host path the DaemonSet does not mount would see nothing in a pod."""
    root = FIXTURES / case
    read: set[str] = set()
    host = HostFS(root, recorder=lambda operation, path, outcome: read.add(path))
    discover(host, DiscoveryConfig())
    from agent.sources.cpu import LIVE_FACTS_PATH  # written by snapshot, never on a real host
    from agent.sources.cpu_ownproc import OWN_PROC_FILES  # kernel-wide: read from the agent's own /proc in a pod

    mounted = [h for h in host_mounts() if h != UDEV_MOUNT]
    plain = HostFS(root)
    present = {p for p in read if plain.exists(p) and p != LIVE_FACTS_PATH and p not in OWN_PROC_FILES and p != "/"
               and not any(p == u or p.startswith(u + "/") for u in UNMOUNTABLE)}
    unmounted = sorted(p for p in present if not any(p == m or p.startswith(m.rstrip("/") + "/") for m in mounted)
                       and not any(m.startswith(p.rstrip("/") + "/") for m in mounted))
    assert not unmounted, f"{case}: discovery reads host paths the DaemonSet does not mount: {unmounted[:10]}"


# -- security -------------------------------------------------------------------------------------
AGENT_UID = 10001  # its own, not 65534 "nobody" (shared by every image that uses it)


def test_pod_and_container_security():
    pod = POD["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == pod["runAsGroup"] == AGENT_UID
    assert pod["seccompProfile"]["type"] == "RuntimeDefault"
    ctx = CONTAINER["securityContext"]
    assert ctx["runAsNonRoot"] is True and ctx["runAsUser"] == ctx["runAsGroup"] == AGENT_UID
    assert f"USER {AGENT_UID}:{AGENT_UID}" in (REPO / "Dockerfile").read_text()
    assert ctx["readOnlyRootFilesystem"] is True
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["privileged"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["seccompProfile"]["type"] == "RuntimeDefault"
    for key in ("hostPID", "hostIPC"):
        assert not POD.get(key)
    assert POD["hostNetwork"] is False, "the default udev mode is kernel uevents, which need no hostNetwork"
    assert POD["automountServiceAccountToken"] is True


def test_scheduling_probes_resources_and_rollout():
    assert {"operator": "Exists"} in POD["tolerations"]
    assert POD["priorityClassName"] == "system-node-critical"
    assert DS["spec"]["updateStrategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}}
    (port,) = CONTAINER["ports"]
    assert port == {"name": "metrics", "containerPort": int(flag("metrics-port")[0]), "protocol": "TCP"}
    assert CONTAINER["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert CONTAINER["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    # sized from bench/latency.py's measured steady RSS (55.3 MiB): request above it, limit 2x; no CPU limit
    assert CONTAINER["resources"] == {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    assert "bench/latency.py" in DAEMONSET.read_text()


# -- RBAC -----------------------------------------------------------------------------------------
def all_cluster_roles() -> list[dict]:
    return [d for path in MANIFESTS for d in load(path) if d["kind"] in ("ClusterRole", "Role")]


def test_rbac_is_minimal():
    for role in all_cluster_roles():
        for rule in role["rules"]:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule.get(field, []), f"{role['metadata']['name']}: wildcard {field}"
            if rule["resources"] != ["resourceslices"]:  # DRA: the driver writes its slices (deploy/dra.md)
                assert not FORBIDDEN_VERBS & set(rule["verbs"]), f"{role['metadata']['name']}: {rule['verbs']}"
            assert "nonResourceURLs" not in rule and "resourceNames" not in rule
    (agent,) = objects("ClusterRole")
    granted = {(g, r, v) for rule in agent["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {
        ("", "nodes", "get"), ("", "nodes", "list"), ("", "nodes", "watch"), ("", "nodes", "patch"),
        ("", "nodes/status", "patch"),
        # --rules-from-cluster: NFD's objects, read only
        ("nfd.k8s-sigs.io", "nodefeaturerules", "list"), ("nfd.k8s-sigs.io", "nodefeaturerules", "watch"),
        ("nfd.k8s-sigs.io", "nodefeatures", "list"), ("nfd.k8s-sigs.io", "nodefeatures", "watch"),
        # --dra: this node's ResourceSlices (the admission policy keeps it to its own node's),
        # ResourceClaims read only
        *{("resource.k8s.io", "resourceslices", v) for v in ("list", "watch", "create", "update", "delete")},
        *{("resource.k8s.io", "resourceclaims", v) for v in ("get", "list", "watch")},
    }
    # Events: create only, core/v1 only, only in the namespace the code posts Node events to
    from agent.reconcile.events import EVENT_NAMESPACE

    (events,) = objects("Role")
    assert events["metadata"]["namespace"] == EVENT_NAMESPACE
    assert events["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    (binding,) = objects("RoleBinding")
    assert binding["metadata"]["namespace"] == EVENT_NAMESPACE
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": events["metadata"]["name"]}


def test_bindings_point_at_the_agent_service_account():
    (agent_sa,) = objects("ServiceAccount")
    assert POD["serviceAccountName"] == agent_sa["metadata"]["name"]
    roles = {r["metadata"]["name"] for r in all_cluster_roles()}
    for path in MANIFESTS:
        (sa,) = objects("ServiceAccount", path) or [agent_sa]  # a file with its own workload binds its own
        for binding in (d for d in load(path) if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
            assert binding["roleRef"]["name"] in roles
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": sa["metadata"]["namespace"]}]


def test_pod_guard_rbac_is_separate_and_read_mostly():
    (role,) = objects("ClusterRole", DEPLOY / "pod-guard-rbac.yaml")
    granted = {(r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    # exactly what agent/runtime/pod_guard.py calls: one field-selected list, evictions, Events on pods
    assert granted == {("pods", "list"), ("pods/eviction", "create"), ("events", "create")}
    (main_role,) = objects("ClusterRole")
    assert not any("pods" in r for rule in main_role["rules"] for r in rule["resources"])


def test_admission_policy_is_shipped_on_by_default():
    """What it admits is tested with cel-python in tests/test_admission_policy.py."""
    (policy,) = [p for p in objects("ValidatingAdmissionPolicy") if p["metadata"]["name"].endswith("-own-node")]
    (binding,) = [b for b in objects("ValidatingAdmissionPolicyBinding") if b["metadata"]["name"].endswith("-own-node")]
    assert VALUES["admissionPolicy"]["enabled"] is True
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["operations"] == ["UPDATE"] and set(rule["resources"]) == {"nodes", "nodes/status"}
    (sa,) = objects("ServiceAccount")
    username = f"system:serviceaccount:{sa['metadata']['namespace']}:{sa['metadata']['name']}"
    assert f"'{username}'" in spec["matchConditions"][0]["expression"]
    assert all(v["reason"] == "Forbidden" for v in spec["validations"])
    expressions = " ".join(v["expression"] for v in spec["validations"])
    assert "request.userInfo.extra['authentication.kubernetes.io/node-name'][0]" in expressions
    assert "object.metadata.name ==" in expressions
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}


# -- catalogue ConfigMap --------------------------------------------------------------------------
def test_catalogue_configmap_is_in_sync_with_labels_dir():
    manifest = DAEMONSET.read_text()
    assert renderer.replace_blocks(manifest, renderer.rendered_blocks(LABELS_DIR)) == manifest, (
        "daemonset.yaml's catalogue is stale: python deploy/render_catalogue_configmap.py --write daemonset.yaml")
    (configmap,) = [c for c in objects("ConfigMap") if c["metadata"]["name"] == "node-feature-agent-catalogue"]
    items = VOLUMES[next(n for n, m in MOUNTS.items() if m["mountPath"] == IMAGE_RULES_DIR)]["configMap"]["items"]
    on_disk = {p.relative_to(LABELS_DIR).as_posix(): p.read_text() for p in LABELS_DIR.rglob("*")
               if p.is_file() and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(LABELS_DIR).parts)}
    mounted = {item["path"]: (configmap.get("data") or {})[item["key"]] for item in items}
    assert mounted == on_disk


def test_catalogue_renderer_maps_paths_and_refuses_what_a_configmap_cannot_hold(tmp_path):
    labels = tmp_path / "labels"
    (labels / "accelerators").mkdir(parents=True)
    (labels / "accelerators/edgetpu").write_text("feature.node.kubernetes.io/usb-fe_1a6e_089a.present\n")
    (labels / ".git").mkdir()
    (labels / ".git/HEAD").write_text("ref: x\n")
    (labels / "accelerators/.edgetpu.swp").write_text("junk")
    files = renderer.catalogue_files(labels)
    assert [(f.path, f.key) for f in files] == [("accelerators/edgetpu", "accelerators.edgetpu")]
    blocks = renderer.rendered_blocks(labels)
    configmap = yaml.safe_load(blocks["catalogue-configmap"])
    kubernetes_validate.validate(configmap, SCHEMA_VERSIONS[-1], strict=True)
    assert configmap["data"] == {"accelerators.edgetpu": "feature.node.kubernetes.io/usb-fe_1a6e_089a.present\n"}
    assert yaml.safe_load(blocks["catalogue-items"]) == {"items": [{"key": "accelerators.edgetpu", "path": "accelerators/edgetpu"}]}

    (labels / "accelerators.edgetpu").write_text("clash\n")
    with pytest.raises(renderer.CatalogueError, match="also the key"):
        renderer.catalogue_files(labels)
    (labels / "accelerators.edgetpu").unlink()
    (labels / "accelerators/blob").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(renderer.CatalogueError, match="not UTF-8"):
        renderer.catalogue_files(labels)


def test_catalogue_check_mode_reports_a_stale_manifest(tmp_path):
    labels = tmp_path / "labels"
    (labels / "ns").mkdir(parents=True)
    (labels / "ns/name").write_text("a.example/b\n")
    stale = tmp_path / "daemonset.yaml"
    stale.write_text(DAEMONSET.read_text())
    script = [sys.executable, str(DEPLOY / "render_catalogue_configmap.py"), "--labels", str(labels)]
    assert subprocess.run(script + ["--check", str(stale)], capture_output=True, timeout=60).returncode == 1
    assert subprocess.run(script + ["--write", str(stale)], capture_output=True, timeout=60).returncode == 0
    assert subprocess.run(script + ["--check", str(stale)], capture_output=True, timeout=60).returncode == 0
    docs = [d for d in yaml.safe_load_all(stale.read_text()) if d]
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "node-feature-agent-catalogue"]
    assert configmap["data"] == {"ns.name": "a.example/b\n"}


# -- Helm chart -----------------------------------------------------------------------------------
# The chart's template text, read; tests/test_helm_chart.py renders it with Helm's own engine
# and validates every render.
TEMPLATES = sorted((CHART / "templates").glob("*"))
VALUES = yaml.safe_load((CHART / "values.yaml").read_text()) if CHART.is_dir() else {}


def template_text() -> str:
    return "\n".join(t.read_text() for t in TEMPLATES)


def test_chart_metadata():
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and chart["name"] == "node-feature-agent" and chart["type"] == "application"
    pyproject_version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert chart["appVersion"] == pyproject_version
    assert CONTAINER["image"].endswith(f":{pyproject_version}")
    assert VALUES["image"]["repository"] == CONTAINER["image"].rsplit(":", 1)[0]


def test_chart_templates_reference_only_existing_values_and_use_them_all():
    used = set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", template_text()))
    assert used

    def exists(path: str) -> bool:
        node = VALUES
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True

    assert sorted(p for p in used if not exists(p)) == []
    top_level_used = {p.split(".")[0] for p in used}
    assert sorted(set(VALUES) - top_level_used) == []


def test_chart_template_blocks_balance():
    for template in TEMPLATES:
        actions = re.findall(r"\{\{-?\s*(if|range|with|define|end|else)\b", template.read_text())
        depth = 0
        for action in actions:
            if action in ("if", "range", "with", "define"):
                depth += 1
            elif action == "end":
                depth -= 1
            assert depth >= 0, f"{template.name}: unbalanced {{{{ end }}}}"
        assert depth == 0, f"{template.name}: unclosed block"


def test_chart_daemonset_matches_the_plain_manifest():
    text = (CHART / "templates/daemonset.yaml").read_text()
    for flag_name in ("host-root=/host", f"rules={IMAGE_RULES_DIR}", "metrics-port=", "resync-interval=", "udev-mode=", "startup-taint=", "--pod-guard", "--evict-orphans"):
        assert flag_name in text, flag_name
    for host_path, mount_path in host_mounts().items():
        assert f"path: {host_path}\n" in text and f"mountPath: {mount_path}\n" in text
    # + the extra-rules ConfigMap, /run/udev (udev mode only), /proc/config.gz (hostProcConfigGz only)
    # + the worker-config ConfigMap
    assert text.count("readOnly: true") == len(host_mounts()) + 4
    assert "--config=/etc/node-feature-agent/worker-config/nfd-worker.conf" in text
    assert "mountPath: /etc/node-feature-agent/worker-config\n" in text
    assert VALUES["hostProcConfigGz"] is False and "host-proc-config-gz" in DAEMONSET.read_text()
    assert text.count("recursiveReadOnly: IfPossible") == sum(m.get("recursiveReadOnly") == "IfPossible" for m in MOUNTS.values())
    udev_block = text[text.index('{{- if eq $mode "udev" }}'):]
    assert "mountPath: /run/udev" in udev_block.split("{{- end }}")[0]
    for line in ("readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false", "privileged: false",
                 'drop: ["ALL"]', f"runAsUser: {{{{ if $root }}}}0{{{{ else }}}}{AGENT_UID}{{{{ end }}}}",
                 "runAsNonRoot: {{ not $root }}", "{{- $root := or $plugin $dra -}}", "type: RuntimeDefault",
                 "path: /healthz", "path: /readyz", "automountServiceAccountToken: true", "fieldPath: spec.nodeName"):
        assert line in text, line
    assert 'hostNetwork: {{ eq $mode "udev" }}' in text
    assert VALUES["resources"] == CONTAINER["resources"]
    assert VALUES["tolerations"] == POD["tolerations"]
    assert VALUES["updateStrategy"] == DS["spec"]["updateStrategy"]
    assert VALUES["priorityClassName"] == POD["priorityClassName"]
    assert VALUES["udev"]["mode"] == flag("udev-mode")[0]
    assert str(VALUES["resyncInterval"]) == flag("resync-interval")[0]
    assert str(VALUES["metricsPort"]) == flag("metrics-port")[0]
    assert VALUES["startupTaints"] == flag("startup-taint")


def test_device_plugin_mode_adds_one_read_write_mount_and_root_only_when_on():
    """Chart: the device-plugins directory (read-write, the only one) and UID 0 only under
    devicePlugin.enabled; plain manifest: the same pieces as a commented switch."""
    text = (CHART / "templates/daemonset.yaml").read_text()
    assert VALUES["devicePlugin"]["enabled"] is False
    blocks = text.split("{{- if $plugin }}")[1:]
    assert len(blocks) == 3
    bodies = [b.split("{{- end }}")[0] for b in blocks]
    assert "--device-plugin=on" in bodies[0]
    assert "mountPath: /var/lib/kubelet/device-plugins" in bodies[1] and "readOnly" not in bodies[1]
    assert "path: {{ .Values.devicePlugin.hostDir | quote }}\n            type: Directory" in bodies[2]
    assert VALUES["devicePlugin"]["hostDir"] == "/var/lib/kubelet/device-plugins"
    assert text.count("/var/lib/kubelet/device-plugins") == 1
    plain = DAEMONSET.read_text()
    assert "/var/lib/kubelet/device-plugins" not in yaml.safe_dump(DS)  # off by default
    for piece in ("# - --device-plugin=on", "#   mountPath: /var/lib/kubelet/device-plugins",
                  "#     path: /var/lib/kubelet/device-plugins",
                  "runAsUser: 10001    # DEVICE-PLUGIN SWITCH / DRA SWITCH: 0"):
        assert piece in plain, piece


DRA_HOST_DIRS = {"dra-registry": ("/var/lib/kubelet/plugins_registry", "Directory"),
                 "dra-plugin": ("/var/lib/kubelet/plugins/node-feature-agent.io", "DirectoryOrCreate"),
                 "cdi": ("/var/run/cdi", "DirectoryOrCreate")}
"""The kubelet DRA plugin's host directories: kubelet's plugin watcher directory
(``pkg/kubelet/pluginmanager``, ``<root-dir>/plugins_registry``), the driver's own directory
under ``<root-dir>/plugins`` and CDI's spec directory (``/var/run/cdi``, the CDI spec's
dynamic directory); each at the host's own path in the pod, because kubelet dials the socket
path the plugin reports in ``GetInfo``."""


def test_dra_mode_mounts_the_plugin_s_directories_and_root_only_when_on():
    """Chart: the three DRA directories (read-write, at their host paths) only when dra.mode is
    not off; plain manifest: DRA off, the same pieces as a commented switch."""
    text = (CHART / "templates/daemonset.yaml").read_text()
    assert VALUES["dra"]["mode"] == "off"
    blocks = text.split("{{- if $dra }}")[1:]
    assert len(blocks) == 3
    bodies = [b.split("{{- end }}")[0] for b in blocks]
    assert "--dra={{ .Values.dra.mode }}" in bodies[0]
    for name, (path, kind) in DRA_HOST_DIRS.items():
        assert f"- name: {name}\n              mountPath: {path}\n" in bodies[1], name
        assert f"- name: {name}\n          hostPath:\n            path: {path}\n            type: {kind}\n" in bodies[2]
    assert "readOnly" not in bodies[1]
    plain = DAEMONSET.read_text()
    dumped = yaml.safe_dump(DS)
    assert "--dra" not in dumped and not any(path in dumped for path, _ in DRA_HOST_DIRS.values())  # off by default
    for name, (path, kind) in DRA_HOST_DIRS.items():
        for piece in (f"# - name: {name}\n            #   mountPath: {path}\n",
                      f"# - name: {name}\n        #   hostPath:\n        #     path: {path}\n        #     type: {kind}\n"):
            assert piece in plain, piece
    assert "# - --dra=auto" in plain


def test_chart_rbac_matches_the_plain_manifest():
    text = (CHART / "templates/rbac.yaml").read_text()
    main, _, guarded = text.partition("{{- if .Values.podGuard.enabled }}")
    assert "pods" not in main, "pod rules must only render with podGuard.enabled"
    assert '"pods"' in guarded and "pods/eviction" in guarded
    outside_dra = text.split("{{- if ne (toString .Values.dra.mode)")[0]
    for verb in FORBIDDEN_VERBS - {"*"}:
        assert f'"{verb}"' not in outside_dra
    assert '"*"' not in text
