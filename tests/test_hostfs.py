"""The host seam: rooting, symlink re-rooting, escape refusal, error classes, recording."""

from __future__ import annotations

import os

import pytest

from agent.hostfs import HostFileError, HostFS


@pytest.fixture
def tree(tmp_path):
    dev = tmp_path / "sys/devices/pci0000:00/0000:00:02.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x8086\n")
    (dev / "junk").write_bytes(b"\xff\xfe\x00\x01")
    drivers = tmp_path / "sys/bus/pci/drivers/i915"
    drivers.mkdir(parents=True)
    os.symlink("../../../../bus/pci/drivers/i915", dev / "driver")
    bus = tmp_path / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:02.0", bus / "0000:00:02.0")
    # an absolute link must be re-rooted under the host root, not followed on this machine
    os.symlink("/sys/devices/pci0000:00/0000:00:02.0", bus / "absolute")
    return tmp_path


def test_reads_through_relative_and_absolute_links(tree):
    host = HostFS(tree)
    assert host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor") == "0x8086"
    assert host.read_attr("/sys/bus/pci/devices/absolute/vendor") == "0x8086"
    assert host.resolve("/sys/bus/pci/devices/absolute") == "/sys/devices/pci0000:00/0000:00:02.0"
    assert host.link_name("/sys/bus/pci/devices/0000:00:02.0/driver") == "i915"


def test_missing_is_none_and_junk_is_an_error(tree):
    host = HostFS(tree)
    assert host.read_attr("/sys/devices/nothing/here") is None
    with pytest.raises(HostFileError) as err:
        host.read_attr("/sys/devices/pci0000:00/0000:00:02.0/junk")
    assert "binary" in err.value.reason
    assert host.listdir("/sys/no/such/dir") == []


def test_dotdot_cannot_escape_root(tree):
    host = HostFS(tree)
    assert host.path("/../../etc/passwd") == tree / "etc/passwd"
    assert host.resolve("/sys/../../../etc") == "/etc"


def test_unreadable_file_is_an_error_not_missing(tree):
    target = tree / "sys/devices/pci0000:00/0000:00:02.0/vendor"
    target.chmod(0)
    try:
        if os.access(target, os.R_OK):
            pytest.skip("running as root: permissions are not enforced")
        with pytest.raises(HostFileError) as err:
            HostFS(tree).read_attr("/sys/devices/pci0000:00/0000:00:02.0/vendor")
        assert not err.value.missing
    finally:
        target.chmod(0o644)


def test_recorder_sees_every_path_read(tree):
    seen: list[str] = []
    host = HostFS(tree, recorder=seen.append)
    host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor")
    host.listdir("/sys/bus/pci/devices")
    assert "/sys/bus/pci/devices/0000:00:02.0/vendor" in seen
    assert "/sys/bus/pci/devices" in seen


def test_glob_last_component(tree):
    host = HostFS(tree)
    assert host.glob("/sys/bus/pci/devices/0000:*") == ["/sys/bus/pci/devices/0000:00:02.0"]


def test_dotdot_after_a_link_steps_up_from_the_link_target_as_the_kernel_does(tmp_path):
    # /sys/class/net/eth0 -> ../../devices/pci0000:00/0000:00:03.0/net/eth0, and
    # eth0/device -> ../../../0000:00:03.0: ".." must walk the *target's* parents.
    device = tmp_path / "sys/devices/pci0000:00/0000:00:03.0"
    (device / "net/eth0").mkdir(parents=True)
    (device / "vendor").write_text("0x8086\n")
    (tmp_path / "sys/class/net").mkdir(parents=True)
    os.symlink("../../devices/pci0000:00/0000:00:03.0/net/eth0", tmp_path / "sys/class/net/eth0")
    os.symlink("../../../0000:00:03.0", device / "net/eth0/device")
    host = HostFS(tmp_path)
    assert host.resolve("/sys/class/net/eth0/device") == "/sys/devices/pci0000:00/0000:00:03.0"
    assert host.read_attr("/sys/class/net/eth0/device/vendor") == "0x8086"


def test_symlink_loops_are_an_error_not_a_hang(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    host = HostFS(tmp_path)
    with pytest.raises(HostFileError, match="too many levels"):
        host.resolve("/a/x")
    assert host.exists("/a/x") is False


def test_clear_cache_sees_devices_that_moved(tmp_path):
    (tmp_path / "devices/one").mkdir(parents=True)
    (tmp_path / "devices/two").mkdir(parents=True)
    (tmp_path / "devices/two/serial").write_text("2\n")
    os.symlink("devices/one", tmp_path / "current")
    host = HostFS(tmp_path)
    assert host.read_attr("/current/serial") is None
    os.remove(tmp_path / "current")
    os.symlink("devices/two", tmp_path / "current")
    host.clear_cache()
    assert host.read_attr("/current/serial") == "2"
