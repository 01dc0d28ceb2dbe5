"""kernel source: NFD's ``kernel.*`` features and ``kernel-*`` labels.

Version from ``/proc/sys/kernel/osrelease``, the first kernel config found in NFD's search
order (``source/kernel/kconfig.go``), loaded and built-in modules, SELinux and KVM.  Unlike
NFD every path, ``/proc`` included, is read through the host seam, so a tree replays fully.
A file that could not be read (not absent: permissions, I/O) leaves the feature it decides, and
its labels, undetermined this pass: the caller keeps its earlier answer.
"""

from __future__ import annotations

import posixpath
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass

from agent.features import ElementNames, Feature, SourceError, SourceResult, nfd_label
from agent.hostfs import HostFileError, HostFS, IncompleteFile
from agent.sources._config import STRING, nfd_option
from agent.sources._sysfs import whole_lines

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
_KCONFIG_LINE = re.compile(r"^CONFIG_(\w+)=(.+)", re.ASCII)  # a Kconfig symbol is ASCII: [A-Za-z0-9_]+
_MODULE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")


class _Unusable(Exception):
    """A host file that is there but cannot be used (too big, binary, corrupt; ``unread``:
    it could not be read at all)."""

    def __init__(self, message: str, *, unread: bool = False) -> None:
        super().__init__(message)
        self.unread = unread


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


def _read_big_text(host: HostFS, path: str, *, may_be_empty: bool = False) -> str | None:
    """A text file of up to MAX_TEXT_BYTES, ``None`` when missing; ``/proc/config.gz`` unpacked.

    Read but not whole is a failed read (``unread``): a truncated gzip stream, or text empty
    (unless ``may_be_empty``: a module list) or cut mid-line (``whole_lines``: every file read
    here is written a line at a time, each ending in a newline: ``conf_write``,
    scripts/kconfig/confdata.c; ``m_show``, kernel/module/procfs.c; modules.builtin by kbuild)."""
    try:
        data = host.read_bytes(path, MAX_TEXT_BYTES + 1)
    except HostFileError as exc:
        if exc.missing:
            return None
        raise _Unusable(f"unreadable: {exc.reason}", unread=exc.unreadable) from exc
    if path.endswith(".gz"):
        try:
            unpacker = zlib.decompressobj(16 + zlib.MAX_WBITS)
            data = unpacker.decompress(data, MAX_TEXT_BYTES + 1)
            if not unpacker.eof and len(data) <= MAX_TEXT_BYTES:
                raise _Unusable("incomplete: truncated gzip stream", unread=True)
        except zlib.error as exc:
            raise _Unusable(f"corrupt gzip: {exc}") from exc
    if len(data) > MAX_TEXT_BYTES:
        raise _Unusable(f"larger than {MAX_TEXT_BYTES} bytes; not a real kernel file")
    try:
        return whole_lines(path, _decode(data), may_be_empty=may_be_empty)
    except IncompleteFile as exc:
        raise _Unusable(exc.reason, unread=True) from exc


@dataclass(frozen=True)
class Config:
    """``sources.kernel`` of nfd-worker.conf, with NFD's defaults (``source/kernel`` ``newDefaultConfig``):
    ``kconfigFile`` is tried before NFD's search order; ``configOpts`` are the options labelled."""

    kconfig_file: str = nfd_option("kconfigFile", "", STRING)
    config_opts: tuple[str, ...] = nfd_option("configOpts", ("NO_HZ", "NO_HZ_IDLE", "NO_HZ_FULL", "PREEMPT"))


class _Found:
    """What the kernel source has found so far: features, labels, errors, and the features a
    failed read leaves undetermined."""

    def __init__(self) -> None:
        self.features: dict[str, Feature] = {}
        self.labels: dict[str, str] = {}
        self.origins: dict[str, str] = {}
        self.errors: list[SourceError] = []
        self.undetermined: dict[str, tuple[str, ...]] = {}

    def label(self, key: str, value: str, origin: str) -> None:
        self.labels[nfd_label(NAME, key)] = value
        self.origins[nfd_label(NAME, key)] = origin

    def error(self, path: str, message: str, unread: bool = False, *decides: tuple[str, tuple[str, ...]]) -> None:
        """An error; one that ``unread`` a file leaves what it ``decides`` undetermined."""
        self.errors.append(SourceError(NAME, path, message))
        if unread:
            self.undetermined.update(decides)


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    found = _Found()
    release = _version(host, found)
    _kconfig(host, found, release, config)
    _modules(host, found, release)
    if "version" in found.undetermined:  # the files named by the release were not looked for
        if "config" not in found.features:
            found.undetermined["config"] = (nfd_label(NAME, "config.*"),)
        found.undetermined.setdefault("enabledmodule", ())
    _selinux_and_kvm(host, found)
    return SourceResult(NAME, found.features, found.labels, found.errors, found.origins, found.undetermined)


