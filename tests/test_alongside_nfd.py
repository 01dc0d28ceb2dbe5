"""The agent on a Node that Node Feature Discovery (NFD) also labels, and the move from NFD to
the agent, on the in-repo API server with NFD's own annotation names and update rules.

NFD's side is a port of what nfd-master does to a Node, from NFD's source
(kubernetes-sigs/node-feature-discovery, commit 76e6cc8cc0d54b8bce037098b72611ffdf66ef5a):
``api/nfd/v1alpha1/annotations_labels.go`` (the annotation names),
``pkg/nfd-master/nfd-master.go`` ``updateNodeObject`` (its record: sorted, comma-separated keys,
``feature.node.kubernetes.io/`` stripped; removal only of keys in the old record) and
``createPatches`` (add what is absent, replace a different value when
``restrictions.allowOverwrite``, default true), and ``prune`` (what ``nfd-master -prune`` and the
chart's uninstall job remove). The agent's side is the real ``apply`` and ``run`` processes.
deploy/nfd.md "Alongside NFD, or instead of it" is the prose of what these tests assert.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.desired import ANNOTATION_OWNED_LABELS
from tests.conftest import FIXTURES, LABELS_DIR
from tests.support.apiserver import FakeApiServer

NODE = "edge-1"
CLI = str(Path(sys.executable).parent / "node-feature-agent")
HOST = FIXTURES / "coral-usb"
#: nfd.node.kubernetes.io/* (api/nfd/v1alpha1/annotations_labels.go)
NFD_FEATURE_LABELS = "nfd.node.kubernetes.io/feature-labels"
NFD_EXTENDED_RESOURCES = "nfd.node.kubernetes.io/extended-resources"
NFD_FEATURE_ANNOTATIONS = "nfd.node.kubernetes.io/feature-annotations"
NFD_TAINTS = "nfd.node.kubernetes.io/taints"
NFD_NS = "feature.node.kubernetes.io"

pytestmark = pytest.mark.slow


def nfd_record(keys: list[str]) -> str:
    """updateNodeObject: the default namespace stripped, sorted, joined with commas."""
    return ",".join(sorted(k.removeprefix(NFD_NS + "/") for k in keys))


def nfd_recorded(node: dict[str, Any]) -> set[str]:
    """stringToNsNames: the record's keys, the default namespace put back."""
    value = (node["metadata"].get("annotations") or {}).get(NFD_FEATURE_LABELS, "")
    return {k if "/" in k else f"{NFD_NS}/{k}" for k in value.split(",") if k}


def nfd_master_pass(server: FakeApiServer, labels: dict[str, str], *, allow_overwrite: bool = True) -> list[tuple[str, str]]:
    """One nfd-master update of the Node's labels and their record (createPatches); the
    (op, key) pairs it patched."""
    ops: list[tuple[str, str]] = []

    def update(node: dict[str, Any]) -> None:
        live, annotations = node["metadata"].setdefault("labels", {}), node["metadata"].setdefault("annotations", {})
        old = nfd_recorded(node)
        for key in old:
            if key in live and key not in labels:
                ops.append(("remove", key))
                del live[key]
        for key, value in labels.items():
            if key not in live:
                ops.append(("add", key))
                live[key] = value
            elif live[key] != value and (key not in old or allow_overwrite):
                ops.append(("replace", key))
                live[key] = value
        if labels:
            annotations[NFD_FEATURE_LABELS] = nfd_record(list(labels))
        else:
            annotations.pop(NFD_FEATURE_LABELS, None)

    server.edit_node(NODE, update)
    return ops


def nfd_prune(server: FakeApiServer) -> None:
    """nfd-master -prune: its labels (by its record), then every nfd.node.kubernetes.io annotation."""
    nfd_master_pass(server, {})

    def drop_annotations(node: dict[str, Any]) -> None:
        annotations = node["metadata"].get("annotations") or {}
        for key in [k for k in annotations if k.startswith("nfd.node.kubernetes.io")]:
            del annotations[key]

    server.edit_node(NODE, drop_annotations)


def cli(*args: str, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "--log-format", "json", *args, "--node-name", NODE, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=120, check=False)


