"""Steady state stays 0 writes (an idle fleet must cost the API server nothing): a resync that finds the host unchanged writes nothing,
even when one read fails on the way.

Found in bench/fleet.py's idle sample: ``cpu-hardware_multithreading`` removed and put back a
second later (2 PATCH + 2 Event). The cause: ``openat2`` with ``RESOLVE_IN_ROOT`` fails a lookup
that steps through ``..`` (every ``/sys/bus/cpu/devices/cpuN`` link) with EAGAIN when a rename
anywhere on the system races it (openat2(2)); one CPU's ``topology/`` then read as unreadable,
the cpu source reported no topology (as NFD's ``discoverTopology`` does on any read error) and
the agent removed the label. Both causes are tested: the seam now walks every path itself, so no
race refuses a lookup, and a feature a source could not determine keeps its previous answer
(``SourceResult.undetermined``, ``agent.discovery_evidence.carry_undetermined``): removal
needs positive evidence.

Also here: a host that never had an evidence file (the ``lscpu-*`` recordings have no
``/proc/meminfo``) is not a failing source, so no ``DiscoverySourceFailed`` Warning is posted
on every agent's second pass; several agents discovering in one process (the bench's layout)
all get the single-threaded answer.
"""

from __future__ import annotations

import logging
import shutil
import threading

import pytest

from agent.discovery import DiscoveryConfig, discover
from agent.hostfs import HostFS
from agent.reconcile.ownership import parse_ownership
from agent.runtime.discovery_cache import DiscoveryCache
from tests.conftest import FIXTURES
from tests.faults.harness import NODE, STARTUP_TAINT
from tests.runtime.helpers import wait_for

SMT = "feature.node.kubernetes.io/cpu-hardware_multithreading"
ALL_SOURCES = ("cpu", "devicetree", "kernel", "local", "memory", "network", "pci", "storage", "system", "usb")


def break_file(root, host_path: str):
    """Make one sysfs attribute unreadable (a directory where the file was: EISDIR, which even
    root cannot read); returns a function that puts the file back."""
    path = root / host_path.lstrip("/")
    content = path.read_bytes()
    path.unlink()
    path.mkdir()

    def restore() -> None:
        path.rmdir()
        path.write_bytes(content)

    return restore


def cpu_topology_file(n: int, name: str = "thread_siblings_list") -> str:
    return f"/sys/devices/system/cpu/cpu{n}/topology/{name}"


# -- the root cause: lookups through ".." racing renames elsewhere ------------------------------

@pytest.mark.parametrize("case", ["coral-usb", "dgx-usb-lab", "jetson-nano", "amd-gpu"])
def test_renames_elsewhere_on_the_system_change_no_answer(tmp_path, case):
    """A rename storm in another process (the real kernel, as kubelet and log rotation make
    one) while the host is discovered again and again: every pass gives the quiet answer. The
    seam walks every path itself (``openat`` and ``readlinkat`` from open directories, ``..``
    stepped lexically from a real path), so no lookup can be refused for a race (openat2's
    ``RESOLVE_IN_ROOT`` answers EAGAIN there, which once read as an unreadable topology)."""
    import subprocess
    import sys

    config = DiscoveryConfig(node_name=NODE)
    want = discover(HostFS(str(FIXTURES / case)), config).results
    (tmp_path / "a").write_text("")
    churn = subprocess.Popen([sys.executable, "-c", (
        "import os, sys\n"
        "a, b = sys.argv[1] + '/a', sys.argv[1] + '/b'\n"
        "while True:\n"
        "    os.rename(a, b); os.rename(b, a)\n"), str(tmp_path)])
    try:
        wait_for(lambda: (tmp_path / "b").exists() or churn.poll() is not None, what="the rename loop running")
        for _ in range(5):
            assert discover(HostFS(str(FIXTURES / case)), config).results == want
    finally:
        churn.kill()
        churn.wait()


# -- the fail-safety: an undetermined feature keeps its previous answer ------------------------

