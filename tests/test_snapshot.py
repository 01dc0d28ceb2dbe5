"""``snapshot`` records what discovery read so ``discover --host-root SNAPSHOT`` replays it exactly."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from agent.discovery import DiscoveryConfig, discover
from agent.hostfs import HostFS
from agent.snapshot import NOTES_NAME, SnapshotError, take_snapshot
from tests.conftest import FIXTURES

CONFIG = DiscoveryConfig(node_name="snapshot-test-node")
FIXTURE_CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()) if FIXTURES.is_dir() else []
CLI = [sys.executable, "-m", "agent"]


def replay(tree: Path):
    return discover(HostFS(tree), CONFIG)


def assert_same_discovery(original, replayed) -> None:
    assert replayed.labels == original.labels
    assert replayed.to_json()["features"] == original.to_json()["features"]


def build_tree(root: Path) -> Path:
    """A tiny host: NUMA links (relative and absolute), hugepages, meminfo, os-release, DMI."""
    nodes = root / "sys/devices/system/node"
    for n in ("node0", "node1"):
        (nodes / n).mkdir(parents=True)
        (nodes / n / "meminfo").write_text("Node 0 MemTotal: 1 kB -- never read by discovery\n")
    bus = root / "sys/bus/node/devices"
    bus.mkdir(parents=True)
    os.symlink("../../../devices/system/node/node0", bus / "node0")
    os.symlink("/sys/devices/system/node/node1", bus / "node1")  # absolute: re-rooted on replay
    pool = root / "sys/kernel/mm/hugepages/hugepages-2048kB"
    pool.mkdir(parents=True)
    (pool / "nr_hugepages").write_text("4\n")
    (pool / "free_hugepages").write_text("4\n")
    (root / "sys/kernel/mm/hugepages/README").write_text("not a pool, never read\n")
    (root / "proc").mkdir()
    (root / "proc/meminfo").write_text("MemTotal:       16318412 kB\nMemFree:         1000000 kB\n")
    (root / "proc/swaps").write_text("Filename\tType\tSize\tUsed\tPriority\n/swap.img file 8388604 0 -2\n")
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('NAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\n')
    dmi = root / "sys/devices/virtual/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "sys_vendor").write_text("Dell Inc.\n")
    (dmi / "product_name").write_text("PowerEdge R750\n")
    return root


@pytest.fixture
def tree(tmp_path) -> Path:
    return build_tree(tmp_path / "host")


def test_tiny_tree_round_trip_keeps_links_and_only_what_was_used(tree, tmp_path):
    out = tmp_path / "snap"
    result = take_snapshot(out, tree, CONFIG)
    assert result.discovery.features["memory.numa"].attributes["node_count"] == "2"
    assert_same_discovery(result.discovery, replay(out))
    assert replay(out).errors == result.discovery.errors

    assert os.readlink(out / "sys/bus/node/devices/node0") == "../../../devices/system/node/node0"
    assert os.readlink(out / "sys/bus/node/devices/node1") == "/sys/devices/system/node/node1"
    assert (out / "sys/devices/system/node/node1").is_dir()
    assert not (out / "sys/devices/system/node/node0/meminfo").exists(), "a file nobody read was copied"
    assert (out / "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages").read_text() == "4\n"
    # listed but never read: present (listings replay) yet empty (no data copied)
    assert (out / "sys/kernel/mm/hugepages/README").read_bytes() == b""
    assert (out / "proc/meminfo").read_text().startswith("MemTotal:       16318412 kB")
    assert "every path discovery used was recorded" in (out / NOTES_NAME).read_text()


def test_unreadable_files_are_skipped_with_a_note_and_junk_is_kept_as_read(tree, tmp_path):
    """A file that could not be read is left out (the replay finds it absent) with a note; a
    file read whole but holding junk where text was expected is recorded as read, so the
    replay meets the same junk and reports it the same way."""
    (tree / "proc/swaps").unlink()
    (tree / "proc/swaps").mkdir()  # EISDIR: unreadable where a file is expected
    junk = b"\x00\xffPowerEdge\x00junk"
    (tree / "sys/devices/virtual/dmi/id/product_name").write_bytes(junk)
    out = tmp_path / "snap"
    result = take_snapshot(out, tree, CONFIG)

    notes = (out / NOTES_NAME).read_text()
    assert "/proc/swaps: skipped:" in notes
    assert (out / "sys/devices/virtual/dmi/id/product_name").read_bytes() == junk
    assert (out / "sys/devices/virtual/dmi/id/sys_vendor").read_text() == "Dell Inc.\n"
    assert len(result.notes) == 1
    assert any(e.path == "/proc/swaps" for e in result.discovery.errors)
    assert_same_discovery(result.discovery, replay(out))
    product = [e.message for e in replay(out).errors if e.path.endswith("/product_name")]
    assert product == [e.message for e in result.discovery.errors if e.path.endswith("/product_name")] != []


def test_symlink_loops_are_recorded_without_hanging(tree, tmp_path):
    shutil.rmtree(tree / "sys/devices/virtual/dmi")
    os.symlink("dmi", tree / "sys/devices/virtual/dmi")  # read through: /sys/devices/virtual/dmi/id/*
    os.symlink("node2", tree / "sys/bus/node/devices/node2")  # a looping entry of a listed directory
    out = tmp_path / "snap"
    # in a child process with a generous guard, so a hang fails the test instead of the run
    done = subprocess.run(
        CLI + ["--log-level", "error", "snapshot", "--sources", "memory,system", "--host-root", str(tree), "--output", str(out)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    notes = (out / NOTES_NAME).read_text()
    assert "symlink loop" in notes
    assert os.readlink(out / "sys/devices/virtual/dmi") == "dmi"
    assert os.readlink(out / "sys/bus/node/devices/node2") == "node2"
    original = discover(HostFS(tree), CONFIG, ["memory", "system"])
    replayed = discover(HostFS(out), CONFIG, ["memory", "system"])
    assert replayed.features["memory.numa"].attributes["node_count"] == "3"
    assert_same_discovery(original, replayed)


def test_tar_gz_round_trip_preserves_symlinks(tree, tmp_path):
    archive = tmp_path / "host.tar.gz"
    result = take_snapshot(archive, tree, CONFIG)
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["sys/bus/node/devices/node1"].issym()
        assert members["sys/bus/node/devices/node1"].linkname == "/sys/devices/system/node/node1"
        assert NOTES_NAME in members
        assert all(m.uid == 0 and not m.name.startswith("/") for m in members.values())
        extracted = tmp_path / "extracted"
        tar.extractall(extracted, filter="tar")  # "data" would refuse the absolute link
    assert_same_discovery(result.discovery, replay(extracted))


def test_output_must_be_new_or_empty(tree, tmp_path):
    out = tmp_path / "busy"
    out.mkdir()
    (out / "keep-me").write_text("x")
    with pytest.raises(SnapshotError):
        take_snapshot(out, tree, CONFIG)
    assert (out / "keep-me").read_text() == "x"


@pytest.mark.parametrize("case", FIXTURE_CASES)
def test_fixture_round_trip(case, tmp_path):
    out = tmp_path / case
    result = take_snapshot(out, FIXTURES / case, CONFIG)
    replayed = replay(out)
    assert_same_discovery(result.discovery, replayed)
    assert replayed.errors == result.discovery.errors
    # and it equals a plain discovery of the fixture, not just the recording run
    assert_same_discovery(discover(HostFS(FIXTURES / case), CONFIG), replayed)


def test_this_machine_round_trip(tmp_path):
    out = tmp_path / "live"
    result = take_snapshot(out, "/", CONFIG)
    replayed = replay(out)
    assert_same_discovery(result.discovery, replayed)
    assert result.discovery.labels, "live discovery found nothing at all"
    facts = out / ".node-feature-agent/cpu-live.json"
    assert isinstance(json.loads(facts.read_text()), dict)


@pytest.mark.parametrize("case", ["coral-usb", "raspberry-pi-4"])  # the Pi's /proc/device-tree link is absolute
def test_cli_writes_a_snapshot_that_discover_replays(tmp_path, case):
    """``discover --host-root X.tar.gz`` reads the archive ``snapshot`` wrote, as is (it could
    not: the archive had to be unpacked by hand, and tar's own "data" filter refuses the
    absolute links a snapshot keeps)."""
    out = tmp_path / "cli.tgz"
    run = lambda *a: subprocess.run(CLI + ["--log-level", "error", *a], capture_output=True, text=True, timeout=300)  # noqa: E731
    made = run("snapshot", "--host-root", str(FIXTURES / case), "--output", str(out))
    assert made.returncode == 0, made.stderr
    assert "snapshot of" in made.stdout
    a = json.loads(run("discover", "--host-root", str(FIXTURES / case)).stdout)
    replayed = run("discover", "--host-root", str(out))
    assert replayed.returncode == 0, replayed.stderr
    assert json.loads(replayed.stdout) == a
    planned = run("plan", "--host-root", str(out))
    assert planned.returncode == 0 and planned.stdout == run("plan", "--host-root", str(FIXTURES / case)).stdout
    # a Node is never written from a recording
    applied = run("apply", "--host-root", str(out), "--node-name", "n", "--kubeconfig", "/nonexistent")
    assert applied.returncode == 2 and applied.stderr.strip().endswith("only discover, plan, explain replay one")


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    import io

    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", linkname: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, len(data) if kind == tarfile.REGTYPE else 0, linkname
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info, data


HOSTILE = {
    "dotdot-path": [_member("sys", tarfile.DIRTYPE), _member("../escaped", data=b"x")],
    "write-through-a-link": [_member("sys", tarfile.DIRTYPE), _member("sys/out", tarfile.SYMTYPE, linkname="/tmp"),
                             _member("sys/out/nfa-escaped-link", data=b"x")],
    "hard-link-outside": [_member("passwd", tarfile.LNKTYPE, linkname="/etc/passwd")],
    "device-node": [_member("sys", tarfile.DIRTYPE), _member("sys/mem", tarfile.CHRTYPE)],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_in_one_line_and_nothing_escapes(tmp_path, case):
    archive = _archive(tmp_path / "hostile.tar.gz", HOSTILE[case])
    done = subprocess.run(CLI + ["discover", "--host-root", str(archive), "--allow-partial-host-root"],
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: --host-root"), done.stderr
    assert "refused" in lines[0], lines[0]
    for escaped in (tmp_path / "escaped", Path("/tmp/nfa-escaped-absolute"), Path("/tmp/nfa-escaped-link")):
        assert not escaped.exists(), escaped


def test_an_absolute_member_path_lands_inside(tmp_path):
    """tarfile's data filter strips the leading slash: the member is unpacked under the
    replay directory, never at the absolute path."""
    from agent.snapshot import extract_snapshot

    archive = _archive(tmp_path / "abs.tar.gz", [_member("/tmp/nfa-escaped-absolute", data=b"x")])
    extract_snapshot(archive, tmp_path / "x")
    assert (tmp_path / "x/tmp/nfa-escaped-absolute").read_bytes() == b"x"
    assert not Path("/tmp/nfa-escaped-absolute").exists()


def test_archive_bounds_stop_unpacking(tmp_path):
    """Size and member count are bounded from the headers, before a member is written."""
    from agent.snapshot import extract_snapshot

    big = _archive(tmp_path / "big.tar.gz", [_member("a", data=b"0" * 4096), _member("b", data=b"0" * 4096)])
    with pytest.raises(SnapshotError, match="more than 6000 bytes"):
        extract_snapshot(big, tmp_path / "x1", max_bytes=6000)
    assert not (tmp_path / "x1" / "b").exists()
    many = _archive(tmp_path / "many.tar.gz", [_member(f"f{i}") for i in range(5)])
    with pytest.raises(SnapshotError, match="more than 3 members"):
        extract_snapshot(many, tmp_path / "x2", max_members=3)
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(b"\x1f\x8b" + os.urandom(500))
    with pytest.raises(SnapshotError, match="not a readable snapshot archive"):
        extract_snapshot(garbage, tmp_path / "x3")


@pytest.mark.parametrize("output", ["live-dir", "live.tar.gz"])
def test_cli_snapshot_of_this_machine_replays_what_discover_sees_live(output, tmp_path):
    """The bug-report path exactly as documented: ``snapshot --host-root /`` (a directory or a
    .tar.gz), then ``discover --host-root SNAPSHOT`` prints what ``discover --host-root /`` prints."""
    run = lambda *a: subprocess.run(CLI + ["--log-level", "error", *a], capture_output=True, text=True, timeout=300)  # noqa: E731
    out = tmp_path / output
    made = run("snapshot", "--output", str(out), "--host-root", "/")
    assert made.returncode == 0, made.stderr
    live = run("discover", "--host-root", "/")
    replayed = run("discover", "--host-root", str(out))  # the directory, or the archive as written
    assert live.returncode == 0 and replayed.returncode == 0, live.stderr + replayed.stderr
    live_json, replayed_json = json.loads(live.stdout), json.loads(replayed.stdout)
    assert live_json["labels"], "live discovery found nothing at all"
    assert replayed_json == live_json
