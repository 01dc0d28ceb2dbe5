"""``node-feature-agent placement`` and ``clean --pods`` as processes, against the in-repo API
server and a real registry: a controller killed with gated pods waiting, two replicas with
leader election, metrics, and the uninstall that never deletes a pod."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from agent.placement import podspec
from tests.conftest import REPO
from tests.images.registries import RegistryProcess, free_port
from tests.placement.harness import command, gated_pod, start_command, ungated, wait_event
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

pytestmark = pytest.mark.slow
LEASE = ("node-feature-agent", "node-feature-agent-placement")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[FakeApiServer]:
    with FakeApiServer() as api:
        api.add_namespace("apps")
        api.kubeconfig(tmp_path / "kubeconfig")
        yield api


def holder(server: FakeApiServer) -> str:
    try:
        lease = server.store.get("leases.coordination.k8s.io", LEASE[1], LEASE[0])
    except Exception:  # noqa: BLE001 - no Lease yet
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def used_permissions(server: FakeApiServer) -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of every request the controller made, as RBAC names them."""
    used = set()
    for r in server.requests:
        parts = [p for p in r.path.split("/") if p]
        group = "coordination.k8s.io" if parts[0] == "apis" else ""
        resource_at = next(i for i in range(len(parts) - 1, -1, -1) if parts[i] in ("pods", "events", "leases",
                                                                                      "namespaces", "secrets"))
        named = len(parts) > resource_at + 1
        verb = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}.get(r.method) or (
            "watch" if r.query.get("watch") == "true" else "get" if named else "list")
        used.add((group, parts[resource_at], verb))
    return used


