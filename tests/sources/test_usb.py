"""usb source: NFD's usb.device instances (class-00 devices expanded per interface) and
usb-<devlabel>.present labels, on trees shaped like real sysfs."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.discovery import DiscoveryConfig
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import usb
from tests.support.hostfiles import link, put

U = NFD_PREFIX + "usb-"
XHCI = "/sys/devices/pci0000:00/0000:00:14.0"


def usb_device(root: Path, name: str, parent: str, vendor: str, product: str, device_class: str | None, *,
               interfaces: dict[str, tuple[str, str | None]] = (), speed: str = "480", serial: str | None = None,
               manufacturer: str | None = None, product_name: str | None = None) -> str:
    """A USB device at ``<parent>/<name>`` plus its interfaces ``{"1.0": (class, driver)}``."""
    devdir = f"{parent}/{name}"
    busnum, _, port = name.partition("-")
    if name.startswith("usb"):
        busnum, port = name[3:], "0"
    files = {"idVendor": vendor, "idProduct": product, "busnum": busnum, "devnum": "3", "devpath": port,
             "speed": speed, "bcdDevice": "0100", "bNumInterfaces": f" {len(dict(interfaces))}"}
    if device_class is not None:
        files["bDeviceClass"] = device_class
    for key, value in (("serial", serial), ("manufacturer", manufacturer), ("product", product_name)):
        if value is not None:
            files[key] = value
    for file, value in files.items():
        put(root, f"{devdir}/{file}", value + "\n")
    put(root, "/sys/bus/usb/drivers/usb/bind", "")
    link(root, f"{devdir}/driver", "/sys/bus/usb/drivers/usb")
    link(root, f"/sys/bus/usb/devices/{name}", devdir)
    for suffix, (iface_class, driver) in dict(interfaces).items():
        iface = f"{name}:{suffix}"
        put(root, f"{devdir}/{iface}/bInterfaceClass", iface_class + "\n")
        put(root, f"{devdir}/{iface}/bInterfaceNumber", "00\n")
        link(root, f"/sys/bus/usb/devices/{iface}", f"{devdir}/{iface}")
        if driver:
            put(root, f"/sys/bus/usb/drivers/{driver}/bind", "")
            link(root, f"{devdir}/{iface}/driver", f"/sys/bus/usb/drivers/{driver}")
    return devdir


def root_hubs(root: Path) -> None:
    for bus, product, speed in (("1", "0002", "480"), ("2", "0003", "5000")):
        usb_device(root, f"usb{bus}", XHCI, "1d6b", product, "09", interfaces={"1.0": ("09", "hub")}, speed=speed,
                   serial="0000:00:14.0", manufacturer="Linux 5.15.0-91-generic xhci-hcd",
                   product_name="xHCI Host Controller")


def coral_before_firmware(root: Path, name: str = "1-2") -> str:
    """Coral USB Accelerator as it enumerates first: Global Unichip 1a6e:089a, class per interface."""
    return usb_device(root, name, f"{XHCI}/usb1", "1a6e", "089a", "00", interfaces={"1.0": ("fe", None)})


def run(root: Path, **config):
    return usb.discover(HostFS(root), usb.Config(**config))


def instances(result) -> list[dict[str, str]]:
    return [dict(i.attributes) for i in result.features["device"].instances]


def test_coral_before_firmware_load(tmp_path):
    root_hubs(tmp_path)
    coral_before_firmware(tmp_path)

    result = run(tmp_path)

    assert result.errors == ()
    assert result.labels == {U + "fe_1a6e_089a.present": "true"}  # the k8s-auto-labeller edgetpu dependency
    found = instances(result)
    assert found[0] == {"class": "fe", "vendor": "1a6e", "device": "089a", "sysfs_name": "1-2", "interface": "1-2:1.0",
                        "busnum": "1", "devnum": "3", "devpath": "2", "speed": "480"}
    assert found[1] == {"class": "09", "vendor": "1d6b", "device": "0002", "serial": "0000:00:14.0",
                        "sysfs_name": "usb1", "busnum": "1", "devnum": "3", "devpath": "0", "speed": "480",
                        "manufacturer": "Linux 5.15.0-91-generic xhci-hcd", "product": "xHCI Host Controller",
                        "driver": "hub"}
    assert [i["class"] for i in found] == ["fe", "09", "09"]  # hubs are found but not labelled
    origin = result.features["device"].instances[0].origin
    assert origin == f"{XHCI}/usb1/1-2/1-2:1.0"
    assert result.label_origins[U + "fe_1a6e_089a.present"] == origin


def test_coral_after_firmware_load_and_ncs2(tmp_path):
    root_hubs(tmp_path)
    usb_device(tmp_path, "2-2", f"{XHCI}/usb2", "18d1", "9302", "00", interfaces={"1.0": ("ff", None)}, speed="5000")
    usb_device(tmp_path, "1-3", f"{XHCI}/usb1", "03e7", "2485", "00", interfaces={"1.0": ("ff", None)},
               serial="03e72485", manufacturer="Movidius Ltd.", product_name="Movidius MyriadX")

    result = run(tmp_path)

    assert result.labels == {U + "ff_18d1_9302.present": "true", U + "ff_03e7_2485.present": "true"}
    assert {i["vendor"]: i.get("serial") for i in instances(result)} == {"03e7": "03e72485", "18d1": None,
                                                                          "1d6b": "0000:00:14.0"}


def test_class_00_expands_per_interface_keeping_duplicates(tmp_path):
    """A UVC webcam + mic: four interfaces, two video (0e) bound to uvcvideo, two audio (01)."""
    usb_device(tmp_path, "1-4", f"{XHCI}/usb1", "046d", "085e", "00", interfaces={
        "1.0": ("0e", "uvcvideo"), "1.1": ("0e", "uvcvideo"), "1.2": ("01", "snd-usb-audio"),
        "1.3": ("01", "snd-usb-audio")})

    result = run(tmp_path)

    found = instances(result)
    assert [(i["class"], i["interface"], i["driver"]) for i in found] == [
        ("0e", "1-4:1.0", "uvcvideo"), ("0e", "1-4:1.1", "uvcvideo"),
        ("01", "1-4:1.2", "snd-usb-audio"), ("01", "1-4:1.3", "snd-usb-audio")]
    assert result.labels == {U + "0e_046d_085e.present": "true"}


def test_device_level_class_gives_one_instance_with_first_interface_driver(tmp_path):
    """Intel AX201 Bluetooth: class e0 at device level, btusb on both interfaces."""
    usb_device(tmp_path, "1-10", f"{XHCI}/usb1", "8087", "0026", "e0", speed="12",
               interfaces={"1.0": ("e0", "btusb"), "1.1": ("e0", "btusb")})
    result = run(tmp_path, device_class_whitelist=("e0",))
    assert instances(result) == [{"class": "e0", "vendor": "8087", "device": "0026", "sysfs_name": "1-10",
                                  "busnum": "1", "devnum": "3", "devpath": "10", "speed": "12", "driver": "btusb"}]
    assert result.labels == {U + "e0_8087_0026.present": "true"}


def test_class_00_without_interfaces_yields_nothing(tmp_path):
    usb_device(tmp_path, "1-2", f"{XHCI}/usb1", "1a6e", "089a", "00")
    result = run(tmp_path)
    assert instances(result) == [] and result.labels == {} and result.errors == ()


def test_missing_device_class_means_no_class_and_no_label(tmp_path):
    usb_device(tmp_path, "1-2", f"{XHCI}/usb1", "1a6e", "089a", None, interfaces={"1.0": ("fe", None)})
    result = run(tmp_path)
    assert instances(result) == [{"vendor": "1a6e", "device": "089a", "sysfs_name": "1-2", "busnum": "1",
                                  "devnum": "3", "devpath": "2", "speed": "480"}]
    assert result.labels == {} and result.errors == ()


@pytest.mark.parametrize("whitelist, fields, expected", [
    (("fe",), ("class", "vendor", "device"), {"fe_1a6e_089a"}),
    (("f",), ("device", "class"), {"fe_089a", "ff_2485"}),  # prefix match, canonical field order
    (("FF",), ("serial", "vendor"), {"03e7_03e72485"}),  # whitelist lowercased
    (("09",), ("class", "vendor", "device", "serial"), {"09_1d6b_0002_0000:00:14.0"}),
    (("0e", "ef", "fe", "ff"), ("bogus",), {"fe_1a6e_089a", "ff_03e7_2485"}),  # nothing valid -> default
])
def test_whitelist_and_label_fields(tmp_path, whitelist, fields, expected):
    usb_device(tmp_path, "usb1", XHCI, "1d6b", "0002", "09", interfaces={"1.0": ("09", "hub")},
               serial="0000:00:14.0")
    coral_before_firmware(tmp_path)
    usb_device(tmp_path, "1-3", f"{XHCI}/usb1", "03e7", "2485", "00", interfaces={"1.0": ("ff", None)},
               serial="03e72485")
    result = run(tmp_path, device_class_whitelist=whitelist, device_label_fields=fields)
    assert set(result.labels) == {U + e + ".present" for e in expected}
    assert [e.message for e in result.errors] == (
        ["unknown usb label field 'bogus' ignored (valid: class, vendor, device, serial)"] if "bogus" in fields else [])


def test_label_with_serial_is_dropped_by_discovery_when_invalid(tmp_path):
    """A root hub's serial (a PCI address) makes an invalid label name; discovery drops it with an error."""
    from agent.discovery import run_source

    usb_device(tmp_path, "usb1", XHCI, "1d6b", "0002", "09", serial="0000:00:14.0")
    result = run_source("usb", HostFS(tmp_path), DiscoveryConfig(sources={"usb": usb.Config(
        device_class_whitelist=("09",), device_label_fields=("class", "serial"))}))
    assert result.labels == {}
    assert "dropped" in result.errors[0].message


