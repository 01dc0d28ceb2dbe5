"""network source: physical vs virtual interfaces, SR-IOV labels, EINVAL speed of a down link."""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from agent.features import NFD_PREFIX
from agent.hostfs import HostFileError, HostFS
from agent.sources import network
from tests.host_faults import fail_reads
from tests.support.hostfiles import link, put

N = NFD_PREFIX + "network-"


def netdev(root: Path, name: str, parent: str | None, *, operstate="up", speed: str | None = "100000", mtu="1500",
           driver: str | None = None, totalvfs: str | None = None, numvfs: str | None = None) -> str:
    """An interface under its device (``parent``) or under devices/virtual/net, with its class link."""
    devdir = f"{parent}/net/{name}" if parent else f"/sys/devices/virtual/net/{name}"
    put(root, f"{devdir}/operstate", operstate + "\n")
    put(root, f"{devdir}/mtu", mtu + "\n")
    put(root, f"{devdir}/address", "b8:ce:f6:12:34:56\n")
    if speed is not None:
        put(root, f"{devdir}/speed", speed + "\n")
    link(root, f"/sys/class/net/{name}", devdir)
    if parent:
        put(root, f"{parent}/vendor", "0x15b3\n")
        # the kernel's form: up to the device's parent, then down by name
        os.symlink("../../../" + os.path.basename(parent), root / devdir.lstrip("/") / "device")
        if driver:
            put(root, f"/sys/bus/pci/drivers/{driver}/bind", "")
            if not (root / parent.lstrip("/") / "driver").exists():
                link(root, f"{parent}/driver", f"/sys/bus/pci/drivers/{driver}")
        if totalvfs is not None:
            put(root, f"{parent}/sriov_totalvfs", totalvfs + "\n")
            put(root, f"{parent}/sriov_numvfs", (numvfs or "0") + "\n")
    return devdir


CX6 = "/sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.0"
CX6_VF = "/sys/devices/pci0000:00/0000:00:01.1/0000:0c:00.2"
E810 = "/sys/devices/pci0000:80/0000:80:02.0/0000:81:00.0"


def server(root: Path, *, numvfs: str = "4") -> None:
    netdev(root, "ens1f0np0", CX6, driver="mlx5_core", totalvfs="16", numvfs=numvfs)
    netdev(root, "ens1f0v0", CX6_VF, driver="mlx5_core")
    netdev(root, "eno1", E810, speed="25000", driver="ice", totalvfs="128", numvfs="0")
    netdev(root, "lo", None, operstate="unknown", speed=None, mtu="65536")
    netdev(root, "docker0", None, operstate="down", speed=None)
    netdev(root, "bond0", None, speed="200000", mtu="9000")
    put(root, "/sys/class/net/bonding_masters", "bond0\n")


def run(root: Path):
    return network.discover(HostFS(root))


def attrs(result, feature: str) -> dict[str, dict[str, str]]:
    return {i.attributes["name"]: dict(i.attributes) for i in result.features[feature].instances}


def test_server_with_sriov_configured(tmp_path):
    server(tmp_path)
    result = run(tmp_path)

    assert result.errors == ()
    assert result.labels == {N + "sriov.capable": "true", N + "sriov.configured": "true"}
    physical = attrs(result, "device")
    assert physical["ens1f0np0"] == {"name": "ens1f0np0", "operstate": "up", "speed": "100000", "sriov_numvfs": "4",
                                     "sriov_totalvfs": "16", "mtu": "1500", "driver": "mlx5_core",
                                     "pci_address": "0000:0c:00.0"}
    assert physical["ens1f0v0"] == {"name": "ens1f0v0", "operstate": "up", "speed": "100000", "mtu": "1500",
                                    "driver": "mlx5_core", "pci_address": "0000:0c:00.2"}
    assert physical["eno1"]["sriov_totalvfs"] == "128" and physical["eno1"]["driver"] == "ice"
    assert attrs(result, "virtual") == {
        "bond0": {"name": "bond0", "operstate": "up", "speed": "200000", "mtu": "9000"},
        "docker0": {"name": "docker0", "operstate": "down", "mtu": "1500"},
        "lo": {"name": "lo", "operstate": "unknown", "mtu": "65536"},
    }
    origins = {i.attributes["name"]: i.origin for i in result.features["device"].instances}
    assert origins["eno1"] == f"{E810}/net/eno1"
    assert result.label_origins[N + "sriov.configured"] == f"{CX6}/net/ens1f0np0/device/sriov_numvfs"


