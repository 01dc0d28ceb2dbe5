"""pci source: NFD-exact pci.device instances and pci-<devlabel> labels, plus our extra
attributes, on host trees shaped like real sysfs (bus entries are relative links into
/sys/devices, driver/iommu_group/physfn are links)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.discovery import DiscoveryConfig, run_source
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import pci
from agent.sources._sysfs import MalformedId, hex_digits
from tests.support.hostfiles import link, put

P = NFD_PREFIX + "pci-"


def pci_function(root: Path, address: str, vendor: str, device: str, cls: str, sub_vendor: str, sub_device: str, *,
                 bridge: str = "pci0000:00", driver: str | None = None, numa: str = "-1", group: str | None = None,
                 group_type: str = "DMA-FQ", revision: str = "0xa1", totalvfs: str | None = None,
                 numvfs: str | None = None, physfn: str | None = None, dmar: str | None = None) -> str:
    """One PCI function under /sys/devices with its bus link; returns its /sys/devices path."""
    devdir = f"/sys/devices/{bridge}/{address}"
    for name, value in (("vendor", vendor), ("device", device), ("class", cls), ("subsystem_vendor", sub_vendor),
                        ("subsystem_device", sub_device), ("numa_node", numa), ("revision", revision)):
        put(root, f"{devdir}/{name}", value + "\n")
    put(root, f"{devdir}/enable", "1\n")
    link(root, f"/sys/bus/pci/devices/{address}", devdir)
    if driver:
        put(root, f"/sys/bus/pci/drivers/{driver}/bind", "")
        link(root, f"{devdir}/driver", f"/sys/bus/pci/drivers/{driver}")
    if group:
        put(root, f"/sys/kernel/iommu_groups/{group}/type", group_type + "\n")
        link(root, f"{devdir}/iommu_group", f"/sys/kernel/iommu_groups/{group}")
    if dmar:
        put(root, f"/sys/devices/virtual/iommu/{dmar}/intel-iommu/version", "1:0\n")
        link(root, f"{devdir}/iommu", f"/sys/devices/virtual/iommu/{dmar}")
    if totalvfs is not None:
        put(root, f"{devdir}/sriov_totalvfs", totalvfs + "\n")
        put(root, f"{devdir}/sriov_numvfs", (numvfs or "0") + "\n")
    if physfn:
        link(root, f"{devdir}/physfn", f"/sys/devices/{bridge}/{physfn}")
    return devdir


A100 = dict(vendor="0x10de", device="0x20b0", cls="0x030200", sub_vendor="0x10de", sub_device="0x134f")
ASPEED = dict(vendor="0x1a03", device="0x2000", cls="0x030000", sub_vendor="0x1a03", sub_device="0x2000")
CORAL = dict(vendor="0x1ac1", device="0x089a", cls="0x088000", sub_vendor="0x1ac1", sub_device="0x089a")
QAT_PF = dict(vendor="0x8086", device="0x4940", cls="0x0b4000", sub_vendor="0x8086", sub_device="0x0000")
QAT_VF = dict(vendor="0x8086", device="0x4941", cls="0x0b4000", sub_vendor="0x8086", sub_device="0x0000")
CX6_PF = dict(vendor="0x15b3", device="0x101b", cls="0x020700", sub_vendor="0x15b3", sub_device="0x0007")
CX6_VF = dict(vendor="0x15b3", device="0x101c", cls="0x020700", sub_vendor="0x15b3", sub_device="0x0007")


def gpu_server(root: Path) -> None:
    pci_function(root, "0000:02:00.0", **ASPEED, bridge="pci0000:00/0000:00:1c.0/0000:01:00.0", driver="ast",
                 revision="0x41")
    pci_function(root, "0000:07:00.0", **A100, bridge="pci0000:00/0000:00:01.0", driver="nvidia", numa="3",
                 group="42", dmar="dmar3")
    pci_function(root, "0000:0c:00.0", **CX6_PF, bridge="pci0000:00/0000:00:01.1", driver="mlx5_core", numa="3",
                 group="43", totalvfs="16", numvfs="1", revision="0x00")
    pci_function(root, "0000:0c:00.1", **CX6_VF, bridge="pci0000:00/0000:00:01.1", driver="mlx5_core", numa="3",
                 group="44", physfn="0000:0c:00.0", revision="0x00")
    pci_function(root, "0000:0d:00.0", **CORAL, bridge="pci0000:00/0000:00:01.2", driver="apex", numa="0",
                 revision="0x00")


def run(root: Path, **config) -> pci.SourceResult:
    return pci.discover(HostFS(root), pci.Config(**config))


def by_address(result) -> dict[str, dict[str, str]]:
    return {i.attributes["address"]: dict(i.attributes) for i in result.features["device"].instances}


def test_gpu_server_labels_and_instances(tmp_path):
    gpu_server(tmp_path)
    result = run(tmp_path)

    assert result.errors == ()
    assert result.labels == {P + "0300_1a03.present": "true", P + "0302_10de.present": "true"}
    devices = by_address(result)
    assert devices["0000:07:00.0"] == {
        "class": "0302", "vendor": "10de", "device": "20b0", "subsystem_vendor": "10de", "subsystem_device": "134f",
        "iommu_group/type": "DMA-FQ", "iommu/intel-iommu/version": "1:0",
        "address": "0000:07:00.0", "driver": "nvidia", "iommu_group": "42", "numa_node": "3", "revision": "a1",
    }
    assert devices["0000:0c:00.0"]["sriov_totalvfs"] == "16"
    assert devices["0000:0c:00.0"]["sriov_numvfs"] == "1"
    assert devices["0000:0c:00.1"]["physfn"] == "0000:0c:00.0"
    assert "physfn" not in devices["0000:0c:00.0"]
    assert devices["0000:0d:00.0"]["class"] == "0880"  # Coral PCIe: not whitelisted, still a feature
    assert "numa_node" not in devices["0000:02:00.0"]  # -1 means "no NUMA affinity"
    assert devices["0000:02:00.0"]["revision"] == "41"


def test_origins_are_the_resolved_device_directories(tmp_path):
    gpu_server(tmp_path)
    result = run(tmp_path)
    origins = {i.attributes["address"]: i.origin for i in result.features["device"].instances}
    assert origins["0000:07:00.0"] == "/sys/devices/pci0000:00/0000:00:01.0/0000:07:00.0"
    assert result.label_origins[P + "0302_10de.present"] == "/sys/devices/pci0000:00/0000:00:01.0/0000:07:00.0"
    assert result.features["device"].origin == "/sys/bus/pci/devices"


def test_qat_sriov_capable_label_and_vfs(tmp_path):
    pci_function(tmp_path, "0000:6b:00.0", **QAT_PF, driver="4xxx", totalvfs="16", numvfs="2", group="27")
    pci_function(tmp_path, "0000:6b:00.1", **QAT_VF, driver="vfio-pci", physfn="0000:6b:00.0", group="200")
    pci_function(tmp_path, "0000:6b:00.2", **QAT_VF, driver="vfio-pci", physfn="0000:6b:00.0", group="201")

    result = run(tmp_path)

    assert result.errors == ()
    # the VFs share class+vendor with the PF, so the PF's sriov.capable survives the merge
    assert result.labels == {P + "0b40_8086.present": "true", P + "0b40_8086.sriov.capable": "true"}
    devices = by_address(result)
    assert devices["0000:6b:00.1"]["driver"] == "vfio-pci"
    assert [d["physfn"] for a, d in sorted(devices.items()) if "physfn" in d] == ["0000:6b:00.0"] * 2


def test_sriov_capable_needs_only_the_file(tmp_path):
    """NFD checks that sriov_totalvfs exists, not its value."""
    pci_function(tmp_path, "0000:6b:00.0", **QAT_PF, totalvfs="0")
    assert run(tmp_path).labels == {P + "0b40_8086.present": "true", P + "0b40_8086.sriov.capable": "true"}


@pytest.mark.parametrize("whitelist, expected", [
    (("0880",), {P + "0880_1ac1.present"}),
    (("02",), {P + "0207_15b3.present", P + "0207_15b3.sriov.capable"}),
    (("0302", "03"), {P + "0302_10de.present", P + "0300_1a03.present"}),
    (("0B40", "12"), set()),
    (("0880", "02", "03"), {P + "0880_1ac1.present", P + "0207_15b3.present", P + "0207_15b3.sriov.capable",
                            P + "0302_10de.present", P + "0300_1a03.present"}),
    ((), set()),
])
def test_class_whitelist_is_a_lowercased_prefix_match(tmp_path, whitelist, expected):
    gpu_server(tmp_path)
    result = run(tmp_path, device_class_whitelist=whitelist)
    assert set(result.labels) == expected
    assert result.errors == ()


@pytest.mark.parametrize("fields, devlabel, bad", [
    (("class", "vendor"), "0302_10de", []),
    (("device", "vendor"), "10de_20b0", []),  # canonical order, whatever the config order
    (("subsystem_device", "class", "bogus"), "0302_134f", ["bogus"]),
    (("bogus", "alsobogus"), "0302_10de", ["bogus", "alsobogus"]),  # nothing valid -> class,vendor
    (("class", "vendor", "device", "subsystem_vendor", "subsystem_device"), "0302_10de_20b0_10de_134f", []),
])
def test_label_fields(tmp_path, fields, devlabel, bad):
    pci_function(tmp_path, "0000:07:00.0", **A100)
    result = run(tmp_path, device_label_fields=fields)
    assert result.labels == {P + devlabel + ".present": "true"}
    assert [e.message for e in result.errors] == [
        f"unknown pci label field {b!r} ignored (valid: class, vendor, device, subsystem_vendor, subsystem_device)"
        for b in bad]


def test_no_pci_bus_at_all(tmp_path):
    put(tmp_path, "/proc/cpuinfo", "processor\t: 0\n")
    result = run(tmp_path)
    assert result.features == {} and result.labels == {} and result.errors == ()


def test_empty_pci_bus_has_an_empty_feature(tmp_path):
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    result = run(tmp_path)
    assert result.features["device"].instances == () and result.labels == {} and result.errors == ()


def _break(root: Path, how: str) -> tuple[str, str]:
    """Break the A100 one way; returns (path named in the error, fragment of the message)."""
    devdir = "/sys/devices/pci0000:00/0000:00:01.0/0000:07:00.0"
    real = root / devdir.lstrip("/")
    if how == "missing subsystem_device":
        (real / "subsystem_device").unlink()
        return f"{devdir}/subsystem_device", "missing; device 0000:07:00.0 skipped"
    if how == "vendor is a directory (EISDIR)":
        (real / "vendor").unlink()
        (real / "vendor").mkdir()
        return f"{devdir}/vendor", "unreadable (Is a directory)"
    if how == "binary junk in device":
        (real / "device").write_bytes(b"\x00\xff\xfe\x10")
        return f"{devdir}/device", "binary content"
    if how == "invalid UTF-8 in class":
        (real / "class").write_bytes(b"0x03\xff200\n")
        return f"{devdir}/class", "not UTF-8"
    if how == "non-hex vendor":
        (real / "vendor").write_text("0xnvda\n")
        return f"{devdir}/vendor", "not a 4-digit hex ID: '0xnvda'"
    if how == "class too short":
        (real / "class").write_text("0x0302\n")
        return f"{devdir}/class", "not a 6-digit hex ID"
    if how == "class split over two lines":  # each line alone would look like a kernel ID
        (real / "class").write_text("0x030200\n0x10de\n")
        return f"{devdir}/class", "not a 6-digit hex ID: '0x030200\\n0x10de'"
    if how == "empty subsystem_vendor":
        (real / "subsystem_vendor").write_text("")
        return f"{devdir}/subsystem_vendor", "empty; device 0000:07:00.0 skipped"
    if how == "hot-removed (dangling bus link)":
        shutil.rmtree(real)
        return devdir, "device 0000:07:00.0 vanished during scan"
    raise AssertionError(how)


@pytest.mark.parametrize("how", [
    "missing subsystem_device", "vendor is a directory (EISDIR)", "binary junk in device", "invalid UTF-8 in class",
    "non-hex vendor", "class too short", "class split over two lines", "empty subsystem_vendor",
    "hot-removed (dangling bus link)",
])
def test_broken_device_is_skipped_with_an_error_naming_it(tmp_path, how):
    gpu_server(tmp_path)
    path, fragment = _break(tmp_path, how)

    result = run(tmp_path)

    assert "0000:07:00.0" not in by_address(result)
    assert len(by_address(result)) == 4  # the rest of the bus is still there
    assert result.labels == {P + "0300_1a03.present": "true"}
    assert [(e.source, e.path) for e in result.errors] == [("pci", path)]
    assert fragment in result.errors[0].message


def test_device_vanishing_between_listing_and_reading(tmp_path):
    """Hot-unplug mid-scan: the directory disappears just after its first ID file is read."""
    gpu_server(tmp_path)
    devdir = tmp_path / "sys/devices/pci0000:00/0000:00:01.0/0000:07:00.0"

    def unplug(operation: str, host_path: str, outcome: object) -> None:
        if host_path == "/sys/devices/pci0000:00/0000:00:01.0/0000:07:00.0/class" and devdir.exists():
            shutil.rmtree(devdir)

    result = pci.discover(HostFS(tmp_path, recorder=unplug))

    assert "0000:07:00.0" not in by_address(result)
    assert [e.message for e in result.errors] == ["device vanished during scan; device 0000:07:00.0 skipped"]
    assert result.labels == {P + "0300_1a03.present": "true"}


def test_bad_optional_attributes_keep_the_device(tmp_path):
    devdir = pci_function(tmp_path, "0000:07:00.0", **A100, numa="banana", revision="0xzz", totalvfs="lots")
    (tmp_path / devdir.lstrip("/") / "sriov_numvfs").write_bytes(b"\xff\xfe")

    result = run(tmp_path)

    device = by_address(result)["0000:07:00.0"]
    assert {"numa_node", "revision", "sriov_totalvfs", "sriov_numvfs"}.isdisjoint(device)
    assert device["vendor"] == "10de"
    paths = sorted(e.path.rsplit("/", 1)[-1] for e in result.errors)
    assert paths == ["numa_node", "revision", "sriov_numvfs", "sriov_totalvfs"]
    # the file exists, so NFD's sriov.capable label is still emitted
    assert result.labels == {P + "0302_10de.present": "true", P + "0302_10de.sriov.capable": "true"}


def test_ids_in_other_hex_forms_read_as_the_kernels(tmp_path):
    """A hand-made tree's IDs (``0X`` prefix, upper-case digits, no prefix) give the instance and
    label the kernel's ``0x`` + lower-case form gives: the same values, the same attribute order."""
    pci_function(tmp_path / "kernel", "0000:07:00.0", **A100, group="42")
    pci_function(tmp_path / "odd", "0000:07:00.0", **dict(A100, vendor="0X10DE", device="0x20B0", cls="030200",
                                                          sub_vendor="10de", sub_device="0X134f"), group="42")

    kernel, odd = run(tmp_path / "kernel"), run(tmp_path / "odd")

    assert odd.errors == kernel.errors == ()
    assert list(odd.features["device"].instances[0].attributes.items()) == \
        list(kernel.features["device"].instances[0].attributes.items())
    assert odd.labels == kernel.labels == {P + "0302_10de.present": "true"}