def test_an_unreadable_topology_file_keeps_the_label_until_a_read_shows_otherwise(tmp_path):
    """DiscoveryCache over a writable coral-usb copy (8 CPUs, SMT on): a pass where one CPU's
    topology file cannot be read keeps the feature and the label of the pass before (the
    error is still reported); when it reads again nothing is carried; a successful read that
    shows SMT off changes the label."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "coral-usb", root, symlinks=True)
    cache = DiscoveryCache(HostFS(str(root)), DiscoveryConfig(node_name=NODE), ALL_SOURCES)
    cache.refresh(None)
    before = cache.current.results["cpu"]
    assert before.labels[SMT] == "true" and before.features["topology"].attributes["socket_count"] == "1"

    restore = break_file(root, cpu_topology_file(5))
    for _ in range(2):
        cache.refresh(None)
        now = cache.current.results["cpu"]
        assert now.labels == before.labels and now.features == before.features  # the answer kept
        assert any("topology incomplete" in e.message for e in now.errors)  # the failure still said
        assert "cpu.topology" in cache.carried and not cache.degraded
    restore()
    cache.refresh(None)
    assert cache.current.results["cpu"] == before and not cache.carried

    for n in range(8):  # SMT switched off: every CPU its own only sibling (a real answer)
        (root / cpu_topology_file(n).lstrip("/")).write_text(f"{n}\n")
    cache.refresh(None)
    assert cache.current.results["cpu"].labels[SMT] == "false" and not cache.carried


@pytest.mark.parametrize(
    "case, source, label, carried, file_of, really",
    [
        # storage on coral-usb (one NVMe disk): its queue/rotational unreadable keeps
        # storage-nonrotationaldisk and the block feature of the pass before; the disk really
        # spinning (rotational 1, read) removes the label
        ("coral-usb", "storage", "feature.node.kubernetes.io/storage-nonrotationaldisk", "storage.block",
         lambda root, before: HostFS(str(root)).resolve("/sys/block/nvme0n1") + "/queue/rotational", "1\n"),
        # network on amd-gpu (one SR-IOV capable NIC): its sriov_totalvfs unreadable keeps
        # network-sriov.capable and the device feature of the pass before; a count of 0, read,
        # removes the label
        ("amd-gpu", "network", "feature.node.kubernetes.io/network-sriov.capable", "network.device",
         lambda root, before: before.label_origins["feature.node.kubernetes.io/network-sriov.capable"], "0\n"),
    ],
    ids=["rotational-keeps-ssd-label", "vf-count-keeps-sriov-label"],
)
def test_an_unreadable_file_keeps_the_label_it_decides(tmp_path, case, source, label, carried, file_of, really):
    """One file a feature needs made unreadable: the pass keeps the label and feature of the
    pass before (carried); the file read again with a real change removes the label."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / case, root, symlinks=True)
    cache = DiscoveryCache(HostFS(str(root)), DiscoveryConfig(node_name=NODE), [source])
    cache.refresh(None)
    before = cache.current.results[source]
    assert before.labels == {label: "true"}
    host_file = file_of(root, before)
    restore = break_file(root, host_file)
    cache.refresh(None)
    now = cache.current.results[source]
    assert now.labels == before.labels and now.features == before.features and carried in cache.carried
    restore()
    (root / host_file.lstrip("/")).write_text(really)
    cache.refresh(None)
    assert cache.current.results[source].labels == {} and not cache.carried


def test_an_undetermined_feature_with_no_earlier_answer_is_left_out(tmp_path):
    """A fresh agent whose first pass cannot read the topology publishes no SMT label (nothing
    invented), and gives it once a pass reads it."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "coral-usb", root, symlinks=True)
    restore = break_file(root, cpu_topology_file(0, "physical_package_id"))
    cache = DiscoveryCache(HostFS(str(root)), DiscoveryConfig(node_name=NODE), ALL_SOURCES)
    cache.refresh(None)
    assert SMT not in cache.current.results["cpu"].labels and "topology" not in cache.current.results["cpu"].features
    restore()
    cache.refresh(["cpu"])
    assert cache.current.results["cpu"].labels[SMT] == "true"


def test_a_label_the_configuration_leaves_out_is_not_carried_back(tmp_path):
    """core.labelWhiteList applies to what is carried too: an earlier answer never brings back
    a label the current configuration does not publish."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "coral-usb", root, symlinks=True)
    cache = DiscoveryCache(HostFS(str(root)), DiscoveryConfig(node_name=NODE), ["cpu"])
    cache.refresh(None)
    assert SMT in cache.current.results["cpu"].labels
    cache.config = DiscoveryConfig(node_name=NODE, label_whitelist="^cpu-cpuid")
    break_file(root, cpu_topology_file(2))
    cache.refresh(None)
    labels = cache.current.results["cpu"].labels
    assert SMT not in labels and labels and all(k.startswith("feature.node.kubernetes.io/cpu-cpuid.") for k in labels)