def test_capable_but_not_configured(tmp_path):
    server(tmp_path, numvfs="0")
    assert run(tmp_path).labels == {N + "sriov.capable": "true"}


def test_usb_nic_has_a_driver_but_no_pci_address(tmp_path):
    iface = "/sys/devices/pci0000:00/0000:00:14.0/usb2/2-1/2-1:1.0"
    netdev(tmp_path, "enx00e04c680001", iface, speed="1000", driver="r8152")
    result = run(tmp_path)
    assert attrs(result, "device")["enx00e04c680001"] == {
        "name": "enx00e04c680001", "operstate": "up", "speed": "1000", "mtu": "1500", "driver": "r8152"}
    assert result.labels == {}


def test_speed_einval_on_a_down_link_is_just_absent(tmp_path, monkeypatch):
    server(tmp_path)
    fail_reads(monkeypatch, tmp_path, {"/sys/class/net/eno1/speed": errno.EINVAL, "/sys/class/net/lo/speed": errno.EINVAL})
    result = network.discover(HostFS(tmp_path))
    assert result.errors == ()
    assert "speed" not in attrs(result, "device")["eno1"]


def test_other_speed_failures_are_reported(tmp_path, monkeypatch):
    server(tmp_path)
    fail_reads(monkeypatch, tmp_path, {"/sys/class/net/eno1/speed": errno.EIO})
    result = network.discover(HostFS(tmp_path))
    assert [(e.path, e.message) for e in result.errors] == [
        ("/sys/class/net/eno1/speed", "unreadable: Input/output error")]
    assert "speed" not in attrs(result, "device")["eno1"] and "mtu" in attrs(result, "device")["eno1"]


def test_live_host_speed_einval_is_not_an_error():
    """On this machine, if some interface really answers EINVAL, it must not show up as an error."""
    try:
        HostFS("/").read_attr("/sys/class/net/lo/speed")
        pytest.skip("lo/speed readable here")
    except HostFileError as exc:
        if not isinstance(exc.__cause__, OSError) or exc.__cause__.errno != errno.EINVAL:
            pytest.skip(f"lo/speed fails differently here: {exc}")
    result = network.discover(HostFS("/"))
    assert not [e for e in result.errors if e.path.endswith("/speed")]


def test_junk_attributes(tmp_path):
    netdev(tmp_path, "ens1f0np0", CX6, driver="mlx5_core", totalvfs="sixteen", numvfs="4")
    (tmp_path / CX6.lstrip("/") / "net/ens1f0np0/mtu").write_bytes(b"\x00\x01")
    (tmp_path / CX6.lstrip("/") / "net/ens1f0np0/operstate").unlink()
    (tmp_path / CX6.lstrip("/") / "net/ens1f0np0/operstate").mkdir()
    result = run(tmp_path)
    assert result.labels == {N + "sriov.configured": "true"}
    assert sorted((e.path.rsplit("/", 1)[-1], e.message.split(":")[0]) for e in result.errors) == [
        ("mtu", "unreadable"), ("operstate", "unreadable"), ("sriov_totalvfs", "not a VF count")]
    assert attrs(result, "device")["ens1f0np0"]["sriov_totalvfs"] == "sixteen"  # raw, as NFD keeps it
    # a damaged VF count is no evidence of "not capable", an unreadable operstate none of anything:
    # undetermined, a caller keeps its last answer
    assert dict(result.undetermined) == {"device": (N + "sriov.capable",), "virtual": ()}
    (tmp_path / CX6.lstrip("/") / "net/ens1f0np0/operstate").rmdir()
    assert dict(run(tmp_path).undetermined) == {"device": (N + "sriov.capable",)}  # junk mtu: read, decided


def test_an_unreadable_vf_count_is_undetermined_unless_another_nic_decides_the_label(tmp_path):
    server(tmp_path, numvfs="0")
    numvfs = tmp_path / CX6.lstrip("/") / "sriov_numvfs"
    numvfs.unlink()
    numvfs.mkdir()  # EISDIR: unreadable even for root
    result = run(tmp_path)
    assert result.labels == {N + "sriov.capable": "true"}  # eno1 and the CX6 both say capable
    assert dict(result.undetermined) == {"device": (N + "sriov.configured",), "virtual": ()}
    numvfs.rmdir()
    put(tmp_path, str(CX6) + "/sriov_numvfs", "0\n")
    assert not run(tmp_path).undetermined  # every count read: a real "not configured"
    put(tmp_path, E810 + "/sriov_numvfs", "2\n")  # eno1 configured
    numvfs.unlink()
    numvfs.mkdir()
    result = run(tmp_path)
    # the label is decided by eno1; the NICs' instances are not (one VF count unknown)
    assert result.labels[N + "sriov.configured"] == "true"
    assert dict(result.undetermined) == {"device": (), "virtual": ()}