def _break(root: Path, devdir: str, how: str) -> tuple[str, str]:
    real = root / devdir.lstrip("/")
    if how == "missing idVendor":
        (real / "idVendor").unlink()
        return "idVendor", "missing; USB device 1-2 skipped"
    if how == "idVendor is a directory":
        (real / "idVendor").unlink()
        (real / "idVendor").mkdir()
        return "idVendor", "unreadable (Is a directory)"
    if how == "binary idProduct":
        (real / "idProduct").write_bytes(b"\x89\x00\x1a")
        return "idProduct", "binary content"
    if how == "0x-prefixed idVendor":
        (real / "idVendor").write_text("0x1a6e\n")
        return "idVendor", "not a 4-digit hex ID: '0x1a6e'"
    if how == "non-hex idProduct":
        (real / "idProduct").write_text("coral\n")
        return "idProduct", "not a 4-digit hex ID"
    if how == "empty idVendor":
        (real / "idVendor").write_text("\n")
        return "idVendor", "empty; USB device 1-2 skipped"
    if how == "three-digit class":
        (real / "bDeviceClass").write_text("0fe\n")
        return "bDeviceClass", "not a 2-digit hex ID"
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["missing idVendor", "idVendor is a directory", "binary idProduct",
                                 "0x-prefixed idVendor", "non-hex idProduct", "empty idVendor", "three-digit class"])
