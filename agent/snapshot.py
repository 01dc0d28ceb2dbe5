"""Record exactly the host files discovery looked at, as a tree ``discover`` can replay.

A snapshot is how a bug report, a new fixture or a benchmark input is made from a real
machine: run discovery once through a :class:`HostFS` whose recorder (:class:`Recording`) keeps
what every read returned, then rebuild, under the output directory, just the paths the
sources read, listed or tested:

* symlinks stay symlinks with their target as written (relative targets as-is; absolute
  targets are kept and re-rooted by :class:`HostFS` on replay), so ``driver`` and
  ``/sys/bus/*/devices/*`` links behave as on the host;
* a file's content is the bytes discovery actually got (sysfs reports 4096 for a 5-byte
  attribute: nothing is copied by size);
* every entry of a directory that was listed exists with its kind (directory, file,
  symlink), so counts and ``is_dir``/``is_file`` checks replay; entries nobody read are empty;
* live-only data (py-cpuinfo facts) goes to :data:`agent.sources.cpu.LIVE_FACTS_PATH`.

Whatever could not be recorded faithfully (unreadable files, symlink loops, sockets) is skipped
and explained in ``SNAPSHOT-NOTES.txt``. Junk where text was expected is recorded as read, so
the replay finds the same junk.
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from agent import __version__
from agent.discovery import Discovery, DiscoveryConfig, discover
from agent.hostfs import HostFileError, HostFS, Outcome

NOTES_NAME = "SNAPSHOT-NOTES.txt"
MAX_FILE_BYTES = 1024 * 1024
"""Largest content kept per file; discovery reads far less (sysfs attributes are a page)."""
MAX_DIR_ENTRIES = 10_000
"""Entries recreated per listed directory, so listing something like /proc cannot explode."""
_MAX_LINK_HOPS = 40
TAR_SUFFIXES = (".tar.gz", ".tgz")


MAX_REPLAY_BYTES = 256 * 1024 * 1024
"""Largest total of member sizes unpacked from a snapshot archive for replay (a snapshot is a
few MiB: files are capped at MAX_FILE_BYTES and read far less); a bigger one is refused."""
MAX_REPLAY_MEMBERS = 500_000
"""Most members unpacked from a snapshot archive (directories at most MAX_DIR_ENTRIES each)."""


class SnapshotError(Exception):
    """The snapshot could not be written (output in the way, not writable, ...), or an archive
    could not be replayed (unreadable, hostile, over a bound)."""


@dataclass(frozen=True)
class SnapshotResult:
    """What was written and the discovery it reproduces."""

    output: Path
    discovery: Discovery
    files: int
    links: int
    directories: int
    notes: tuple[str, ...]


def _normalise(host_path: str) -> str:
    return posixpath.normpath("/" + host_path.lstrip("/")) if host_path else "/"


class Recording:
    """The seam's recorder for one pass: every path touched, the bytes each read returned,
    the directories listed and what could not be read (``HostFS``'s ``recorder``)."""

    def __init__(self) -> None:
        self.touched: dict[str, None] = {}  # insertion-ordered set
        self.contents: dict[str, bytes] = {}
        self.listed: set[str] = set()
        self.failures: dict[str, str] = {}

    def __call__(self, operation: str, host_path: str, outcome: Outcome) -> None:
        norm = _normalise(host_path)
        self.touched[norm] = None
        if isinstance(outcome, HostFileError):
            if not outcome.missing and operation in ("read", "list"):
                self.failures[norm] = outcome.reason if operation == "read" else f"unlistable: {outcome.reason}"
        elif operation == "read" and isinstance(outcome, bytes):
            if len(outcome) >= len(self.contents.get(norm, b"")):
                self.contents[norm] = outcome
        elif operation == "list":
            self.listed.add(norm)


class _TreeWriter:
    """Rebuilds host paths from ``source`` under ``target`` without following any link in either."""

    def __init__(self, source: Path, target: Path):
        self.source = source
        self.target = target
        self.notes: list[str] = []
        self.files = self.links = self.directories = 0
        #: files whose read failed on the host: left absent (never an empty stand-in), so a
        #: replay finds them missing rather than reading "" where the host gave an error
        self.absent: set[str] = set()

    def note(self, host_path: str, message: str) -> None:
        self.notes.append(f"{host_path}: {message}")

    def _src(self, host_path: str) -> Path:
        return self.source / host_path.lstrip("/") if host_path != "/" else self.source

    def _dst(self, host_path: str) -> Path:
        return self.target / host_path.lstrip("/") if host_path != "/" else self.target

    def _lstat(self, host_path: str) -> os.stat_result | None:
        try:
            return os.lstat(self._src(host_path))
        except OSError:
            return None

    def _mkdirs(self, host_path: str) -> None:
        path = self._dst(host_path)
        if not path.is_dir():
            path.mkdir(parents=True, exist_ok=True)
            self.directories += 1

    def resolve(self, host_path: str) -> str | None:
        """Follow ``host_path`` in the source as :meth:`HostFS.resolve` does, recreating every
        symlink met on the way; ``None`` (with a note) for a loop."""
        parts = [p for p in _normalise(host_path).split("/") if p]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = "/" + "/".join(resolved + [part])
            status = self._lstat(candidate)
            if status is None or not stat.S_ISLNK(status.st_mode):
                resolved.append(part)
                continue
            hops += 1
            if hops > _MAX_LINK_HOPS:
                self.note(host_path, "symlink loop (too many levels of links); links kept, nothing behind them")
                return None
            target = os.readlink(self._src(candidate))
            self._link(candidate, target)
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p and p != "."] + parts
        return "/" + "/".join(resolved)

    def _link(self, host_path: str, target: str) -> None:
        dst = self._dst(host_path)
        if os.path.lexists(dst):
            return
        self._mkdirs(posixpath.dirname(host_path))
        os.symlink(target, dst)
        self.links += 1

    def write(self, resolved: str, data: bytes) -> None:
        self._mkdirs(posixpath.dirname(resolved))
        dst = self._dst(resolved)
        if dst.is_dir() and not dst.is_symlink():
            return
        dst.write_bytes(data)
        self.files += 1

    def place(self, resolved: str) -> None:
        """Recreate ``resolved`` (a link-free path) with its kind and no content."""
        status = self._lstat(resolved)
        if status is None:
            return
        if stat.S_ISDIR(status.st_mode):
            self._mkdirs(resolved)
        elif stat.S_ISREG(status.st_mode):
            if resolved not in self.absent and not os.path.lexists(self._dst(resolved)):
                self.write(resolved, b"")
        else:
            self.note(resolved, "not a regular file, directory or symlink (device, socket or pipe); skipped")

    def place_entries(self, resolved: str) -> None:
        """Every entry of a listed directory, with its kind; symlinked entries with their target's kind."""
        status = self._lstat(resolved)
        if status is None or not stat.S_ISDIR(status.st_mode):
            return  # listed but absent: replay lists nothing too
        try:
            names = sorted(os.listdir(self._src(resolved)))
        except OSError as exc:
            self.note(resolved, f"could not be listed again: {exc.strerror}")
            return
        if len(names) > MAX_DIR_ENTRIES:
            self.note(resolved, f"{len(names)} entries; only the first {MAX_DIR_ENTRIES} recorded")
            names = names[:MAX_DIR_ENTRIES]
        for name in names:
            entry = posixpath.join(resolved, name)
            final = self.resolve(entry)
            if final is not None:
                self.place(final)