def test_a_failing_topology_read_writes_nothing_on_the_node(make_harness, server):
    """The real agent loop, resync every 0.3 s, Events on: passes that cannot read one CPU's
    topology send no PATCH (the bench's flap: 2 PATCH + 2 Event) and one Warning Event saying
    what is held, however many passes fail; the label stays. A real change afterwards (SMT
    off) is written."""
    h = make_harness(resync_interval=0.3, resync_jitter=0.0, emit_events=True).start()
    h.wait_converged()
    assert server.node(NODE)["metadata"]["labels"][SMT] == "true"
    wait_for(lambda: h.agent.passes >= 2, what="a quiet resync")
    server.clear_requests()
    restore = break_file(h.host.root, cpu_topology_file(3))
    wait_for(lambda: "cpu.topology" in h.agent.discovery.carried, what="a pass that cannot read the topology")
    passes = h.agent.passes
    wait_for(lambda: h.agent.passes >= passes + 3, what="three more resyncs with the file unreadable")
    writes = [r for r in server.requests if r.method in ("PATCH", "PUT", "POST", "DELETE")]
    assert [(r.method, r.path.rsplit("/", 1)[1], r.body["reason"], r.body["type"]) for r in writes] == [
        ("POST", "events", "DiscoveryReadFailed", "Warning")], [(r.method, r.path) for r in writes]
    assert "cpu.topology" in writes[0].body["message"] and h.metric('nfa_feature_undetermined{feature="cpu.topology"}') == 1
    assert server.node(NODE)["metadata"]["labels"][SMT] == "true"
    restore()
    wait_for(lambda: not h.agent.discovery.carried, what="the topology read again")
    assert h.metric('nfa_feature_undetermined{feature="cpu.topology"}') == 0
    for n in range(8):
        (h.host.root / cpu_topology_file(n).lstrip("/")).write_text(f"{n}\n")
    wait_for(lambda: server.node(NODE)["metadata"]["labels"].get(SMT) == "false", what="SMT off published")


# -- a fresh agent's first pass: no earlier answer, so the Node's labels are kept ----------------

SSD = "feature.node.kubernetes.io/storage-nonrotationaldisk"


def nvme_rotational(root) -> str:
    return HostFS(str(root)).resolve("/sys/block/nvme0n1") + "/queue/rotational"


def label_removals(server) -> list[str]:
    """Label keys any merge patch the agent sent set to null (a removal)."""
    return [key for r in server.requests if r.method == "PATCH" and isinstance(r.body, dict)
            for key, value in ((r.body.get("metadata") or {}).get("labels") or {}).items() if value is None]


def owned_labels(server) -> frozenset[str]:
    return parse_ownership(server.node(NODE)["metadata"].get("annotations")).labels


def previous_instance(make_harness, server) -> None:
    """An agent instance that labelled the Node (SMT on, an SSD) and then went away."""
    first = make_harness().start()
    first.wait_converged()
    labels = server.node(NODE)["metadata"]["labels"]
    assert labels[SMT] == "true" and labels[SSD] == "true" and {SMT, SSD} <= owned_labels(server)
    assert first.close()


def test_a_fresh_agent_that_cannot_read_the_topology_keeps_the_labels_a_previous_instance_put(make_harness, server):
    """The agent restarts while one CPU's topology file and the disk's queue/rotational cannot
    be read: its first pass has no earlier answer for cpu.topology or storage.block, so it
    removes no label (SMT and the SSD label stay, still recorded as ours), passes after it too;
    once both files read again and the disk really spins, that pass removes the SSD label."""
    previous_instance(make_harness, server)
    second = make_harness(resync_interval=0.3, resync_jitter=0.0)
    restore_topology = break_file(second.host.root, cpu_topology_file(5))
    restore_rotational = break_file(second.host.root, nvme_rotational(second.host.root))
    server.clear_requests()
    second.start()
    passes = second.agent.passes
    wait_for(lambda: second.agent.passes >= passes + 2, what="resyncs with both files unreadable")
    labels = server.node(NODE)["metadata"]["labels"]
    assert labels[SMT] == "true" and labels[SSD] == "true" and {SMT, SSD} <= owned_labels(server)
    assert label_removals(server) == []
    assert STARTUP_TAINT["key"] not in {t["key"] for t in server.node(NODE)["spec"].get("taints") or []}
    assert {"cpu.topology", "storage.block"} <= set(second.agent.discovery.unanswered)

    restore_topology()
    restore_rotational()
    (second.host.root / nvme_rotational(second.host.root).lstrip("/")).write_text("1\n")
    wait_for(lambda: SSD not in server.node(NODE)["metadata"]["labels"], what="the spinning disk's label removed")
    assert not second.agent.discovery.unanswered and label_removals(server) == [SSD]
    assert server.node(NODE)["metadata"]["labels"][SMT] == "true" and SSD not in owned_labels(server)


