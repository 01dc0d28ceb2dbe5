"""storage source: block queue attributes and storage-nonrotationaldisk."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.sources import storage

LABEL = NFD_PREFIX + "storage-nonrotationaldisk"
NVME = "/sys/devices/pci0000:00/0000:00:1d.0/0000:3d:00.0/nvme/nvme0/nvme0n1"
SATA = "/sys/devices/pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda"


def block(root: Path, name: str, devdir: str, rotational: str | bytes | None, *, zoned: str = "none",
          nr_zones: str | None = "0", dax: str | None = "0") -> None:
    queue = root / devdir.lstrip("/") / "queue"
    queue.mkdir(parents=True, exist_ok=True)
    for attr, value in (("rotational", rotational), ("zoned", zoned), ("nr_zones", nr_zones), ("dax", dax)):
        if value is not None:
            (queue / attr).write_bytes(value if isinstance(value, bytes) else (value + "\n").encode())
    (queue / "scheduler").write_text("[none] mq-deadline\n")
    link = root / "sys/block" / name
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(os.path.relpath(devdir, "/sys/block"), link)


def run(root: Path):
    return storage.discover(HostFS(root))


def blocks(result) -> dict[str, dict[str, str]]:
    return {i.attributes["name"]: dict(i.attributes) for i in result.features["block"].instances}


def test_nvme_and_sata_disk(tmp_path):
    block(tmp_path, "nvme0n1", NVME, "0")
    block(tmp_path, "sda", SATA, "1")
    block(tmp_path, "loop0", "/sys/devices/virtual/block/loop0", "1")

    result = run(tmp_path)

    assert result.errors == ()
    assert result.labels == {LABEL: "true"}
    assert result.label_origins[LABEL] == f"{NVME}/queue/rotational"
    assert blocks(result) == {
        "loop0": {"name": "loop0", "dax": "0", "rotational": "1", "nr_zones": "0", "zoned": "none"},
        "nvme0n1": {"name": "nvme0n1", "dax": "0", "rotational": "0", "nr_zones": "0", "zoned": "none"},
        "sda": {"name": "sda", "dax": "0", "rotational": "1", "nr_zones": "0", "zoned": "none"},
    }
    origins = {i.attributes["name"]: i.origin for i in result.features["block"].instances}
    assert origins["sda"] == SATA


def test_only_spinning_disks(tmp_path):
    block(tmp_path, "sda", SATA, "1")
    assert run(tmp_path).labels == {}


def test_virtual_nonrotational_counts_like_nfd(tmp_path):
    """NFD labels any block device: a zram swap device alone sets the label."""
    block(tmp_path, "sda", SATA, "1")
    block(tmp_path, "zram0", "/sys/devices/virtual/block/zram0", "0")
    assert run(tmp_path).labels == {LABEL: "true"}


def test_host_managed_smr_disk_on_older_kernel(tmp_path):
    """4.x kernels had no dax/nr_zones: absent, not an error."""
    block(tmp_path, "sdb", SATA.replace("sda", "sdb"), "1", zoned="host-managed", nr_zones=None, dax=None)
    result = run(tmp_path)
    assert blocks(result) == {"sdb": {"name": "sdb", "rotational": "1", "zoned": "host-managed"}}
    assert result.errors == ()


@pytest.mark.parametrize("rotational, fragment", [
    (b"yes\n", "not 0 or 1: 'yes'"),
    (b"\x00\x01", "unreadable: binary content"),
    (b"\xff0\n", "unreadable: not UTF-8"),
])
def test_junk_rotational(tmp_path, rotational, fragment):
    block(tmp_path, "nvme0n1", NVME, rotational)
    result = run(tmp_path)
    assert result.labels == {}
    assert [e.path for e in result.errors] == ["/sys/block/nvme0n1/queue/rotational"]
    assert fragment in result.errors[0].message
    assert "nvme0n1" in blocks(result)
    assert "block" in result.undetermined


def test_rotational_is_a_directory(tmp_path):
    block(tmp_path, "nvme0n1", NVME, None)
    (tmp_path / NVME.lstrip("/") / "queue/rotational").mkdir()
    result = run(tmp_path)
    assert [e.message for e in result.errors] == ["unreadable: Is a directory"]
    assert result.labels == {}
    # a failed read is no evidence the SSD is gone: undetermined, so a caller keeps its last answer
    assert dict(result.undetermined) == {"block": (LABEL,)}


def test_an_unreadable_disk_does_not_undetermine_a_label_another_disk_gives(tmp_path):
    """The label is decided by the readable SSD; ``storage.block`` (the unreadable disk's
    instance) is not, so a caller keeps its earlier answer for the feature alone."""
    block(tmp_path, "nvme0n1", NVME, None)
    (tmp_path / NVME.lstrip("/") / "queue/rotational").mkdir()
    block(tmp_path, "zram0", "/sys/devices/virtual/block/zram0", "0")
    result = run(tmp_path)
    assert result.labels == {LABEL: "true"} and dict(result.undetermined) == {"block": ()}


def test_read_disks_and_a_vanished_one_are_determined(tmp_path):
    block(tmp_path, "sda", SATA, "1")
    assert not run(tmp_path).undetermined  # spinning only: a real "no label"
    block(tmp_path, "sdc", SATA.replace("sda", "sdc"), "0")
    shutil.rmtree(tmp_path / SATA.replace("sda", "sdc").lstrip("/"))
    assert not run(tmp_path).undetermined  # gone is gone


def test_disk_removed_leaves_dangling_link(tmp_path):
    block(tmp_path, "nvme0n1", NVME, "0")
    block(tmp_path, "sdc", SATA.replace("sda", "sdc"), "0")
    shutil.rmtree(tmp_path / SATA.replace("sda", "sdc").lstrip("/"))
    result = run(tmp_path)
    assert list(blocks(result)) == ["nvme0n1"]
    assert [e.message for e in result.errors] == ["block device sdc vanished during scan"]


def test_no_sys_block(tmp_path):
    (tmp_path / "sys/class").mkdir(parents=True)
    result = run(tmp_path)
    assert result.features == {} and result.labels == {} and result.errors == ()


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=10))
def test_label_only_for_a_clean_zero(data):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        block(root, "nvme0n1", NVME, data)
        result = run(root)
        stripped = None
        try:
            stripped = data.decode("utf-8").strip() if b"\0" not in data else None
        except UnicodeDecodeError:
            pass
        assert (LABEL in result.labels) == (stripped == "0")
        assert len(result.features["block"].instances) == 1