def granted_permissions() -> set[tuple[str, str, str]]:
    docs = [d for d in yaml.safe_load_all((REPO / "deploy/placement.yaml").read_text()) if d]
    bound = {d["roleRef"]["name"] for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")}
    return {(g, r, v) for d in docs if d["kind"] in ("ClusterRole", "Role") and d["metadata"]["name"] in bound
            for rule in d["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def acted_on(server: FakeApiServer, pod: str) -> set[str]:
    """The replicas that posted an Event about ``pod`` (the Event follows the PATCH: wait for it)."""
    wait_event(server, pod, "ArchResolved")
    return {e["reportingInstance"] for e in server.events() if e["involvedObject"]["name"] == pod}


def answers(url: str) -> bool:
    try:
        return bool(urllib.request.urlopen(url, timeout=5).status == 200)
    except OSError:  # not listening yet, or 503 (an HTTPError is an OSError)
        return False


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        process.wait(timeout=30)


def test_a_controller_killed_with_50_gated_pods_processes_them_all_on_return(
        server: FakeApiServer, registry: RegistryProcess, tmp_path: Path) -> None:
    kubeconfig, log = tmp_path / "kubeconfig", tmp_path / "placement.log"
    first = start_command(kubeconfig, registry.host, "--identity", "placement-0", log=log)
    try:
        wait_for(lambda: holder(server) == "placement-0", timeout=60, what="the Lease taken")
    finally:
        stop(first, signal.SIGKILL)  # no release: the Lease stays held by placement-0
    images = [f"{registry.host}/test/{n}:1" for n in ("multi", "pair", "amd64")]
    for i in range(50):
        gated_pod(server, "apps", f"p{i:02d}", [images[i % 3]])
    started = time.monotonic()
    second = start_command(kubeconfig, registry.host, "--identity", "placement-0", log=log)  # the restarted container
    try:
        wait_for(lambda: all(not server.pod("apps", f"p{i:02d}")["spec"].get("schedulingGates") for i in range(50)),
                 timeout=120, what="50 pods ungated")
        print(f"50 gated pods ungated {time.monotonic() - started:.1f} s after the controller's restart")
    finally:
        stop(second)
    assert holder(server) == ""  # SIGTERM handed the Lease back
    assert used_permissions(server) <= granted_permissions()
    for i in range(50):
        pod = server.pod("apps", f"p{i:02d}")
        assert pod["spec"]["affinity"]["nodeAffinity"], pod["metadata"]["name"]
        assert podspec.SELECTOR_LABEL not in pod["metadata"].get("labels", {})


def test_two_replicas_one_acts_and_the_other_takes_over(server: FakeApiServer, registry: RegistryProcess,
                                                        tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    port = free_port()
    replicas = {name: start_command(kubeconfig, registry.host, "--identity", name, "--lease-duration", "3",
                                    "--metrics-port", str(port) if name == "a" else "off", log=tmp_path / f"{name}.log")
                for name in ("a", "b")}
    try:
        leader = wait_for(lambda: holder(server) or None, timeout=60, what="a leader")
        gated_pod(server, "apps", "one", [f"{registry.host}/test/pair:1"])
        ungated(server, "apps", "one")
        assert acted_on(server, "one") == {leader}
        stop(replicas[leader])  # SIGTERM: the Lease is handed back, the other replica takes it
        other = "b" if leader == "a" else "a"
        wait_for(lambda: holder(server) == other, timeout=60, what="the other replica leading")
        gated_pod(server, "apps", "two", [f"{registry.host}/test/pair:1"])
        ungated(server, "apps", "two")
        assert acted_on(server, "two") == {other}
        if replicas["a"].poll() is None:
            metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            assert "nfa_placement_leader" in metrics and "nfa_placement_gated_pods" in metrics
    finally:
        for process in replicas.values():
            stop(process)


def test_metrics_count_registry_requests_and_cache_hits(server: FakeApiServer, registry: RegistryProcess,
                                                        tmp_path: Path) -> None:
    port = free_port()
    process = start_command(tmp_path / "kubeconfig", registry.host, "--leader-elect", "off",
                            "--metrics-port", str(port), log=tmp_path / "placement.log")
    try:
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/readyz"), timeout=60, what="ready")
        gated_pod(server, "apps", "m0", [f"{registry.host}/test/pair:1"])
        ungated(server, "apps", "m0")  # the registry asked once; the four after it are cache hits
        for i in range(1, 5):
            gated_pod(server, "apps", f"m{i}", [f"{registry.host}/test/pair:1"])
        for i in range(1, 5):
            ungated(server, "apps", f"m{i}")

        def counted() -> dict[str, str] | None:
            """The metrics once all five pods are counted: the controller counts a pod when its
            PATCH has returned, a moment after the API server shows the pod released."""
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            found = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("nfa_placement"))
            return found if float(found.get('nfa_placement_pods_total{outcome="resolved"}', 0)) >= 5 else None

        lines = wait_for(counted, timeout=30, what="the five pods counted")
    finally:
        stop(process)
    assert float(lines[f'nfa_placement_registry_requests_total{{code="200",host="{registry.host}"}}']) == 2  # HEAD + GET
    assert float(lines['nfa_placement_pods_total{outcome="resolved"}']) == 5
    assert float(lines['nfa_placement_cache_lookups_total{cache="platforms",result="hit"}']) == 4
    assert float(lines["nfa_placement_cache_hit_ratio"]) == 0.8
    assert float(lines["nfa_placement_gate_seconds_count"]) == 5


def test_clean_pods_removes_only_our_gate_and_deletes_nothing(server: FakeApiServer, tmp_path: Path) -> None:
    other = {"name": "example.com/quota"}
    ours = {"name": podspec.GATE}
    shapes = {"both": [other, ours], "ours": [ours], "theirs": [other], "none": []}
    for name, gates in shapes.items():
        spec = {"containers": [{"name": "c", "image": "nginx"}], **({"schedulingGates": gates} if gates else {})}
        server.create_pod("apps", {"metadata": {"name": name, "labels": {podspec.SELECTOR_LABEL: podspec.GATED, "app": "x"}},
                                   "spec": spec})
    server.create_pod("apps", {"metadata": {"name": "unlabelled"},  # our label removed by hand: still found
                               "spec": {"containers": [{"name": "c", "image": "nginx"}], "schedulingGates": [ours]}})
    done = subprocess.run(command("clean", "--pods", "--kubeconfig", str(tmp_path / "kubeconfig")), capture_output=True,
                          text=True, timeout=120, env={**os.environ, "NODE_NAME": ""})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 pod(s) released, 0 failed" in done.stdout
    pods = {p["metadata"]["name"]: p for p in server.pods()}
    assert sorted(pods) == ["both", "none", "ours", "theirs", "unlabelled"]
    assert pods["both"]["spec"]["schedulingGates"] == [other]
    assert pods["theirs"]["spec"]["schedulingGates"] == [other]
    assert "schedulingGates" not in pods["ours"]["spec"] and "schedulingGates" not in pods["unlabelled"]["spec"]
    assert pods["theirs"]["metadata"]["labels"][podspec.SELECTOR_LABEL] == podspec.GATED  # not ours to touch
    assert pods["both"]["metadata"]["labels"] == {"app": "x"}
    assert not [r for r in server.requests if r.method == "DELETE"]