@pytest.mark.parametrize("topology", ["readable", "unreadable"])
def test_a_fresh_agent_that_reads_the_disk_removes_its_label_at_its_first_pass(make_harness, server, caplog, topology):
    """No over-holding: the restarted agent reads the disk's queue/rotational and the disk
    spins now, so its first pass removes the SSD label the previous instance put there, whether
    or not a CPU's topology file (which decides only the SMT label) can be read."""
    previous_instance(make_harness, server)
    second = make_harness()
    (second.host.root / nvme_rotational(second.host.root).lstrip("/")).write_text("1\n")
    if topology == "unreadable":
        break_file(second.host.root, cpu_topology_file(5))
    server.clear_requests()
    caplog.clear()
    caplog.set_level(logging.INFO, logger="agent.runtime.agent")
    second.start()
    assert SSD not in server.node(NODE)["metadata"]["labels"] and SSD not in owned_labels(server)
    assert label_removals(server) == [SSD] and "storage.block" not in second.agent.discovery.unanswered
    assert server.node(NODE)["metadata"]["labels"][SMT] == "true"
    first_pass = next(r for r in caplog.records if getattr(r, "event", "") == "reconcile")
    assert f"removed label {SSD}" in first_pass.change  # in the first pass, not a later one


# -- evidence the host never had is no failure --------------------------------------------------

def test_a_host_that_never_had_an_evidence_file_is_not_degraded_on_later_passes():
    """lscpu-x86_64-dell_e4310 (util-linux's recording: /proc/cpuinfo and sysfs, no
    /proc/meminfo, /proc/sys/kernel/osrelease or /etc/os-release) answers the same every pass:
    no source is degraded and no Warning is raised, on the second pass or any later one."""
    said = []
    cache = DiscoveryCache(HostFS(str(FIXTURES / "lscpu-x86_64-dell_e4310")), DiscoveryConfig(node_name=NODE),
                           ALL_SOURCES, on_degraded=lambda name, why: said.append((name, why)))
    cache.refresh(None)
    first = dict(cache.current.results)
    assert first["memory"].features and first["kernel"].features and first["system"].features
    for _ in range(3):
        cache.refresh(None)
        assert dict(cache.current.results) == first
    assert said == [] and cache.degraded == {}


def test_an_evidence_file_that_was_there_and_goes_still_keeps_the_previous_answer(tmp_path):
    """Removal needs positive evidence: coral-usb's /proc/meminfo read, then gone: memory is degraded,
    its features kept, one Warning; back: recovered."""
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "coral-usb", root, symlinks=True)
    said = []
    cache = DiscoveryCache(HostFS(str(root)), DiscoveryConfig(node_name=NODE), ALL_SOURCES,
                           on_degraded=lambda name, why: said.append((name, why)))
    cache.refresh(None)
    before = cache.current.results["memory"]
    meminfo = root / "proc" / "meminfo"
    kept = meminfo.read_bytes()
    meminfo.unlink()
    cache.refresh(None)
    cache.refresh(None)
    assert cache.current.results["memory"] == before and "memory" in cache.degraded
    assert [name for name, why in said] == ["memory"] and "/proc/meminfo" in said[0][1]
    meminfo.write_bytes(kept)
    cache.refresh(None)
    assert not cache.degraded and said[-1] == ("memory", None)


# -- many agents in one process ------------------------------------------------------------------

def test_agents_discovering_in_one_process_get_the_single_threaded_answer():
    """bench/fleet.py runs 20 agents in one process: each thread with its own seam (as each
    Agent has), plus one seam shared by two threads (the non-owner path), on the hosts that
    flapped, all give exactly what one thread alone gives."""
    cases = ("dgx-usb-lab", "jetson-nano", "coral-usb")
    config = DiscoveryConfig(node_name=NODE)
    want = {case: discover(HostFS(str(FIXTURES / case)), config).results for case in cases}
    shared = HostFS(str(FIXTURES / "jetson-nano"))
    got: list[tuple[str, dict]] = []
    lock = threading.Lock()

    def work(case: str, host: HostFS | None) -> None:
        seam = host or HostFS(str(FIXTURES / case))
        for _ in range(3):
            results = discover(seam, config).results
            with lock:
                got.append((case, results))

    threads = [threading.Thread(target=work, args=(case, None)) for case in cases * 2]
    threads += [threading.Thread(target=work, args=("jetson-nano", shared)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(got) == 3 * len(threads)
    for case, results in got:
        assert results == want[case], case