def test_interface_removed_leaves_dangling_link(tmp_path):
    server(tmp_path)
    shutil.rmtree(tmp_path / "sys/devices/virtual/net/docker0")
    result = run(tmp_path)
    assert "docker0" not in attrs(result, "virtual")
    assert [(e.path, e.message) for e in result.errors] == [
        ("/sys/devices/virtual/net/docker0", "interface docker0 vanished during scan")]


def test_no_class_net(tmp_path):
    (tmp_path / "sys").mkdir()
    result = run(tmp_path)
    assert result.features == {} and result.labels == {} and result.errors == ()


def test_only_bonding_masters(tmp_path):
    put(tmp_path, "/sys/class/net/bonding_masters", "\n")
    result = run(tmp_path)
    assert result.features["device"].instances == () and result.features["virtual"].instances == ()
    assert result.errors == ()


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=12), st.binary(max_size=12))
@example(totalvfs=b"", numvfs=b"\x011")  # found by hypothesis: cleaning made the count 1 of it
def test_any_vf_count_bytes(totalvfs, numvfs):
    """Labels only for a clean positive decimal count; anything else is an error or nothing."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        netdev(root, "ens1f0np0", CX6, driver="mlx5_core", totalvfs="0", numvfs="0")
        (root / CX6.lstrip("/") / "sriov_totalvfs").write_bytes(totalvfs)
        (root / CX6.lstrip("/") / "sriov_numvfs").write_bytes(numvfs)
        result = run(root)

        def positive(data: bytes) -> bool:
            try:
                text = data.decode("utf-8").strip()
            except UnicodeDecodeError:
                return False
            return "\0" not in text and text.isascii() and text.isdigit() and int(text) > 0

        assert (N + "sriov.capable" in result.labels) == positive(totalvfs)
        assert (N + "sriov.configured" in result.labels) == positive(numvfs)
        assert len(result.features["device"].instances) == 1


def test_read_attributes_answers_as_each_file_read_alone(tmp_path):
    """An interface's files read directory by directory (one read_attrs of the interface, one per
    subdirectory, the plan made once per list) give what reading each file alone gives: a value,
    nothing for an absent file, an error (counted in ``unread``) for an unreadable one,
    in the list's order; for the lists the source uses and for any other list."""
    from agent.sources._sysfs import AttributeReader

    devdir = netdev(tmp_path, "ens1f0np0", CX6, driver="mlx5_core", totalvfs="16", numvfs="4")
    put(tmp_path, f"{devdir}/queues/rx-0/rps_cpus", "00000000\n")
    (tmp_path / devdir.lstrip("/") / "statistics").mkdir()
    (tmp_path / devdir.lstrip("/") / "statistics/rx_bytes").mkdir()  # unreadable: EISDIR
    (tmp_path / devdir.lstrip("/") / "carrier").mkdir()
    entry = "/sys/class/net/ens1f0np0"
    lists = [network._PHYSICAL_FILES, network._VIRTUAL_FILES,
             (("carrier", "carrier"), ("rx", "statistics/rx_bytes"), ("vfs", "device/sriov_totalvfs"),
              ("rps", "queues/rx-0/rps_cpus"), ("absent", "device/nothing"), ("mtu", "mtu"), ("gone", "nothing"))]
    for files in lists:
        reader = AttributeReader(HostFS(tmp_path), "network")
        found = network.read_attributes(reader, entry, "ens1f0np0", files)
        alone = AttributeReader(HostFS(tmp_path), "network")
        expected = {"name": "ens1f0np0"}
        for attr, file in files:
            value = alone.attr(f"{entry}/{file}")
            if value is not None:
                expected[attr] = value
        assert found == expected
        assert [(e.path, e.message) for e in reader.errors] == [(e.path, e.message) for e in alone.errors]
        assert reader.unread == alone.unread == len(alone.errors)
    assert found == {"name": "ens1f0np0", "vfs": "16", "rps": "00000000", "mtu": "1500"}
    assert len(reader.errors) == 2
