"""kernel source: NFD's ``kernel.*`` features and ``kernel-*`` labels.

Version from ``/proc/sys/kernel/osrelease``, the first kernel config found in NFD's search
order (``source/kernel/kconfig.go``), loaded and built-in modules, SELinux and KVM.  Unlike
NFD every path, ``/proc`` included, is read through the host seam, so a tree replays fully.
"""

from __future__ import annotations

import posixpath
import re
import zlib

from dataclasses import dataclass

from typing import Mapping

from agent.features import ElementNames, Feature, SourceError, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS
from agent.sources._config import STRING, nfd_option

NAME = "kernel"
FEATURES: Mapping[str, ElementNames] = {
    "version": frozenset({"full", "major", "minor", "revision"}),
    "config": None,  # every CONFIG_ option
    "loadedmodule": None,
    "enabledmodule": None,
    "selinux": frozenset({"enabled"}),
    "kvm": frozenset({"enabled"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

OSRELEASE = "/proc/sys/kernel/osrelease"
PROC_MODULES = "/proc/modules"
PROC_CONFIG_GZ = "/proc/config.gz"
MAX_TEXT_BYTES = 8 * 1024 * 1024
"""Largest kconfig/module list read; real ones are < 1 MiB, anything bigger is not one."""

_UNSAFE = re.compile(r"[^-A-Za-z0-9_.]")
_VERSION = re.compile(r"^(?P<major>\d+)(\.(?P<minor>\d+))?(\.(?P<revision>\d+))?(-.*)?$")
_KCONFIG_LINE = re.compile(r"^CONFIG_(\w+)=(.+)")
_MODULE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
# The parsers below scan the whole text in one regex pass (a real kernel config is 4,000-10,000
# lines: matching line by line in Python took 1.1 ms a pass on this machine's 3,900-line
# /proc/config.gz, twice the rest of the kernel source).  "^"/"$" of MULTILINE end lines at
# "\n" only, where str.splitlines() (what the line-by-line forms, kept as the reference, split
# on) also ends them at these characters: text holding any of them takes the line-by-line form.
_OTHER_LINE_BREAKS = "\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_KCONFIG_LINES = re.compile(r"^CONFIG_(\w+)=(.+)", re.MULTILINE)
#: the same on ASCII text, where \w is [A-Za-z0-9_] (a class the engine tests faster), and with
#: a literal start it searches for (the text gets a "\n" in front): 0.3 ms instead of 0.6
_KCONFIG_ASCII_LINES = re.compile(r"\nCONFIG_([A-Za-z0-9_]+)=(.+)")
#: a /proc/modules line's first whitespace-separated word ([^\S\n]: whitespace but the line end)
_FIRST_WORDS = re.compile(r"^[^\S\n]*+(\S+)", re.MULTILINE)
#: a modules.builtin line, stripped, whose basename less one ".ko" is a module name (group 1);
#: lines that are not (blank, "a b.ko", "kernel/\u00e9.ko") do not match.  Possessive (``*+``,
#: ``?+``): nothing matched is ever given back, so a hostile 8 MiB line costs one scan, where
#: backtracking into the leading blanks rescanned the line for a "/" once per blank (quadratic)
_BUILTIN_LINES = re.compile(r"^[^\S\n]*+(?:[^\n]*/)?+([A-Za-z0-9_-]++)(?:\.ko)?+[^\S\n]*+$", re.MULTILINE)


class _Unusable(Exception):
    """A host file that is there but cannot be used (too big, binary, corrupt)."""


def kconfig_candidates(release: str, configured: str) -> list[str]:
    """NFD's kconfig search order with its host prefixes mapped onto the host root."""
    paths = [configured] if configured else []
    paths.append(PROC_CONFIG_GZ)
    if release:
        paths += [
            f"/usr/src/linux-{release}/.config", f"/usr/src/linux-rt-{release}/.config", "/usr/src/linux/.config",
            f"/usr/lib/modules/{release}/config", f"/usr/lib/ostree-boot/config-{release}",
            f"/usr/lib/kernel/config-{release}", f"/usr/src/linux-headers-{release}/.config",
            f"/lib/modules/{release}/build/.config", f"/usr/src/linux-rt-headers-{release}/.config",
            f"/boot/config-{release}",
        ]
    return paths


def version_attributes(release: str) -> dict[str, str]:
    """``full`` sanitised as NFD does, and major/minor/revision when the regex matches."""
    full = _UNSAFE.sub("_", release).strip("-_.")
    attrs = {"full": full}
    match = _VERSION.match(full)
    if match:
        attrs.update({k: v or "" for k, v in match.groupdict().items()})
    return attrs


def parse_kconfig(text: str) -> dict[str, str]:
    """``CONFIG_X=v`` lines -> ``{"X": v}`` with surrounding double quotes trimmed (raw values)."""
    if _only_newlines(text):
        found = _KCONFIG_ASCII_LINES.findall("\n" + text) if text.isascii() else _KCONFIG_LINES.findall(text)
        return {name: value.strip('"') for name, value in found}
    return _parse_kconfig_lines(text)


def _only_newlines(text: str) -> bool:
    """Whether "\n" is the only character that ends a line of ``text`` (str.splitlines())."""
    return not any(char in text for char in _OTHER_LINE_BREAKS)


def _parse_kconfig_lines(text: str) -> dict[str, str]:
    """:func:`parse_kconfig` line by line (any line ends)."""
    options: dict[str, str] = {}
    for line in text.splitlines():
        match = _KCONFIG_LINE.match(line)
        if match:
            options[match.group(1)] = match.group(2).strip('"')
    return options


def kconfig_label_value(raw: str) -> str:
    """NFD's legacy form used for labels: ``y``/``m`` -> ``true``, anything else as is."""
    return "true" if raw in ("y", "m") else raw


def parse_modules(text: str) -> tuple[set[str], list[str]]:
    """First column of ``/proc/modules``; returns (names, rejected first columns)."""
    if _only_newlines(text):
        names: set[str] = set()
        rejected: list[str] = []
        match = _MODULE_NAME.match
        for first in _FIRST_WORDS.findall(text):
            if match(first):
                names.add(first)
            else:
                rejected.append(first)
        return names, rejected
    return _parse_modules_lines(text)


def _parse_modules_lines(text: str) -> tuple[set[str], list[str]]:
    """:func:`parse_modules` line by line (any line ends)."""
    names: set[str] = set()
    rejected: list[str] = []
    for line in text.splitlines():
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        if not first:
            continue
        if _MODULE_NAME.match(first):
            names.add(first)
        else:
            rejected.append(first)
    return names, rejected


def parse_builtin(text: str) -> set[str]:
    """``modules.builtin`` paths -> basenames without ``.ko`` (not normalised, as NFD)."""
    if _only_newlines(text):
        return set(_BUILTIN_LINES.findall(text))
    return _parse_builtin_lines(text)


def _parse_builtin_lines(text: str) -> set[str]:
    """:func:`parse_builtin` line by line (any line ends)."""
    names = set()
    for line in text.splitlines():
        line = line.strip()
        if line:
            base = posixpath.basename(line)
            names.add(base[:-3] if base.endswith(".ko") else base)
    return {n for n in names if _MODULE_NAME.match(n)}


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise _Unusable("binary content (NUL byte)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unusable(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _read_big_text(host: HostFS, path: str) -> str | None:
    """A text file of up to MAX_TEXT_BYTES, ``None`` when missing; ``/proc/config.gz`` unpacked."""
    try:
        data = host.read_bytes(path, MAX_TEXT_BYTES + 1)
    except HostFileError as exc:
        if exc.missing:
            return None
        raise _Unusable(f"unreadable: {exc.reason}") from exc
    if path.endswith(".gz"):
        try:
            unpacker = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = unpacker.decompress(data, MAX_TEXT_BYTES + 1)
            if not unpacker.eof and len(data) <= MAX_TEXT_BYTES:
                raise _Unusable("truncated gzip stream")
        except zlib.error as exc:
            raise _Unusable(f"corrupt gzip: {exc}") from exc
    if len(data) > MAX_TEXT_BYTES:
        raise _Unusable(f"larger than {MAX_TEXT_BYTES} bytes; not a real kernel file")
    return _decode(data)


USR_SRC = "/usr/src"


class _UsrSrc:
    """Five of NFD's kconfig candidates lie in as many directories below ``/usr/src``: one
    listing of ``/usr/src`` (made when first asked) tells which of those directories exist,
    so a candidate below one that does not is skipped without its failed open (what the read
    would have found: nothing, "missing").  Unsure (the listing failed for another reason than
    absence, a path not in normal form) means the candidate is read as before."""

    def __init__(self, host: HostFS):
        self.host = host
        self.names: frozenset[str] | None = None
        self.listed = False

    def certainly_absent(self, path: str) -> bool:
        if not path.startswith(USR_SRC + "/") or posixpath.normpath(path) != path:
            return False
        if not self.listed:
            self.listed = True
            try:
                self.names = frozenset(self.host.listdir(USR_SRC))  # [] when /usr/src is not there
            except HostFileError:
                self.names = None  # there but unlistable: each read says what it finds
        first = path[len(USR_SRC) + 1:].partition("/")[0]
        return self.names is not None and first not in self.names


@dataclass(frozen=True)
class Config:
    """``sources.kernel`` of nfd-worker.conf, with NFD's defaults (``source/kernel`` ``newDefaultConfig``):
    ``kconfigFile`` is tried before NFD's search order; ``configOpts`` are the options labelled."""

    kconfig_file: str = nfd_option("kconfigFile", "", STRING)
    config_opts: tuple[str, ...] = nfd_option("configOpts", ("NO_HZ", "NO_HZ_IDLE", "NO_HZ_FULL", "PREEMPT"))


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    errors: list[SourceError] = []
    features: dict[str, Feature] = {}
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}

    def label(key: str, value: str, origin: str) -> None:
        labels[nfd_label(NAME, key)] = value
        origins[nfd_label(NAME, key)] = origin

    release = ""
    try:
        release = (host.read_attr(OSRELEASE) or "").strip()
        if not release:
            errors.append(SourceError(NAME, OSRELEASE, "missing or empty; no kernel version"))
    except HostFileError as exc:
        errors.append(SourceError(NAME, OSRELEASE, f"unreadable: {exc.reason}"))
    if len(release) > 256 or any(c.isspace() for c in release):
        errors.append(SourceError(NAME, OSRELEASE, f"not a kernel release: {release[:40]!r}"))
        release = ""
    if release:
        version = version_attributes(release)
        features["version"] = Feature(attributes=version, origin=OSRELEASE)
        for key, value in version.items():
            label(f"version.{key}", value, OSRELEASE)

    usr_src = _UsrSrc(host)
    for path in kconfig_candidates(release, config.kconfig_file):
        if usr_src.certainly_absent(path):
            continue
        try:
            text = _read_big_text(host, path)
        except _Unusable as exc:
            errors.append(SourceError(NAME, path, f"kernel config skipped: {exc}"))
            continue
        if text is None:
            continue
        options = parse_kconfig(text)
        if not options:
            errors.append(SourceError(NAME, path, "no CONFIG_ lines; not a kernel config"))
            continue
        features["config"] = Feature(attributes=options, origin=path)
        for opt in config.config_opts:
            if opt in options:
                label(f"config.{opt}", kconfig_label_value(options[opt]), path)
        break

    loaded: set[str] = set()
    try:
        text = _read_big_text(host, PROC_MODULES)
        if text is not None:
            loaded, rejected = parse_modules(text)
            if rejected:
                errors.append(SourceError(NAME, PROC_MODULES, f"{len(rejected)} line(s) without a module name, e.g. {rejected[0][:40]!r}"))
    except _Unusable as exc:
        errors.append(SourceError(NAME, PROC_MODULES, str(exc)))
    enabled = set(loaded)
    if release:
        builtin_path = f"/lib/modules/{release}/modules.builtin"
        try:
            text = _read_big_text(host, builtin_path)
            enabled |= parse_builtin(text) if text is not None else set()
        except _Unusable as exc:
            errors.append(SourceError(NAME, builtin_path, str(exc)))
    if loaded:
        features["loadedmodule"] = Feature(flags=loaded, origin=PROC_MODULES)
    if enabled:
        features["enabledmodule"] = Feature(flags=enabled, origin=PROC_MODULES)

    enforce = "/sys/fs/selinux/enforce"
    try:
        status = host.read_bytes(enforce, 16)
        selinux = status[:1] == b"1"
    except HostFileError as exc:
        selinux = False
        if not exc.missing:
            errors.append(SourceError(NAME, enforce, f"unreadable: {exc.reason}"))
    features["selinux"] = Feature(attributes={"enabled": "true" if selinux else "false"}, origin=enforce)
    if selinux:
        label("selinux.enabled", "true", enforce)
    kvm = "/sys/devices/virtual/misc/kvm"
    features["kvm"] = Feature(attributes={"enabled": "true" if host.exists(kvm) else "false"}, origin=kvm)
    return SourceResult(NAME, features, labels, errors, origins)