def test_functions_sharing_ids_each_have_their_own_attributes(tmp_path):
    """Functions with the same five IDs (a NIC's VFs) answer from one remembered reading of them:
    each still gets its own address, driver, NUMA node, group and revision, in the kernel's
    attribute order, whether the IDs were seen before in this pass, in an earlier pass, or in
    another case (``0x10DE`` remembered apart from ``0x10de``, both read as ``10de``)."""
    for n in range(4):
        pci_function(tmp_path, f"0000:0c:00.{n + 1}", **CX6_VF, bridge="pci0000:00/0000:00:01.1",
                     driver="mlx5_core" if n % 2 else None, numa=str(n), group=str(50 + n),
                     physfn="0000:0c:00.0", revision=f"0x0{n}")
    pci_function(tmp_path, "0000:0d:00.0", **dict(CX6_VF, vendor="0x15B3"), bridge="pci0000:00/0000:00:01.1",
                 numa="7", group="60")
    first, second = run(tmp_path), run(tmp_path)
    assert first == second and first.errors == ()
    found = by_address(first)
    for n in range(4):
        assert found[f"0000:0c:00.{n + 1}"] == {
            "class": "0207", "vendor": "15b3", "device": "101c", "subsystem_vendor": "15b3",
            "subsystem_device": "0007", "iommu_group/type": "DMA-FQ", "iommu_group": str(50 + n),
            "address": f"0000:0c:00.{n + 1}", **({"driver": "mlx5_core"} if n % 2 else {}),
            "physfn": "0000:0c:00.0", "numa_node": str(n), "revision": f"0{n}"}
    assert found["0000:0d:00.0"]["vendor"] == "15b3" and found["0000:0d:00.0"]["numa_node"] == "7"
    assert list(first.features["device"].instances[0].attributes)[:5] == [
        "class", "vendor", "device", "subsystem_vendor", "subsystem_device"]


