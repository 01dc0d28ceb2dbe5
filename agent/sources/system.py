"""system source: NFD's ``system.*`` features and ``system-os_release.*`` labels.

os-release as ``source/system/system.go`` parses it (every ``^\\w+=.+`` line, quotes
trimmed, plus ``VERSION_ID.major``/``.minor``), the 16 world-readable DMI attributes NFD
keeps (no serials, no UUID; no label, as in NFD) and the node name. A file that could not be
read (not absent: permissions, I/O) leaves its feature undetermined this pass, and the
caller keeps its earlier answer; so does an os-release read but not whole (:func:`os_release_cut`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from agent.features import ElementNames, Feature, SourceError, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS

NAME = "system"
FEATURES: Mapping[str, ElementNames] = {
    "osrelease": None,  # every os-release key, plus VERSION_ID.major / VERSION_ID.minor
    "dmiid": frozenset({"bios_date", "bios_vendor", "bios_version", "board_asset_tag", "board_name", "board_vendor",
                        "board_version", "chassis_asset_tag", "chassis_type", "chassis_vendor", "chassis_version",
                        "product_family", "product_name", "product_sku", "product_version", "sys_vendor"}),
    "name": frozenset({"nodename"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

OS_RELEASE_PATHS = ("/etc/os-release", "/usr/lib/os-release")
DMI_DIR = "/sys/devices/virtual/dmi/id"
DMI_ATTRIBUTES = (
    "bios_date", "bios_vendor", "bios_version", "board_asset_tag", "board_name", "board_vendor",
    "board_version", "chassis_asset_tag", "chassis_type", "chassis_vendor", "chassis_version",
    "product_family", "product_name", "product_sku", "product_version", "sys_vendor",
)
LABELLED_KEYS = ("ID", "VERSION_ID", "VERSION_ID.major", "VERSION_ID.minor")
MAX_OS_RELEASE_BYTES = 64 * 1024

_LINE = re.compile(r"^(\w+)=(.+)")
_VERSION = re.compile(r"^(?P<major>\d+)(\.(?P<minor>\d+))?(\..*)?$")


def parse_os_release(text: str) -> dict[str, str]:
    """``KEY=value`` lines with surrounding ``"``/``'`` trimmed, plus VERSION_ID.major/.minor."""
    release: dict[str, str] = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            release[match.group(1)] = match.group(2).strip("\"'")
    version = _VERSION.match(release.get("VERSION_ID", ""))
    if version:
        for part in ("major", "minor"):
            if version.group(part):
                release[f"VERSION_ID.{part}"] = version.group(part)
    return release


def os_release_cut(text: str) -> str:
    """Why ``text`` is an os-release file not written whole ("" when it is): empty, or ending
    inside a quoted value. os-release(5) requires a value with spaces or special characters to
    be quoted, so a last line that opens a quote and has no closing one nor a newline was cut
    mid-value. A missing final newline alone is no cut (the format separates lines by
    newlines), nor is a missing key (every key is optional)."""
    if not text.strip():
        return "empty"
    if text.endswith("\n"):
        return ""
    match = _LINE.match(text.rpartition("\n")[2])
    value = match.group(2).rstrip() if match else ""
    if value[:1] in ("'", '"') and (len(value) < 2 or value[-1] != value[0]):
        return "cut inside a quoted value (no final newline)"
    return ""


@dataclass(frozen=True)
class Config:
    """NFD's system source has no section; the node name is set by the runner (``--node-name``)."""

    node_name: str = ""


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    errors: list[SourceError] = []
    features: dict[str, Feature] = {}
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}
    undetermined: dict[str, tuple[str, ...]] = {}

    found = _os_release(host, errors, undetermined)
    if found is not None:
        release, path = found
        features["osrelease"] = Feature(attributes=release, origin=path)
        for key in LABELLED_KEYS:
            if key in release:
                labels[nfd_label(NAME, f"os_release.{key}")] = release[key]
                origins[nfd_label(NAME, f"os_release.{key}")] = path
    dmi = _dmi(host, errors, undetermined)
    if dmi:
        features["dmiid"] = Feature(attributes=dmi, origin=DMI_DIR)
    node_name = config.node_name or os.environ.get("NODE_NAME", "")
    features["name"] = Feature(attributes={"nodename": node_name}, origin="$NODE_NAME")
    return SourceResult(NAME, features, labels, errors, origins, undetermined)


def _os_release(host: HostFS, errors: list[SourceError], undetermined: dict[str, tuple[str, ...]]
                ) -> tuple[dict[str, str], str] | None:
    """The first os-release file that reads and parses, and its path; one that could not be
    read leaves ``system.osrelease`` undetermined (it would have been the answer)."""
    for path in OS_RELEASE_PATHS:
        try:
            data = host.read_bytes(path, MAX_OS_RELEASE_BYTES + 1)
        except HostFileError as exc:
            if not exc.missing:
                errors.append(SourceError(NAME, path, f"unreadable: {exc.reason}"))
                undetermined["osrelease"] = (nfd_label(NAME, "os_release.*"),)
            continue
        if len(data) > MAX_OS_RELEASE_BYTES:
            errors.append(SourceError(NAME, path, f"larger than {MAX_OS_RELEASE_BYTES} bytes; not an os-release file"))
            continue
        if b"\x00" in data:
            errors.append(SourceError(NAME, path, "binary content (NUL byte)"))
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            errors.append(SourceError(NAME, path, f"not UTF-8 text ({exc.reason} at byte {exc.start})"))
            continue
        cut = os_release_cut(text)
        if cut:
            errors.append(SourceError(NAME, path, f"incomplete: {cut}"))
            undetermined["osrelease"] = (nfd_label(NAME, "os_release.*"),)
            continue
        release = parse_os_release(text)
        if release:
            return release, path
        errors.append(SourceError(NAME, path, "no KEY=value lines"))
    return None


def _dmi(host: HostFS, errors: list[SourceError], undetermined: dict[str, tuple[str, ...]]) -> dict[str, str]:
    """The DMI attributes read, each failure reported in this order as reading the file alone
    would; one that could not be read, or holds zero bytes, leaves ``system.dmiid`` undetermined."""
    dmi: dict[str, str] = {}
    values, failures = host.read_attrs(DMI_DIR, DMI_ATTRIBUTES)
    for attr in DMI_ATTRIBUTES:
        failure = failures.get(attr)
        if failure is not None:
            errors.append(SourceError(NAME, f"{DMI_DIR}/{attr}", f"unreadable, left out: {failure.reason}"))
            if failure.unreadable:
                undetermined["dmiid"] = ()
            continue
        value = values.get(attr)
        if value == "" and _zero_bytes(host, f"{DMI_DIR}/{attr}"):
            errors.append(SourceError(NAME, f"{DMI_DIR}/{attr}", "incomplete: empty, left out"))
            undetermined["dmiid"] = ()
            continue
        if value is not None:
            dmi[attr] = value
    return dmi


def _zero_bytes(host: HostFS, path: str) -> bool:
    """Whether the attribute file holds nothing at all: the kernel writes every DMI attribute
    as ``"%s\n"`` (drivers/firmware/dmi-id.c ``sys_dmi_field_show``), so even an empty string
    has its newline; zero bytes is a file not written whole (a copy cut short)."""
    try:
        return host.read_bytes(path, 1) == b""
    except HostFileError:
        return False  # gone or unreadable since: the next pass reads it again
