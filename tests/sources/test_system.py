"""system source: real os-release texts, DMI attributes, node name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import DiscoveryConfig, run_source
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import system
from tests.support.hostfiles import put

P = NFD_PREFIX + "system-os_release."

UBUNTU_2204 = """PRETTY_NAME="Ubuntu 22.04.4 LTS"
NAME="Ubuntu"
VERSION_ID="22.04"
VERSION="22.04.4 LTS (Jammy Jellyfish)"
VERSION_CODENAME=jammy
ID=ubuntu
ID_LIKE=debian
HOME_URL="https://www.ubuntu.com/"
SUPPORT_URL="https://help.ubuntu.com/"
BUG_REPORT_URL="https://bugs.launchpad.net/ubuntu/"
PRIVACY_POLICY_URL="https://www.ubuntu.com/legal/terms-and-policies/privacy-policy"
UBUNTU_CODENAME=jammy
"""
DEBIAN_12 = """PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"
NAME="Debian GNU/Linux"
VERSION_ID="12"
VERSION="12 (bookworm)"
VERSION_CODENAME=bookworm
ID=debian
HOME_URL="https://www.debian.org/"
SUPPORT_URL="https://www.debian.org/support"
BUG_REPORT_URL="https://bugs.debian.org/"
"""
#: Mendel 5.3 "Eagle" (Coral Dev Board), as recorded in saltstack/salt
#: tests/pytests/unit/grains/test_core.py (test_mendel_os_grains, from Coral's flashcard image):
#: no VERSION_ID and no VERSION, so NFD labels only the ID (fixtures/recorded/os-release.mendel-5)
MENDEL_EAGLE = (Path(__file__).resolve().parents[2] / "fixtures/recorded/os-release.mendel-5").read_text()
RASPBIAN_11 = """PRETTY_NAME="Raspbian GNU/Linux 11 (bullseye)"
NAME="Raspbian GNU/Linux"
VERSION_ID="11"
VERSION="11 (bullseye)"
VERSION_CODENAME=bullseye
ID=raspbian
ID_LIKE=debian
HOME_URL="http://www.raspbian.org/"
SUPPORT_URL="http://www.raspbian.org/RaspbianForums"
BUG_REPORT_URL="http://www.raspbian.org/RaspbianBugs"
"""
SUPERMICRO_DMI = {
    "bios_date": "03/15/2024", "bios_vendor": "American Megatrends International, LLC.", "bios_version": "2.1",
    "board_asset_tag": "Base Board Asset Tag", "board_name": "X13DEM", "board_vendor": "Supermicro",
    "board_version": "1.10", "chassis_asset_tag": "Chassis Asset Tag", "chassis_type": "17",
    "chassis_vendor": "Supermicro", "chassis_version": "0123456789", "product_family": "Family",
    "product_name": "SYS-221H-TNR", "product_sku": "To be filled by O.E.M.", "product_version": "0123456789",
    "sys_vendor": "Supermicro",
}


def run(root: Path, node_name: str = "node-a"):
    return system.discover(HostFS(root), system.Config(node_name=node_name))


@pytest.mark.parametrize("text, labels", [
    (UBUNTU_2204, {"ID": "ubuntu", "VERSION_ID": "22.04", "VERSION_ID.major": "22", "VERSION_ID.minor": "04"}),
    (DEBIAN_12, {"ID": "debian", "VERSION_ID": "12", "VERSION_ID.major": "12"}),
    (MENDEL_EAGLE, {"ID": "mendel"}),
    (RASPBIAN_11, {"ID": "raspbian", "VERSION_ID": "11", "VERSION_ID.major": "11"}),
])
def test_real_os_release(tmp_path, text, labels):
    put(tmp_path, "/etc/os-release", text)
    result = run(tmp_path)
    assert result.errors == ()
    assert result.labels == {P + k: v for k, v in labels.items()}
    attrs = result.features["osrelease"].attributes
    assert attrs["ID"] == labels["ID"] and attrs.get("VERSION_ID") == labels.get("VERSION_ID")
    assert "PRETTY_NAME" in attrs and not attrs["PRETTY_NAME"].startswith('"')


def test_ubuntu_attributes_exact(tmp_path):
    put(tmp_path, "/etc/os-release", UBUNTU_2204)
    assert dict(run(tmp_path).features["osrelease"].attributes) == {
        "PRETTY_NAME": "Ubuntu 22.04.4 LTS", "NAME": "Ubuntu", "VERSION_ID": "22.04",
        "VERSION": "22.04.4 LTS (Jammy Jellyfish)", "VERSION_CODENAME": "jammy", "ID": "ubuntu", "ID_LIKE": "debian",
        "HOME_URL": "https://www.ubuntu.com/", "SUPPORT_URL": "https://help.ubuntu.com/",
        "BUG_REPORT_URL": "https://bugs.launchpad.net/ubuntu/",
        "PRIVACY_POLICY_URL": "https://www.ubuntu.com/legal/terms-and-policies/privacy-policy",
        "UBUNTU_CODENAME": "jammy", "VERSION_ID.major": "22", "VERSION_ID.minor": "04",
    }


def test_etc_os_release_symlink_into_usr_lib(tmp_path):
    put(tmp_path, "/usr/lib/os-release", DEBIAN_12)
    (tmp_path / "etc").mkdir()
    os.symlink("../usr/lib/os-release", tmp_path / "etc/os-release")
    result = run(tmp_path)
    assert result.labels[P + "ID"] == "debian" and result.features["osrelease"].origin == "/etc/os-release"


def test_usr_lib_fallback(tmp_path):
    put(tmp_path, "/usr/lib/os-release", DEBIAN_12)
    assert run(tmp_path).features["osrelease"].origin == "/usr/lib/os-release"


def test_invalid_version_id_label_is_dropped_with_error(tmp_path):
    put(tmp_path, "/etc/os-release", 'ID=arch\nVERSION_ID="2024.01 rolling"\n')
    result = run_source("system", HostFS(tmp_path), DiscoveryConfig())
    # NFD's ^(\d+)(\.(\d+))?(\..*)?$ can only match with ".01 rolling" as the tail: no minor
    assert result.labels == {P + "ID": "arch", P + "VERSION_ID.major": "2024"}
    assert "dropped" in result.errors[0].message


def test_dmi_and_node_name(tmp_path):
    for attr, value in SUPERMICRO_DMI.items():
        put(tmp_path, f"/sys/devices/virtual/dmi/id/{attr}", value + "\n")
    put(tmp_path, "/sys/devices/virtual/dmi/id/product_serial", "S123456X\n")
    put(tmp_path, "/sys/devices/virtual/dmi/id/product_uuid", "00000000-0000-0000-0000-3cecef123456\n")
    result = run(tmp_path)
    assert dict(result.features["dmiid"].attributes) == SUPERMICRO_DMI
    assert dict(result.features["name"].attributes) == {"nodename": "node-a"}
    assert not result.labels  # NFD has no DMI label


def test_node_name_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "from-env")
    assert run(tmp_path, node_name="").features["name"].attributes["nodename"] == "from-env"


# -- hostile input -------------------------------------------------------------------------------
def test_missing_os_release(tmp_path):
    result = run(tmp_path)
    assert "osrelease" not in result.features and result.errors == () and not result.labels


def test_binary_os_release(tmp_path):
    put(tmp_path, "/etc/os-release", b"ID=ubuntu\n\x00\x00")
    result = run(tmp_path)
    assert "osrelease" not in result.features and "NUL" in result.errors[0].message


def test_invalid_utf8_os_release(tmp_path):
    put(tmp_path, "/etc/os-release", b"ID=ub\xffuntu\n")
    assert "not UTF-8" in run(tmp_path).errors[0].message


def test_huge_os_release(tmp_path):
    put(tmp_path, "/etc/os-release", "ID=ubuntu\n" + "X=" + "y" * (10 * 1024 * 1024) + "\n")
    result = run(tmp_path)
    assert "osrelease" not in result.features and "larger than" in result.errors[0].message


def test_os_release_without_pairs_falls_back(tmp_path):
    put(tmp_path, "/etc/os-release", "this is not an os-release\n")
    put(tmp_path, "/usr/lib/os-release", DEBIAN_12)
    result = run(tmp_path)
    assert result.labels[P + "ID"] == "debian" and "no KEY=value" in result.errors[0].message


def test_unreadable_dmi_attribute_is_left_out(tmp_path):
    put(tmp_path, "/sys/devices/virtual/dmi/id/sys_vendor", "QEMU\n")
    (tmp_path / "sys/devices/virtual/dmi/id/product_name").mkdir()
    result = run(tmp_path)
    assert dict(result.features["dmiid"].attributes) == {"sys_vendor": "QEMU"}
    assert result.errors[0].path == "/sys/devices/virtual/dmi/id/product_name"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(
    st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["ID", "VERSION_ID", "NAME", "X_1"]), st.text(max_size=70)),
    st.text(max_size=80)), max_size=15))
def test_any_os_release_never_crashes_and_labels_are_valid(tmp_path_factory, lines):
    root = tmp_path_factory.mktemp("osrel")
    put(root, "/etc/os-release", "\n".join(lines).encode("utf-8", "surrogatepass"))
    result = run_source("system", HostFS(root), DiscoveryConfig())
    assert not [e for e in result.errors if "source failed" in e.message]
    for key, value in result.labels.items():
        assert not qualified_name_errors(key) and not label_value_errors(value)


# -- read, but not whole: undetermined, as an unreadable file -----------------------------------
@pytest.mark.parametrize(("content", "why"), [
    ("", "empty"), ("\n\n", "empty"),
    ('ID=debian\nPRETTY_NAME="Debian GNU/Lin', "cut inside a quoted value (no final newline)"),
    ("ID=debian\nNAME='Deb", "cut inside a quoted value (no final newline)"),
    ('ID=debian\nNAME="', "cut inside a quoted value (no final newline)"),
])
def test_an_os_release_not_whole_is_undetermined(tmp_path, content, why):
    put(tmp_path, "/etc/os-release", content)
    result = run(tmp_path)
    assert [(e.path, e.message) for e in result.errors] == [("/etc/os-release", f"incomplete: {why}")]
    assert dict(result.undetermined) == {"osrelease": (NFD_PREFIX + "system-os_release.*",)}
    assert "osrelease" not in result.features and not result.labels


@pytest.mark.parametrize("content", [
    "ID=debian",  # no final newline: the format separates lines, it does not terminate them
    'ID=debian\nVERSION_ID="12"',
    "NAME=Alpine",  # no ID, no VERSION_ID: every key is optional (os-release(5))
    'ID=x\nNAME="it\'s"',
])
def test_odd_but_whole_os_release_files_decide(tmp_path, content):
    put(tmp_path, "/etc/os-release", content)
    result = run(tmp_path)
    assert not result.errors and not result.undetermined and "osrelease" in result.features


def test_a_dmi_attribute_of_zero_bytes_is_undetermined(tmp_path):
    """sys_dmi_field_show writes "%s\\n": even an empty DMI string has its newline."""
    put(tmp_path, "/sys/devices/virtual/dmi/id/sys_vendor", "QEMU\n")
    put(tmp_path, "/sys/devices/virtual/dmi/id/board_name", "")
    put(tmp_path, "/sys/devices/virtual/dmi/id/board_vendor", "\n")  # an empty string: an answer
    result = run(tmp_path)
    assert [(e.path, e.message) for e in result.errors] == [
        ("/sys/devices/virtual/dmi/id/board_name", "incomplete: empty, left out")]
    assert dict(result.undetermined) == {"dmiid": ()}