def test_unreadable_iommu_group_type_keeps_the_group(tmp_path):
    pci_function(tmp_path, "0000:07:00.0", **A100, group="42", numa="03")
    (tmp_path / "sys/kernel/iommu_groups/42/type").unlink()
    (tmp_path / "sys/kernel/iommu_groups/42/type").mkdir()

    result = run(tmp_path)

    device = by_address(result)["0000:07:00.0"]
    assert device["iommu_group"] == "42" and "iommu_group/type" not in device
    assert device["numa_node"] == "3"  # decimal, leading zero dropped
    # read through the device's link as NFD's readSinglePciAttribute does
    assert [(e.path, e.message) for e in result.errors] == [
        ("/sys/devices/pci0000:00/0000:07:00.0/iommu_group/type", "unreadable: Is a directory")]
    assert dict(result.undetermined) == {"device": ("feature.node.kubernetes.io/pci-*",)}  # a failed read decides nothing


def test_unbound_device_has_no_driver(tmp_path):
    pci_function(tmp_path, "0000:07:00.0", **A100)
    assert "driver" not in by_address(run(tmp_path))["0000:07:00.0"]


def test_through_run_source_every_label_is_valid(tmp_path):
    gpu_server(tmp_path)
    result = run_source("pci", HostFS(tmp_path), DiscoveryConfig(sources={"pci": pci.Config(device_class_whitelist=("0",))}))
    assert result.errors == ()
    assert set(result.labels) == {P + "0300_1a03.present", P + "0302_10de.present", P + "0207_15b3.present",
                                  P + "0207_15b3.sriov.capable", P + "0880_1ac1.present"}