def _version(host: HostFS, found: _Found) -> str:
    """The kernel release; ``osrelease`` there but not whole (``proc_dostring`` writes the
    release and a newline, kernel/sysctl.c) is a failed read: the version is undetermined."""
    release = ""
    try:
        release = whole_lines(OSRELEASE, host.read_text(OSRELEASE)).strip()
    except HostFileError as exc:
        if exc.missing:
            found.error(OSRELEASE, "missing or empty; no kernel version")
        else:
            message = exc.reason if isinstance(exc, IncompleteFile) else f"unreadable: {exc.reason}"
            found.error(OSRELEASE, message, exc.unreadable, ("version", (nfd_label(NAME, "version.*"),)))
    if len(release) > 256 or any(c.isspace() for c in release):
        found.error(OSRELEASE, f"not a kernel release: {release[:40]!r}")
        release = ""
    if release:
        version = version_attributes(release)
        found.features["version"] = Feature(attributes=version, origin=OSRELEASE)
        for key, value in version.items():
            found.label(f"version.{key}", value, OSRELEASE)
    return release


def _kconfig(host: HostFS, found: _Found, release: str, config: Config) -> None:
    """The first kernel config of NFD's search order; a candidate that could not be read
    before it leaves ``kernel.config`` undetermined (that one might have been the answer)."""
    for path in kconfig_candidates(release, config.kconfig_file):
        try:
            text = _read_big_text(host, path)
        except _Unusable as exc:
            found.error(path, f"kernel config skipped: {exc}", exc.unread, ("config", (nfd_label(NAME, "config.*"),)))
            continue
        if text is None:
            continue
        options = parse_kconfig(text)
        if not options:
            found.error(path, "no CONFIG_ lines; not a kernel config")
            continue
        found.features["config"] = Feature(attributes=options, origin=path)
        for opt in config.config_opts:
            if opt in options:
                found.label(f"config.{opt}", kconfig_label_value(options[opt]), path)
        return


def _modules(host: HostFS, found: _Found, release: str) -> None:
    loaded: set[str] = set()
    try:
        text = _read_big_text(host, PROC_MODULES, may_be_empty=True)  # no module loaded
        if text is not None:
            loaded, rejected = parse_modules(text)
            if rejected:
                found.error(PROC_MODULES, f"{len(rejected)} line(s) without a module name, e.g. {rejected[0][:40]!r}")
    except _Unusable as exc:
        found.error(PROC_MODULES, str(exc), exc.unread, ("loadedmodule", ()), ("enabledmodule", ()))
    enabled = set(loaded)
    if release:
        builtin_path = f"/lib/modules/{release}/modules.builtin"
        try:
            text = _read_big_text(host, builtin_path, may_be_empty=True)
            enabled |= parse_builtin(text) if text is not None else set()
        except _Unusable as exc:
            found.error(builtin_path, str(exc), exc.unread, ("enabledmodule", ()))
    if loaded:
        found.features["loadedmodule"] = Feature(flags=loaded, origin=PROC_MODULES)
    if enabled:
        found.features["enabledmodule"] = Feature(flags=enabled, origin=PROC_MODULES)


def _selinux_and_kvm(host: HostFS, found: _Found) -> None:
    enforce = "/sys/fs/selinux/enforce"
    try:
        data = host.read_bytes(enforce, 16)
        if not data:  # sel_read_enforce always writes the mode, 0 or 1 (security/selinux/selinuxfs.c)
            raise IncompleteFile(enforce, "empty")
        selinux = data[:1] == b"1"
    except HostFileError as exc:
        selinux = False
        if not exc.missing:
            message = exc.reason if isinstance(exc, IncompleteFile) else f"unreadable: {exc.reason}"
            found.error(enforce, message, True, ("selinux", (nfd_label(NAME, "selinux.enabled"),)))
    found.features["selinux"] = Feature(attributes={"enabled": "true" if selinux else "false"}, origin=enforce)
    if selinux:
        found.label("selinux.enabled", "true", enforce)
    kvm = "/sys/devices/virtual/misc/kvm"
    try:
        found.features["kvm"] = Feature(attributes={"enabled": "true" if host.exists(kvm) else "false"}, origin=kvm)
    except HostFileError as exc:
        found.error(kvm, f"unreadable: {exc.reason}", True, ("kvm", ()))
