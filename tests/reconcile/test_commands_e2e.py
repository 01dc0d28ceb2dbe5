"""``apply --once`` and ``clean`` as real processes (the installed console script) against the
in-repo API server, with a recorded host tree as the host root."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent.desired import ANNOTATION_OWNED_LABELS, OWNERSHIP_ANNOTATIONS
from tests.conftest import FIXTURES

# a plain import: a broken API server module must fail these tests, never skip them
from tests.support.apiserver import FakeApiServer

NODE = "coral-usb-1"
CLI = str(Path(sys.executable).parent / "node-feature-agent")
FOREIGN = {"kubernetes.io/hostname": NODE, "team.example.com/owner": "vision"}

pytestmark = pytest.mark.slow


@pytest.fixture
def server():
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels=FOREIGN, capacity={"cpu": "4", "memory": "8Gi", "pods": "110"})
        yield srv


def cli(*args: str, kubeconfig: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([CLI, "--log-format", "json", *args, "--node-name", NODE, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=timeout)


def apply(kubeconfig: Path, *extra: str) -> subprocess.CompletedProcess:
    return cli("apply", "--once", "--host-root", str(FIXTURES / "coral-usb"), "--format", "json", *extra, kubeconfig=kubeconfig)


def test_apply_once_then_restart_then_clean(server, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)

    done = apply(kubeconfig)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["error"] is None and report["changed"] and report["writes"] >= 1
    desired = report["desired"]["labels"]
    assert desired, "the coral-usb host must produce labels"
    node = server.get_node(NODE)
    labels = node["metadata"]["labels"]
    for key, value in desired.items():
        assert labels[key] == value
    assert {k: labels[k] for k in FOREIGN} == FOREIGN
    recorded = set(node["metadata"]["annotations"][ANNOTATION_OWNED_LABELS].split(","))
    assert recorded == set(desired) - set(FOREIGN)
    assert len(list(server.writes(NODE))) == report["writes"]

    server.reset_requests()
    again = apply(kubeconfig)  # a new process, same hardware: nothing to write
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["writes"] == 0
    assert list(server.writes(NODE)) == []

    cleaned = cli("clean", "--format", "json", kubeconfig=kubeconfig)
    assert cleaned.returncode == 0, cleaned.stderr
    assert json.loads(cleaned.stdout)["clean"] is True
    node = server.get_node(NODE)
    assert node["metadata"]["labels"] == FOREIGN
    assert not set(OWNERSHIP_ANNOTATIONS) & set(node["metadata"].get("annotations") or {})

    server.reset_requests()
    twice = cli("clean", kubeconfig=kubeconfig)
    assert twice.returncode == 0 and "clean (0 write(s))" in twice.stdout
    assert list(server.writes(NODE)) == []


def test_apply_that_cannot_read_the_topology_keeps_the_label_an_earlier_run_put(server, tmp_path):
    """A one-shot run has no earlier answer: with one CPU's topology file unreadable (a
    directory where the file was: EISDIR) it removes no label, so the SMT label the earlier
    run put there stays and stays ours; the same host readable again changes nothing."""
    smt = "feature.node.kubernetes.io/cpu-hardware_multithreading"
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    assert apply(kubeconfig).returncode == 0
    assert server.get_node(NODE)["metadata"]["labels"][smt] == "true"

    host = tmp_path / "host"
    shutil.copytree(FIXTURES / "coral-usb", host, symlinks=True)
    broken = host / "sys/devices/system/cpu/cpu5/topology/thread_siblings_list"
    broken.unlink()
    broken.mkdir()
    server.reset_requests()
    done = cli("apply", "--once", "--host-root", str(host), "--format", "json", kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    assert smt not in json.loads(done.stdout)["desired"]["labels"]  # undetermined: not published...
    node = server.get_node(NODE)
    assert node["metadata"]["labels"][smt] == "true"  # ...and not removed
    assert smt in node["metadata"]["annotations"][ANNOTATION_OWNED_LABELS].split(",")
    assert list(server.writes(NODE)) == []
    assert "cpu.topology" in done.stderr


def test_dry_run_prints_the_diff_and_writes_nothing(server, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    done = cli("apply", "--once", "--dry-run", "--host-root", str(FIXTURES / "coral-usb"), kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    assert "would apply" in done.stdout and "added label" in done.stdout
    assert list(server.writes(NODE)) == []


def test_unreachable_api_exits_non_zero(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    done = apply(kubeconfig, "--retries", "1")
    assert done.returncode == 1
    assert "unreachable" in json.loads(done.stdout)["error"]
    cleaned = cli("clean", "--retries", "1", kubeconfig=kubeconfig)
    assert cleaned.returncode == 1 and "ERROR" in cleaned.stdout


def test_missing_node_name_is_a_usage_error(tmp_path):
    done = subprocess.run([CLI, "clean", "--node-name", "", "--kubeconfig", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "NODE_NAME" in done.stderr


@pytest.mark.parametrize("node_labels_form", ["node-json"])  # k=v lines carry no ownership record (see plan --help)
def test_plan_with_the_nodes_labels_equals_apply_dry_run_after_the_device_left(server, tmp_path, node_labels_form):
    """The agent's own labels are never its input: after the Coral is applied and then leaves,
    `plan --node-labels <the Node>` must not keep the Edge TPU label alive through its own
    stale dependency labels; it must equal what `apply --dry-run` would leave."""
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    assert apply(kubeconfig).returncode == 0
    node = server.get_node(NODE)
    node_file = tmp_path / "node-labels"
    if node_labels_form == "node-json":
        node_file.write_text(json.dumps(node))
    else:
        node_file.write_text("\n".join(f"{k}={v}" for k, v in node["metadata"]["labels"].items()))
    minimal = str(FIXTURES / "minimal")  # the same node with the accelerator gone
    dry = cli("apply", "--dry-run", "--host-root", minimal, "--format", "json", kubeconfig=kubeconfig)
    assert dry.returncode == 0, dry.stderr
    preview = subprocess.run([CLI, "plan", "--host-root", minimal, "--node-labels", str(node_file)],
                             capture_output=True, text=True, timeout=120)
    assert preview.returncode == 0, preview.stderr
    planned = json.loads(preview.stdout)["labels"]
    assert "accelerators/edgetpu" not in planned
    assert planned == json.loads(dry.stdout)["desired"]["labels"]
