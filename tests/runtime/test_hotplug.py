"""Event sources, the monitor thread, the polling fallback and source selection."""

import os
import shutil
import socket
import stat
import threading
from pathlib import Path

import pytest

from agent.discovery import DiscoveryConfig
from agent.hostfs import HostFS
from agent.runtime.discovery_cache import DiscoveryCache
from agent.runtime.event_sources import EventSourceError, SocketSource, open_source, parse_mode
from agent.runtime.hotplug import HotplugMonitor, Poller, fingerprints
from agent.runtime.subsystems import SUBSYSTEM_SOURCES, metric_labels, sources_for
from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import FIXTURES
from tests.runtime.helpers import CORAL_DEVPATH, CoralHost, wait_for


def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    return a, SocketSource(b)


def test_socket_source_parses_filters_and_survives_junk(caplog):
    sender, source = pair()
    try:
        sender.send(encode_kernel_uevent("add", CORAL_DEVPATH, "usb", seqnum=1))
        sender.send(b"\xff junk without structure")
        sender.send(encode_kernel_uevent("add", "/devices/virtual/input/input9", "input"))  # not monitored
        sender.send(b"add@/devices/x\0ACTION=add\0")  # truncated: no SUBSYSTEM
        sender.send(encode_kernel_uevent("bind", CORAL_DEVPATH + "/2-2:1.0", "usb"))
        events = source.receive()
        assert [(e.action, e.subsystem) for e in events] == [("add", "usb"), ("bind", "usb")]
        assert source.junk.count == 2
        assert "dropped an undecodable event" in caplog.text
        assert source.receive() == []  # drained, non-blocking
    finally:
        sender.close()
        source.close()


def test_monitor_thread_delivers_events_and_stops():
    sender, source = pair()
    got, seen = [], threading.Event()

    def handler(event):
        got.append(event)
        if len(got) == 2:
            seen.set()

    monitor = HotplugMonitor(source, handler).start()
    try:
        sender.send(encode_kernel_uevent("remove", CORAL_DEVPATH, "usb"))
        sender.send(encode_kernel_uevent("add", "/devices/pci0000:00/0000:03:00.0", "pci"))
        assert seen.wait(10)
        assert [e.subsystem for e in got] == ["usb", "pci"]
    finally:
        monitor.stop()
        sender.close()
    assert not monitor.alive()


def test_a_failing_handler_does_not_stop_delivery():
    sender, source = pair()
    got = []

    def handler(event):
        got.append(event)
        if len(got) == 1:
            raise RuntimeError("bug")

    monitor = HotplugMonitor(source, handler).start()
    try:
        sender.send(encode_kernel_uevent("add", "/devices/a", "usb"))
        sender.send(encode_kernel_uevent("add", "/devices/b", "usb"))
        wait_for(lambda: len(got) == 2, what="both events")
        assert monitor.alive()
    finally:
        monitor.stop()
        sender.close()