def apply(kubeconfig: Path, host: Path = HOST) -> dict[str, Any]:
    done = cli("apply", "--once", "--host-root", str(host), "--rules", str(LABELS_DIR), "--format", "json",
               kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def agent_owned(node: dict[str, Any]) -> set[str]:
    value = (node["metadata"].get("annotations") or {}).get(ANNOTATION_OWNED_LABELS, "")
    return set(filter(None, value.split(",")))


@pytest.fixture
def server() -> Any:
    with FakeApiServer() as srv:
        srv.add_node(NODE)
        yield srv


@pytest.fixture
def raw_labels(tmp_path: Path) -> dict[str, str]:
    """The NFD labels of the host, as NFD's worker would publish them (the agent's discover
    keeps NFD's exact names; tests/test_fixtures_golden.py holds them to NFD's)."""
    done = subprocess.run([CLI, "discover", "--host-root", str(HOST), "--format", "json"], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    labels: dict[str, str] = json.loads(done.stdout)["labels"]
    assert labels
    return labels


def test_alongside_nfd_the_agent_leaves_what_nfd_owns(server: FakeApiServer, raw_labels: dict[str, str], tmp_path: Path) -> None:
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    differ = "feature.node.kubernetes.io/kernel-version.full"
    nfd = {**raw_labels, differ: "nfd-computed-this", f"{NFD_NS}/nfd-only.example": "true"}
    nfd_master_pass(server, nfd)

    def nfd_extras(node: dict[str, Any]) -> None:
        node["metadata"]["annotations"].update({
            NFD_EXTENDED_RESOURCES: "example.com/nfd-widget", NFD_TAINTS: "feature.node.kubernetes.io/nfd-taint=true:NoSchedule",
            NFD_FEATURE_ANNOTATIONS: "nfd-note", f"{NFD_NS}/nfd-note": "kept"})
        node["spec"]["taints"] = [{"key": f"{NFD_NS}/nfd-taint", "value": "true", "effect": "NoSchedule"}]
        node["status"]["capacity"]["example.com/nfd-widget"] = "2"

    server.edit_node(NODE, nfd_extras)
    before = server.node(NODE)

    report = apply(kubeconfig)
    after = server.node(NODE)
    labels, annotations = after["metadata"]["labels"], after["metadata"]["annotations"]
    # NFD's record, its annotation, taint and extended resource: exactly as NFD left them
    for key in (NFD_FEATURE_LABELS, NFD_EXTENDED_RESOURCES, NFD_FEATURE_ANNOTATIONS, NFD_TAINTS, f"{NFD_NS}/nfd-note"):
        assert annotations[key] == before["metadata"]["annotations"][key], key
    assert after["spec"]["taints"] == before["spec"]["taints"]
    assert after["status"]["capacity"]["example.com/nfd-widget"] == "2"
    # labels NFD set: the same value stays NFD's (never in the agent's record), a different one is
    # kept and reported as a clash, NFD's own label is never touched
    assert {k: labels[k] for k in nfd} == nfd
    assert not agent_owned(after) & set(nfd)
    events = [e for e in server.events() if e.get("reason") == "ForeignValueKept"]
    assert any(differ in (e.get("message") or e.get("note") or "") for e in events)
    # what only the agent knows (the generalized labels) is added and recorded as the agent's
    assert labels["accelerators/edgetpu"] == "true" and "accelerators/edgetpu" in agent_owned(after)
    assert set(report["desired"]["labels"]) - set(nfd) <= agent_owned(after)


def test_replacing_nfd_after_the_agent_runs_prune_hands_its_labels_over(server: FakeApiServer, raw_labels: dict[str, str],
                                                                        tmp_path: Path) -> None:
    """The agent runs, NFD is uninstalled with its prune: NFD's labels go with its record and
    the running agent, seeing its Node change, writes them back as its own."""
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    nfd_master_pass(server, raw_labels)
    env = {**os.environ, "NODE_NAME": NODE, "KUBECONFIG": str(kubeconfig)}
    log = tmp_path / "agent.log"
    with open(log, "w") as out:
        proc = subprocess.Popen([CLI, "run", f"--host-root={HOST}", f"--rules={LABELS_DIR}", "--metrics-port=0",
                                 "--metrics-address=127.0.0.1", "--startup-jitter=0", "--udev-mode=off"],
                                env=env, stdout=subprocess.DEVNULL, stderr=out)
    try:
        wait_for(lambda: server.node(NODE)["metadata"]["labels"].get("accelerators/edgetpu") == "true", proc, log)
        assert not agent_owned(server.node(NODE)) & set(raw_labels)  # NFD's while NFD is there
        nfd_prune(server)
        # in between: the raw labels are gone until the agent's next pass; then they are back, the agent's
        wait_for(lambda: set(raw_labels) <= agent_owned(server.node(NODE)), proc, log)
        node = server.node(NODE)
        assert {k: node["metadata"]["labels"][k] for k in raw_labels} == raw_labels
        assert not [k for k in node["metadata"]["annotations"] if k.startswith("nfd.node.kubernetes.io")]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def test_replacing_nfd_without_prune_leaves_its_labels_frozen(server: FakeApiServer, raw_labels: dict[str, str],
                                                               tmp_path: Path) -> None:
    """NFD deleted without its prune: its record stays and the agent, which never removes what
    it does not own, leaves those labels as they are even when the hardware is gone (and keeps
    deriving its generalized labels from them), so the migration needs the prune (or the
    hand-made equivalent in deploy/nfd.md)."""
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    nfd_master_pass(server, raw_labels)
    apply(kubeconfig)
    usb = sorted(k for k in raw_labels if k.startswith(f"{NFD_NS}/usb-"))
    assert usb
    apply(kubeconfig, FIXTURES / "minimal")  # the Coral is unplugged; NFD is no longer there to notice
    labels = server.node(NODE)["metadata"]["labels"]
    assert {k: labels.get(k) for k in usb} == {k: raw_labels[k] for k in usb}
    # and the agent's generalized label, which also reads labels other agents set, stays with them
    assert labels["accelerators/edgetpu"] == "true"


def test_nfd_installed_after_the_agent_shares_labels_without_writes(server: FakeApiServer, raw_labels: dict[str, str],
                                                                    tmp_path: Path) -> None:
    """NFD added to a Node the agent labelled: same values, so nfd-master patches only its record;
    both now list the labels, and whichever sees the device go first removes them."""
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    apply(kubeconfig)
    assert set(raw_labels) <= agent_owned(server.node(NODE))
    ops = nfd_master_pass(server, raw_labels)
    assert ops == []
    node = server.node(NODE)
    assert nfd_recorded(node) == set(raw_labels) and set(raw_labels) <= agent_owned(node)
    report = apply(kubeconfig)
    assert report["writes"] == 0  # no fight: the agent sees its own values


def wait_for(condition: Any, proc: subprocess.Popen[bytes], log: Path, limit: float = 60) -> None:
    deadline = time.monotonic() + limit
    while not condition():
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)


def test_a_node_without_the_agents_record_adopts_nothing_nfds_record_lists() -> None:
    """The record-rebuilding adoption (agent.reconcile.claims) skips what NFD's record lists, by
    every NFD instance's annotation name, names in NFD's namespace written without it."""
    from agent.desired import DesiredNodeState, Taint
    from agent.reconcile.claims import CheckedClaims, ClaimPolicy, adopt_matching
    from agent.reconcile.model import LiveNode
    from agent.reconcile.ownership import Ownership

    live = LiveNode(name=NODE, uid="u", resource_version="1",
                    labels={f"{NFD_NS}/cpu-model.id": "85", "vendor.example.com/x": "1", f"{NFD_NS}/pci-10de.present": "true"},
                    annotations={NFD_FEATURE_LABELS: "cpu-model.id", f"blue.{NFD_FEATURE_LABELS}": "vendor.example.com/x",
                                 NFD_TAINTS: f"{NFD_NS}/gpu=true:NoSchedule"},
                    taints=({"key": f"{NFD_NS}/gpu", "value": "true", "effect": "NoSchedule"},))
    desired = DesiredNodeState(labels={f"{NFD_NS}/cpu-model.id": "85", "vendor.example.com/x": "1",
                                       f"{NFD_NS}/pci-10de.present": "true"},
                               taints=(Taint(f"{NFD_NS}/gpu", "NoSchedule", "true"),))
    adopted = adopt_matching(CheckedClaims(Ownership()), live, desired, ClaimPolicy())
    assert adopted.ownership.labels == {f"{NFD_NS}/pci-10de.present"}  # not in any NFD record
    assert adopted.ownership.taints == frozenset()