def test_broken_device_is_skipped_with_an_error(tmp_path, how):
    root_hubs(tmp_path)
    devdir = coral_before_firmware(tmp_path)
    file, fragment = _break(tmp_path, devdir, how)

    result = run(tmp_path)

    assert [i["sysfs_name"] for i in instances(result)] == ["usb1", "usb2"]
    assert result.labels == {}
    assert [e.path for e in result.errors] == [f"/sys/bus/usb/devices/1-2/{file}"]
    assert fragment in result.errors[0].message


def test_bad_interface_class_skips_only_that_interface(tmp_path):
    devdir = usb_device(tmp_path, "1-4", f"{XHCI}/usb1", "046d", "085e", "00",
                        interfaces={"1.0": ("0e", "uvcvideo"), "1.2": ("01", None)})
    put(tmp_path, f"{devdir}/1-4:1.2/bInterfaceClass", b"\xff\xff\n")
    result = run(tmp_path)
    assert [i["interface"] for i in instances(result)] == ["1-4:1.0"]
    assert [e.path for e in result.errors] == ["/sys/bus/usb/devices/1-4/1-4:1.2/bInterfaceClass"]


def test_interface_classes_other_than_the_kernels_form(tmp_path):
    """Upper-case hex reads as lower-case; a wrong length skips that interface with an error; an
    interface directory without ``bInterfaceClass`` is no interface and is passed over silently."""
    devdir = usb_device(tmp_path, "1-4", f"{XHCI}/usb1", "046d", "085e", "00",
                        interfaces={"1.0": ("FF", "ftdi_sio"), "1.1": ("0ff", None), "1.2": ("03", "usbhid")})
    (tmp_path / devdir.lstrip("/") / "1-4:1.3").mkdir()

    result = run(tmp_path)

    assert [(i["interface"], i["class"], i.get("driver")) for i in instances(result)] == [
        ("1-4:1.0", "ff", "ftdi_sio"), ("1-4:1.2", "03", "usbhid")]
    assert [(e.path, e.message) for e in result.errors] == [
        ("/sys/bus/usb/devices/1-4/1-4:1.1/bInterfaceClass", "not a 2-digit hex ID: '0ff'; interface skipped")]


