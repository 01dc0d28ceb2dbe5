"""/dev patterns -> device nodes a container may get, under stable IDs; read through ``HostFS``.

Contract, for every ``path`` and ``glob`` entry of a ``devices:`` declaration:

- **Only /dev.** A match is followed to its real node inside the host root; one that resolves
  outside ``/dev/`` (a link to ``/etc``), a directory, or a name with bytes no device name
  has (control characters, non-ASCII: a hostile serial in a udev link) is refused with a line
  in ``notes`` and never handed out. The container gets the real node at the matched name
  (``/dev/serial/by-id/usb-...`` in the container is the host's ``/dev/ttyUSB0``) or at the
  entry's ``containerPath``.
- **Bounded.** At most ``MAX_MATCHES`` matches of one pattern are looked at (names in sorted
  order); past that the rest is not read, and ``undetermined`` says so: the devices not read
  are held at what was last published, never taken as gone. A read that fails is the same.
- **Stable IDs.** A match's ID comes from the most stable name the host gives its node, in this
  order: a udev ``by-id`` link (the device's serial, survives moving the stick to another
  port), its USB controller and port path in sysfs, a udev ``by-path`` link, and only then its
  ``/dev`` name (which the kernel gives in enumeration order); ``basis`` says which.
"""

from __future__ import annotations

import hashlib
import posixpath
import re
from dataclasses import dataclass, field

from agent.device_claims import NodeSpec
from agent.deviceplugin.model import MAX_DEVICE_ID
from agent.hostfs import HostFileError, HostFS

MAX_MATCHES = 256
"""Matches of one pattern looked at per pass; more is "undetermined" (held), with an Event and
the ``nfa_device_plugin_undetermined`` metric (deploy/devices.md, "Bounds")."""

BY_ID_DIRS = ("/dev/serial/by-id", "/dev/v4l/by-id", "/dev/snd/by-id")
BY_PATH_DIRS = ("/dev/serial/by-path", "/dev/v4l/by-path", "/dev/snd/by-path")
"""Where udev's persistent-name rules put their links (60-serial.rules, 60-persistent-v4l.rules,
78-sound-card.rules); the by-id names hold the USB serial, the by-path names the port."""

SYSFS_CLASSES = ("tty", "video4linux", "sound", "hidraw", "usbmisc")
"""Classes whose device nodes are looked up in sysfs for a USB port path (``/sys/class/C/NAME``)."""

_NAME = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: every name udev or the kernel makes
_ID_CHARS = re.compile(r"[^A-Za-z0-9._:-]")
_ROOT_HUB = re.compile(r"usb\d+")
_USB_PORT = re.compile(r"\d+-[\d.]+")
_USB_INTERFACE = re.compile(r"\d+-[\d.]+:\d+\.\d+")


def stable_text(text: str) -> str:
    """``text`` as a device ID: characters outside ``[A-Za-z0-9._:-]`` replaced, no ``::``
    (the replica separator); a digest of the original appended when anything was replaced or
    it is longer than 63 characters, so two names never fold into one ID."""
    safe = _ID_CHARS.sub("_", text)
    while "::" in safe:
        safe = safe.replace("::", ":_")
    if safe == text and len(safe) <= MAX_DEVICE_ID:
        return safe
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return safe[:MAX_DEVICE_ID - 13] + "-" + digest


def shown(name: str) -> str:
    """A hostile name made safe to print in one log line."""
    return ascii(name[:80])[1:-1]


@dataclass(frozen=True)
class Match:
    path: str  # as matched (a by-id link, /dev/ttyUSB0)
    node: str  # the real node under /dev the link leads to
    container_path: str = ""
    ident: str = ""
    basis: str = ""