def _materialise(host: Recording, writer: _TreeWriter) -> None:
    writer._mkdirs("/")
    for path in sorted(host.failures):
        resolved = writer.resolve(path)
        if resolved is not None:
            writer.absent.add(resolved)
    for path in sorted(host.touched):
        resolved = writer.resolve(path)
        if resolved is None:
            continue
        if path in host.contents:
            data = host.contents[path]
            if len(data) > MAX_FILE_BYTES:
                writer.note(path, f"content cut to {MAX_FILE_BYTES} bytes (discovery read {len(data)})")
                data = data[:MAX_FILE_BYTES]
            writer.write(resolved, data)
            continue
        if path in host.failures:
            writer.note(path, f"skipped: {host.failures[path]}")
        writer.place(resolved)  # a directory that failed as a file (EISDIR) stays a directory
        if path in host.listed and path not in host.failures:
            writer.place_entries(resolved)


def _write_live_facts(host: HostFS, recording: Recording, writer: _TreeWriter, sources: Iterable[str]) -> None:
    """py-cpuinfo's facts, which only exist on the live host, into the tree for the cpu source."""
    if not host.is_live or "cpu" not in sources:
        return
    try:
        from agent.sources.cpu import LIVE_FACTS_PATH, live_cpu_facts
    except ImportError as exc:
        writer.note("/", f"no live CPU facts recorded: {exc}")
        return
    if LIVE_FACTS_PATH in recording.contents:
        return  # the host itself carried recorded facts and the cpu source read them
    from agent.sources.cpu_arm32 import snapshot_facts

    facts = {**live_cpu_facts(), **snapshot_facts(host)}
    writer.write(_normalise(LIVE_FACTS_PATH), (json.dumps(facts, indent=2, sort_keys=True) + "\n").encode())


def _notes_text(root: Path, sources: list[str], notes: list[str]) -> str:
    header = [
        f"node-feature-agent {__version__} snapshot of host root {root}",
        f"taken {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}; sources: {', '.join(sources)}",
        "replay: node-feature-agent discover --host-root <this directory>",
        "",
        f"{len(notes)} path(s) not recorded faithfully:" if notes else "every path discovery used was recorded.",
    ]
    return "\n".join(header + [f"  {n}" for n in notes]) + "\n"


