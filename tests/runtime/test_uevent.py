"""Kernel uevent wire format: real datagrams parse; hostile ones are refused, never crash."""

from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.uevent import UEvent, UEventError, encode_kernel_uevent, from_pyudev, parse_kernel_uevent

# captured from `udevadm monitor --kernel --property` style traffic (usb add of a Coral)
CORAL_ADD = (b"add@/devices/pci0000:00/0000:00:14.0/usb2/2-2\0ACTION=add\0"
             b"DEVPATH=/devices/pci0000:00/0000:00:14.0/usb2/2-2\0SUBSYSTEM=usb\0MAJOR=189\0MINOR=129\0"
             b"DEVNAME=bus/usb/002/002\0DEVTYPE=usb_device\0PRODUCT=18d1/9302/100\0TYPE=0/0/0\0"
             b"BUSNUM=002\0DEVNUM=002\0SEQNUM=4711\0")


def test_parses_a_real_kernel_datagram():
    event = parse_kernel_uevent(CORAL_ADD)
    assert event.action == "add"
    assert event.subsystem == "usb"
    assert event.devpath == "/devices/pci0000:00/0000:00:14.0/usb2/2-2"
    assert event.properties["PRODUCT"] == "18d1/9302/100"
    assert event.attributes["DEVTYPE"] == "usb_device"
    assert event.seqnum == 4711


def test_encode_round_trips():
    data = encode_kernel_uevent("remove", "/devices/x/y", "pci", seqnum=9, PCI_ID="1AC1:089A")
    event = parse_kernel_uevent(data)
    assert (event.action, event.subsystem, event.devpath, event.seqnum) == ("remove", "pci", "/devices/x/y", 9)
    assert event.properties["PCI_ID"] == "1AC1:089A"


@pytest.mark.parametrize("data, why", [
    (b"", "empty"),
    (b"add@/devices/x\0ACTION=add\0DEVPATH=/devices/x\0", "SUBSYSTEM"),       # truncated before SUBSYSTEM
    (b"add@/devices/x\0ACTION=add\0DEVPATH=/devices/x\0SUBSYS", "truncated"),   # cut mid-property
    (b"libudev\0\xfe\xed\xca\xfe" + b"\0" * 32, "libudev"),
    (b"\xff\xfe\x00junk\0", "UTF-8"),
    (b"add/devices/x\0SUBSYSTEM=usb\0", "action@devpath"),
    (b"add@/devices/x\0ACTION=remove\0SUBSYSTEM=usb\0", "disagree"),
    (b"add@/devices/x\0SUBSYSTEM=u sb\0", "characters"),
    (b"add@relative/x\0SUBSYSTEM=usb\0", "devpath"),
    (b"add@/devices/x\0lower=case\0SUBSYSTEM=usb\0", "KEY=VALUE"),
    (b"add@/devices/x\0SUBSYSTEM=usb\0" + b"A=" + b"x" * 9000 + b"\0", "larger"),
    (b"add@/devices/x\0SUBSYSTEM=usb\0" + b"".join(b"K%d=v\0" % i for i in range(200)), "too many"),
])
def test_hostile_datagrams_are_refused_with_a_reason(data, why):
    with pytest.raises(UEventError, match=why):
        parse_kernel_uevent(data)


def test_non_bytes_refused():
    with pytest.raises(UEventError):
        parse_kernel_uevent("add@/x\0SUBSYSTEM=usb")  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=512))
def test_random_bytes_parse_or_raise_uevent_error_only(data):
    try:
        event = parse_kernel_uevent(data)
    except UEventError:
        return
    assert isinstance(event, UEvent) and event.subsystem and event.devpath.startswith("/")


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=len(CORAL_ADD)))
def test_every_truncation_of_a_real_event_is_safe(cut):
    try:
        event = parse_kernel_uevent(CORAL_ADD[:cut])
    except UEventError:
        return
    assert event.subsystem == "usb" and event.action == "add"


def test_from_pyudev_builds_the_same_record():
    class FakeDevice:  # the attributes pyudev.Device exposes
        action = "add"
        subsystem = "usb"
        device_path = "/devices/pci0000:00/0000:00:14.0/usb2/2-2"
        properties: ClassVar[dict[str, str]] = {"ACTION": "add", "SUBSYSTEM": "usb", "DEVPATH": device_path, "SEQNUM": "4711",
                      "MAJOR": "189", "MINOR": "129", "DEVNAME": "bus/usb/002/002", "DEVTYPE": "usb_device",
                      "PRODUCT": "18d1/9302/100", "TYPE": "0/0/0", "BUSNUM": "002", "DEVNUM": "002"}

    assert from_pyudev(FakeDevice()) == parse_kernel_uevent(CORAL_ADD)


@pytest.mark.parametrize("subsystem,action,devtype,ends", [
    ("usb", "add", "usb_device", False),        # interfaces follow
    ("usb", "add", "usb_interface", False),
    ("usb", "bind", "usb_interface", False),    # the device's own bind follows
    ("usb", "bind", "usb_device", True),        # sent after all interfaces (usb_generic_driver_probe)
    ("usb", "remove", "usb_interface", False),
    ("usb", "remove", "usb_device", True),      # interfaces went first
    ("net", "add", "", True),
    ("net", "remove", "", True),
    ("pci", "add", "", False),                  # a driver bind may follow
    ("block", "add", "disk", False),            # partitions follow
])
def test_which_events_end_their_burst(subsystem, action, devtype, ends):
    from agent.runtime.subsystems import ends_burst

    props = {"DEVTYPE": devtype} if devtype else {}
    assert ends_burst(subsystem, action, props) is ends