def test_inject_socket_binds_and_reports_unusable_paths(tmp_path):
    path = str(tmp_path / "uevents.sock")
    old = os.umask(0)
    try:
        source = open_source(f"inject:{path}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600  # under umask 000 a plain bind is 0777
    sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sender.sendto(encode_kernel_uevent("add", CORAL_DEVPATH, "usb"), path)
        wait_for(lambda: source.receive() or None, what="datagram")
    finally:
        sender.close()
        source.close()
    assert not os.path.exists(path)
    with pytest.raises(EventSourceError):
        open_source(f"inject:{tmp_path}/missing-dir/x.sock")
    assert open_source("poll") is None and open_source("off") is None


@pytest.mark.parametrize("text, parsed", [("kernel", ("kernel", "")), ("udev", ("udev", "")), ("poll", ("poll", "")),
                                          ("off", ("off", "")), ("inject:/tmp/s", ("inject", "/tmp/s"))])
def test_parse_mode(text, parsed):
    assert parse_mode(text) == parsed


@pytest.mark.parametrize("text", ["", "inject:", "netlink", "KERNEL"])
def test_parse_mode_refuses(text):
    with pytest.raises(ValueError):
        parse_mode(text)


def test_kernel_netlink_monitor_opens_or_fails_cleanly():
    """Where netlink is allowed this opens a real pyudev monitor; elsewhere a clean error."""
    try:
        source = open_source("kernel")
    except EventSourceError as err:
        assert "uevent monitor" in str(err)
        return
    try:
        assert source.fileno() >= 0
        assert isinstance(source.receive(), list)  # whatever the host is doing: must not block or raise
    finally:
        source.close()


def test_poller_reports_the_changed_subsystem(tmp_path):
    host = CoralHost(tmp_path)
    got = []
    poller = Poller(HostFS(str(host.root)), got.append, interval=60)  # driven by tick(), thread not started
    assert poller.tick() == []
    host.unplug()
    assert poller.tick() == ["usb"]
    assert got[0].action == "poll" and got[0].subsystem == "usb"
    assert poller.tick() == []
    host.plug()
    assert poller.tick() == ["usb"]


def test_poller_thread_runs_and_stops(tmp_path):
    host = CoralHost(tmp_path)
    got = []
    poller = Poller(HostFS(str(host.root)), got.append, interval=0.05).start()
    try:
        host.unplug()
        wait_for(lambda: got, what="poll event")
    finally:
        poller.stop()
    assert not poller.alive()


def test_fingerprints_cover_modules_and_tolerate_hostile_trees(tmp_path):
    root = tmp_path / "h"
    (root / "proc").mkdir(parents=True)
    (root / "proc/modules").write_text("apex 28672 0 - Live 0x0\n")
    (root / "sys/bus").mkdir(parents=True)
    (root / "sys/bus/pci").write_text("a file where a directory should be")
    first = fingerprints(HostFS(str(root)))
    (root / "proc/modules").write_text("apex 28672 0 - Live 0x0\ngasket 1 1 apex, Live 0x0\n")
    second = fingerprints(HostFS(str(root)))
    assert first["module"] != second["module"]
    assert first["pci"] == second["pci"]


def test_source_selection():
    assert sources_for("usb") == {"usb", "network", "storage"}
    assert sources_for("usb", ["usb", "cpu"]) == {"usb"}
    assert sources_for("module") == {"kernel"}
    assert sources_for("tty") == {"usb"}  # a USB serial adapter's node: the device plugin's /dev
    assert sources_for("input") == frozenset()
    for sources in SUBSYSTEM_SOURCES.values():
        from agent.sources import SOURCE_NAMES
        assert set(sources) <= set(SOURCE_NAMES)
    assert metric_labels("usb", "add") == ("usb", "add")
    assert metric_labels("evil\nlabel", "explode") == ("other", "other")


def test_discovery_cache_reruns_only_named_sources(tmp_path):
    host = CoralHost(tmp_path)
    timings = []
    cache = DiscoveryCache(HostFS(str(host.root)), DiscoveryConfig(), ["cpu", "pci", "usb"],
                           observe=lambda s, t: timings.append(s))
    assert cache.refresh({"usb"}) == ("cpu", "pci", "usb")  # no cache yet: everything
    cpu_result = cache.current.results["cpu"]
    assert any("18d1" in k for k in cache.current.labels)
    host.unplug()
    timings.clear()
    assert cache.refresh({"usb", "network"}) == ("usb",)  # network is not enabled here
    assert timings == ["usb"]
    assert cache.current.results["cpu"] is cpu_result  # kept, not rerun
    assert not any("18d1" in k for k in cache.current.labels)
    assert cache.refresh(set()) == ()
    generation = cache.generation
    cache.refresh(None)
    # a resync that finds the same host keeps the generation: the plan is not rebuilt
    assert cache.generation == generation and sorted(timings) == ["cpu", "pci", "usb", "usb"]
    unchanged = cache.current
    host.plug()
    cache.refresh({"usb"})
    assert cache.generation == generation + 1 and cache.current is not unchanged
    assert any("18d1" in k for k in cache.current.labels)


def test_a_partial_rescan_never_removes_what_other_sources_found(tmp_path):
    """A USB event reruns usb/network/storage only. The GPU (0000:00:02.0, the only class-0300
    function of this host) vanishing from the PCI tree at the same time, with no PCI event, must
    not take the PCI source's label away: only a PCI event or the resync may rerun ``pci``."""
    host = CoralHost(tmp_path)
    cache = DiscoveryCache(HostFS(str(host.root)), DiscoveryConfig(), ["pci", "usb", "network", "storage"])
    cache.refresh(None)
    gpu = "feature.node.kubernetes.io/pci-0300_8086.present"
    assert gpu in cache.current.labels
    (host.root / "sys/bus/pci/devices/0000:00:02.0").unlink()
    host.unplug()
    assert cache.refresh(sources_for("usb")) == ("network", "storage", "usb")
    assert gpu in cache.current.labels  # pci was not rerun: its result stands
    assert not any("18d1" in k for k in cache.current.labels)  # the USB change itself went through
    cache.refresh(sources_for("pci"))
    assert gpu not in cache.current.labels  # a PCI event (or the resync) does rerun pci


def test_poller_sees_a_tty_come_and_go_without_its_usb_device_changing(tmp_path):
    """A serial adapter whose driver (cp210x) is loaded after the device: the USB device list is
    the same, only /sys/class/tty changes; the poll event reruns usb so /dev is resolved again."""
    root = Path(shutil.copytree(FIXTURES / "homelab", tmp_path / "host", symlinks=True))
    poller = Poller(HostFS(str(root)), lambda _e: None, interval=60)
    assert poller.tick() == []
    (root / "sys/class/tty/ttyUSB0").unlink()
    assert poller.tick() == ["tty"]
    assert sources_for("tty") == {"usb"}