@dataclass
class Scan:
    """One resolution's reads of /dev: its refusals (``notes``) and whether anything was left
    unread (``undetermined``)."""

    host: HostFS
    notes: list[str] = field(default_factory=list)
    undetermined: str = ""
    _links: dict[str, dict[str, str]] = field(default_factory=dict)

    def _held(self, why: str) -> None:
        self.undetermined = f"{self.undetermined}; {why}" if self.undetermined else why

    def _node(self, path: str) -> str | None:
        """The real node ``path`` leads to, if it may be handed out; None (with a note) if not,
        or if it is not there."""
        try:
            real = self.host.resolve(path)
            if not real.startswith("/dev/"):
                self.notes.append(f"{shown(path)}: refused, it leads to {shown(real)}, outside /dev")
                return None
            if not all(_NAME.fullmatch(part) for part in real.split("/")[1:]):
                self.notes.append(f"{shown(path)}: refused, its node name {shown(real)} has bytes no device name has")
                return None
            status = self.host.stat(real)
        except HostFileError as err:
            self._held(f"{shown(path)} could not be read ({err.reason})")
            return None
        if status is None:
            return None
        if self.host.is_dir(real):
            self.notes.append(f"{shown(path)}: refused, a directory; only device nodes are handed to containers")
            return None
        return real

    def _matches(self, spec: NodeSpec) -> list[str]:
        if spec.kind == "path":
            return [spec.value]
        directory, pattern = posixpath.split(spec.value)
        try:
            names = self.host.listdir(directory)
        except HostFileError as err:
            self._held(f"{spec.value}: {directory} could not be listed ({err.reason})")
            return []
        from fnmatch import fnmatchcase

        hits = [n for n in names if fnmatchcase(n, pattern)]
        if len(hits) > MAX_MATCHES:
            self._held(f"{spec.value} matches {len(hits)} entries; the first {MAX_MATCHES} are served, "
                       "the rest are not read")
            hits = hits[:MAX_MATCHES]
        out = []
        for name in hits:
            if not _NAME.fullmatch(name):
                self.notes.append(f"{directory}/{shown(name)}: refused, the name has bytes no device name has")
                continue
            out.append(f"{directory}/{name}")
        return out

    def group(self, spec: NodeSpec) -> list[Match]:
        """The nodes of a ``path`` or ``group`` glob entry (all of them one device's)."""
        out = []
        for path in self._matches(spec):
            node = self._node(path)
            if node is not None:
                out.append(Match(path, node, spec.container_path or path))
        return out

    def each(self, spec: NodeSpec) -> list[Match]:
        """One device per node a ``glob`` entry matches, each under its stable ID."""
        by_node: dict[str, Match] = {}
        for path in self._matches(spec):
            node = self._node(path)
            if node is not None and node not in by_node:
                ident, basis = self.stable_id(path, node)
                by_node[node] = Match(path, node, spec.container_path or path, ident, basis)
        seen: dict[str, int] = {}
        for match in by_node.values():
            seen[match.ident] = seen.get(match.ident, 0) + 1
        out = []
        for match in by_node.values():
            if seen[match.ident] > 1:  # two nodes share a udev link name: tell them apart by node
                self.notes.append(f"{match.node}: its stable name is not unique on this host; ID from its /dev name")
                match = Match(match.path, match.node, match.container_path,
                              stable_text(match.ident + "-" + posixpath.basename(match.node)),
                              match.basis + " and its /dev name (the stable name is shared)")
            out.append(match)
        return out

    def stable_id(self, path: str, node: str) -> tuple[str, str]:
        parent = posixpath.dirname(path)
        if parent in BY_ID_DIRS:
            return stable_text(_link_id(path)), f"the udev link {shown(path)}"
        link = self._link_to(node, BY_ID_DIRS)
        if link:
            return stable_text(_link_id(link)), f"the udev link {shown(link)}"
        port = self._usb_port(node)
        if port:
            return stable_text(port), "its USB controller and port path (sysfs)"
        if parent in BY_PATH_DIRS:
            return stable_text(_link_id(path)), f"the udev link {shown(path)}"
        link = self._link_to(node, BY_PATH_DIRS)
        if link:
            return stable_text(_link_id(link)), f"the udev link {shown(link)}"
        why = (f"its /dev name {shown(node)} (no udev link or USB port found: the kernel may name it "
               "differently after a replug)")
        return stable_text("dev-" + node[len("/dev/"):].replace("/", "-")), why

    def _link_to(self, node: str, directories: tuple[str, ...]) -> str:
        for directory in directories:
            links = self._links.get(directory)
            if links is None:
                links = {}
                try:
                    for name in self.host.listdir(directory)[:MAX_MATCHES]:
                        if _NAME.fullmatch(name):
                            links.setdefault(self.host.resolve(f"{directory}/{name}"), f"{directory}/{name}")
                except HostFileError:
                    links = {}
                self._links[directory] = links
            if node in links:
                return links[node]
        return ""

    def _usb_port(self, node: str) -> str:
        """``usb-<controller>-<port path>[:<interface>]`` of a class device's USB parent (its
        interface, as sysfs names it: one adapter may have a tty per interface), or ""."""
        name = node[len("/dev/"):]
        if "/" in name:
            return ""
        for cls in SYSFS_CLASSES:
            entry = f"/sys/class/{cls}/{name}"
            try:
                if not self.host.exists(entry):
                    continue
                real = self.host.resolve(entry)
            except HostFileError:
                continue
            parts = real.split("/")
            hubs = [i for i, p in enumerate(parts) if _ROOT_HUB.fullmatch(p)]
            if not hubs or hubs[0] == 0:
                return ""
            controller = parts[hubs[0] - 1]
            ports = [p for p in parts[hubs[0] + 1:] if _USB_PORT.fullmatch(p)]
            interfaces = [p for p in parts[hubs[0] + 1:] if _USB_INTERFACE.fullmatch(p)]
            if not ports:
                return ""
            return f"usb-{controller}-{interfaces[-1] if interfaces else ports[-1]}"
        return ""


def _link_id(link: str) -> str:
    """``/dev/serial/by-id/usb-X-if00`` -> ``serial-by-id-usb-X-if00``."""
    return "-".join(link[len("/dev/"):].split("/"))


def group_id(specs: tuple[NodeSpec, ...]) -> tuple[str, str]:
    """The ID of a declaration's one device made of ``path``/``group`` entries: its one path
    (``/dev/fuse`` -> ``dev-fuse``), or the directory its entries share (``/dev/snd/*`` ->
    ``dev-snd``); the same on every host the declaration is used on."""
    entries = [s for s in specs if s.kind in ("path", "glob")]
    values = [s.value for s in entries]
    if len(entries) == 1 and entries[0].kind == "path":
        common = entries[0].value
    else:
        common = posixpath.commonpath([posixpath.dirname(s.value) if s.kind == "glob" else s.value for s in entries])
    text = "dev-" + common[len("/dev/"):].replace("/", "-") if common.startswith("/dev/") else "dev"
    what = "path" if len(values) == 1 else "patterns"
    return stable_text(text), f"the declared {what} {' '.join(values)} (one device on the host)"