def test_unplugged_device_leaves_a_dangling_link(tmp_path):
    root_hubs(tmp_path)
    devdir = coral_before_firmware(tmp_path)
    shutil.rmtree(tmp_path / devdir.lstrip("/"))
    result = run(tmp_path)
    assert [i["sysfs_name"] for i in instances(result)] == ["usb1", "usb2"]
    assert result.errors == ()  # nothing to read: like NFD's glob, a gone device simply is not there


def test_unplugged_between_glob_and_read(tmp_path):
    root_hubs(tmp_path)
    device = coral_before_firmware(tmp_path)
    devdir = tmp_path / device.lstrip("/")

    def unplug(operation: str, host_path: str, outcome: object) -> None:  # the first ID file read: gone
        if host_path == f"{device}/idVendor" and devdir.exists():
            shutil.rmtree(devdir)

    result = usb.discover(HostFS(tmp_path, recorder=unplug))
    assert [e.message for e in result.errors] == ["device vanished during scan; USB device 1-2 skipped"]
    assert result.labels == {}


def test_no_usb_bus(tmp_path):
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    result = run(tmp_path)
    assert result.features == {} and result.labels == {} and result.errors == ()


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries({f: st.one_of(st.binary(max_size=8), st.sampled_from([b"1a6e\n", b"00\n", b"fe\n", b""]))
                              for f in ("bDeviceClass", "idVendor", "idProduct", "serial")}),
       st.lists(st.binary(max_size=4), max_size=3))
def test_any_bytes_never_crash_and_labels_are_valid(files, interface_classes):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        devdir = f"{XHCI}/usb1/1-2"
        for name, data in files.items():
            put(root, f"{devdir}/{name}", data)
        for n, data in enumerate(interface_classes):
            put(root, f"{devdir}/1-2:1.{n}/bInterfaceClass", data)
        link(root, "/sys/bus/usb/devices/1-2", devdir)
        result = usb.discover(HostFS(root), usb.Config(device_class_whitelist=("",)))
        for key, value in result.labels.items():
            assert not qualified_name_errors(key) and not label_value_errors(value)
        for instance in result.features["device"].instances:
            assert set(instance.attributes.get("class", "00")) <= set("0123456789abcdef")