# -- properties -----------------------------------------------------------------------------------
@given(st.text(max_size=12), st.sampled_from([2, 4, 6]), st.booleans())
def test_hex_digits_accepts_only_kernel_hex(raw, digits, prefixed):
    try:
        value = hex_digits(raw, digits, prefixed=prefixed)
    except MalformedId:
        return
    assert len(value) == digits and all(c in "0123456789abcdef" for c in value)
    body = raw[2:] if prefixed and raw[:2].lower() == "0x" else raw
    assert value == body.lower()


ID_BYTES = st.one_of(
    st.binary(max_size=12),
    st.text(alphabet="0123456789abcdefABCDEFxX \n\t-", max_size=10).map(str.encode),
    st.sampled_from([b"0x10de\n", b"0x030200\n", b"0x0b4000\n", b"\n", b"0x\n", b"0x10de0\n"]),
)


@settings(max_examples=60, deadline=None)
@given(st.fixed_dictionaries(dict.fromkeys(("class", "vendor", "device", "subsystem_vendor", "subsystem_device"), ID_BYTES)),
       st.lists(st.text(alphabet="0123456789abcdefX_", max_size=5), max_size=3))
def test_any_id_bytes_never_crash_and_labels_are_valid(ids, whitelist):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        devdir = "/sys/devices/pci0000:00/0000:00:01.0"
        for name, data in ids.items():
            put(root, f"{devdir}/{name}", data)
        link(root, "/sys/bus/pci/devices/0000:00:01.0", devdir)
        result = pci.discover(HostFS(root), pci.Config(device_class_whitelist=tuple(whitelist) or ("",)))
        instances = result.features["device"].instances
        assert len(instances) + len(result.errors) >= 1
        for key, value in result.labels.items():
            assert not qualified_name_errors(key) and not label_value_errors(value)
        for instance in instances:
            assert len(instance.attributes["class"]) == 4