def _prepare_directory(path: Path) -> None:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise SnapshotError(f"{path}: exists and is not an empty directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SnapshotError(f"{path}: cannot create: {exc.strerror}") from exc


def _write_tarball(tree: Path, archive: Path) -> None:
    def normalise_owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    tmp = archive.with_name(archive.name + ".partial")
    with tarfile.open(tmp, "w:gz") as tar:
        for child in sorted(tree.iterdir()):
            tar.add(child, arcname=child.name, recursive=True, filter=normalise_owner)
    os.replace(tmp, archive)


def is_tarball(output: str | os.PathLike[str]) -> bool:
    return os.fspath(output).endswith(TAR_SUFFIXES)


def take_snapshot(
    output: str | os.PathLike[str],
    host_root: str | os.PathLike[str] = "/",
    config: DiscoveryConfig | None = None,
    sources: Iterable[str] | None = None,
) -> SnapshotResult:
    """Discover ``host_root`` once and record what it read into ``output`` (a directory, or a
    ``.tar.gz``/``.tgz`` archive whose members are the tree's top-level entries)."""
    from agent.sources import SOURCE_NAMES

    names = list(sources) if sources is not None else list(SOURCE_NAMES)
    recording = Recording()
    host = HostFS(host_root, recorder=recording)
    result = discover(host, config, names)
    output = Path(os.path.abspath(os.fspath(output)))
    if is_tarball(output):
        if output.is_dir():
            raise SnapshotError(f"{output}: is a directory")
        if not output.parent.is_dir():
            raise SnapshotError(f"{output.parent}: no such directory")
        with tempfile.TemporaryDirectory(prefix="nfa-snapshot-") as scratch:
            writer = _record(host, recording, Path(scratch) / "tree", names)
            _write_tarball(Path(scratch) / "tree", output)
    else:
        _prepare_directory(output)
        writer = _record(host, recording, output, names)
    return SnapshotResult(output, result, writer.files, writer.links, writer.directories, tuple(writer.notes))


def _record(host: HostFS, recording: Recording, tree: Path, sources: list[str]) -> _TreeWriter:
    tree.mkdir(parents=True, exist_ok=True)
    writer = _TreeWriter(host.root, tree)
    try:
        _materialise(recording, writer)
        _write_live_facts(host, recording, writer, sources)
        (tree / NOTES_NAME).write_text(_notes_text(host.root, sources, writer.notes))
    except OSError as exc:
        raise SnapshotError(f"{tree}: cannot write the snapshot: {exc.strerror or exc}") from exc
    return writer


def _replay_filter(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter (no absolute or ``..`` member paths, nothing written outside
    ``dest`` even through a link already unpacked, no devices or FIFOs, no set-id bits), with
    one allowance: a *symbolic* link whose target is absolute or outside is created as written,
    because a snapshot keeps host links as they are (``/proc/device-tree`` ->
    ``/sys/firmware/devicetree/base``) and :class:`HostFS` re-roots them on replay. Extraction
    never follows it: a later member under it resolves outside and the ``data`` filter refuses
    that member."""
    try:
        return tarfile.data_filter(member, dest)
    except (tarfile.AbsoluteLinkError, tarfile.LinkOutsideDestinationError):
        if not member.issym():
            raise
        return member.replace(uid=None, gid=None, uname=None, gname=None, deep=False)  # type: ignore[arg-type]


def extract_snapshot(archive: str | os.PathLike[str], into: str | os.PathLike[str], *,
                     max_bytes: int = MAX_REPLAY_BYTES, max_members: int = MAX_REPLAY_MEMBERS) -> None:
    """Unpack a snapshot archive (what :func:`take_snapshot` writes to a ``.tar.gz``) into the
    empty directory ``into`` for replay; :class:`SnapshotError` naming the member for a member
    that would escape it, a special file, a corrupt archive, or more than ``max_members``
    members or ``max_bytes`` bytes (counted from the headers before each member is written,
    so a gzip bomb stops at the bound)."""
    if not hasattr(tarfile, "data_filter"):  # Python 3.11.4+: the extraction filters
        raise SnapshotError("replaying an archive needs Python 3.11.4 or newer (tarfile's data filter)")
    total = 0

    def bounded(tar: tarfile.TarFile) -> Iterable[tarfile.TarInfo]:
        nonlocal total
        for count, member in enumerate(tar, start=1):
            total += max(0, member.size)
            if count > max_members:
                raise SnapshotError(f"{os.fspath(archive)}: more than {max_members} members")
            if total > max_bytes:
                raise SnapshotError(f"{os.fspath(archive)}: more than {max_bytes} bytes unpacked")
            yield member

    try:
        with tarfile.open(archive, "r:gz") as tar:  # what take_snapshot writes
            tar.extractall(into, members=bounded(tar), filter=_replay_filter)
    except tarfile.FilterError as exc:
        raise SnapshotError(f"{os.fspath(archive)}: refused: {exc}") from exc
    except (tarfile.TarError, EOFError, OSError) as exc:
        reason = " ".join(str(getattr(exc, "strerror", None) or exc).split())[:300]
        raise SnapshotError(f"{os.fspath(archive)}: not a readable snapshot archive: {reason}") from exc
