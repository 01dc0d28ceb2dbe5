"""The host seam: rooting, symlink re-rooting, escape refusal, file-type refusal, absent versus
failed, recording, descriptors. Where the kernel can say what a path is under a root
(``openat2`` with ``RESOLVE_IN_ROOT``, ``tests/kernel_oracle.py``), the seam is judged by it."""

from __future__ import annotations

import errno
import gc
import os
import stat
import subprocess
import sys
import threading

import pytest

import agent.hostfs as hostfs_module
from agent.hostfs import MAX_OPEN_DIRECTORIES, NOT_REGULAR, HostFileError, HostFS
from tests import kernel_oracle

needs_openat2 = pytest.mark.skipif(not kernel_oracle.available(), reason="this kernel has no openat2 to judge by")


@pytest.fixture
def tree(tmp_path):
    dev = tmp_path / "sys/devices/pci0000:00/0000:00:02.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x8086\n")
    (dev / "junk").write_bytes(b"\xff\xfe\x00\x01")
    drivers = tmp_path / "sys/bus/pci/drivers/i915"
    drivers.mkdir(parents=True)
    os.symlink("../../../../bus/pci/drivers/i915", dev / "driver")
    bus = tmp_path / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:02.0", bus / "0000:00:02.0")
    # an absolute link must be re-rooted under the host root, not followed on this machine
    os.symlink("/sys/devices/pci0000:00/0000:00:02.0", bus / "absolute")
    return tmp_path


def open_fds() -> int:
    gc.collect()  # seams of earlier tests close their descriptors when collected
    return len(os.listdir("/proc/self/fd"))


def test_reads_through_relative_and_absolute_links(tree):
    host = HostFS(tree)
    assert host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor") == "0x8086"
    assert host.read_attr("/sys/bus/pci/devices/absolute/vendor") == "0x8086"
    assert host.resolve("/sys/bus/pci/devices/absolute") == "/sys/devices/pci0000:00/0000:00:02.0"
    assert host.link_name("/sys/bus/pci/devices/0000:00:02.0/driver") == "i915"


def test_missing_is_none_junk_is_content_and_a_refusal_is_a_failed_read(tree):
    host = HostFS(tree)
    assert host.read_attr("/sys/devices/nothing/here") is None
    assert host.listdir("/sys/no/such/dir") == [] and host.stat("/sys/no/such") is None
    with pytest.raises(HostFileError) as junk:
        host.read_attr("/sys/devices/pci0000:00/0000:00:02.0/junk")
    assert "binary" in junk.value.reason and junk.value.content and not junk.value.unreadable
    with pytest.raises(HostFileError) as refused:
        host.read_attr("/sys/devices/pci0000:00/0000:00:02.0")  # a directory where a file is asked for
    assert refused.value.reason == os.strerror(errno.EISDIR) and refused.value.unreadable
    with pytest.raises(HostFileError) as not_dir:
        host.listdir("/sys/devices/pci0000:00/0000:00:02.0/vendor")  # a file where a directory is
    assert not not_dir.value.missing and not_dir.value.unreadable
    assert host.listdir("/sys/devices/pci0000:00/0000:00:02.0/vendor/below") == []  # below a file: absent


def test_dotdot_cannot_escape_root(tree):
    host = HostFS(tree)
    assert host.resolve("/../../etc/passwd") == "/etc/passwd"
    assert host.resolve("/sys/../../../etc") == "/etc"


def test_recorder_sees_every_operation_once_with_its_outcome(tree):
    seen = []
    host = HostFS(tree, recorder=lambda operation, path, outcome: seen.append((operation, path, outcome)))
    host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor")
    host.read_attrs("/sys/bus/pci/devices/absolute", ["vendor", "absent"])
    host.listdir("/sys/bus/pci/devices")
    host.is_dir("/sys/bus/pci/devices/absolute")
    with pytest.raises(HostFileError):
        host.read_attr("/sys/devices/pci0000:00/0000:00:02.0")
    reads = [(op, path, outcome) for op, path, outcome in seen if op != "readlink"]
    assert reads[:4] == [("read", "/sys/bus/pci/devices/0000:00:02.0/vendor", b"0x8086\n"),
                         ("read", "/sys/bus/pci/devices/absolute/vendor", b"0x8086\n"),
                         ("read", "/sys/bus/pci/devices/absolute/absent", None),
                         ("list", "/sys/bus/pci/devices", ["0000:00:02.0", "absolute"])]
    assert reads[4] == ("stat", "/sys/bus/pci/devices/absolute", None)
    assert reads[5][:2] == ("read", "/sys/devices/pci0000:00/0000:00:02.0") and isinstance(reads[5][2], HostFileError)
    # the walk reports each link it reads (a directory it leads to is kept for the pass)
    assert [path for op, path, _ in seen if op == "readlink"] == [
        "/sys/bus/pci/devices/0000:00:02.0", "/sys/bus/pci/devices/absolute", "/sys/bus/pci/devices/absolute"]


def test_glob_last_component(tree):
    assert HostFS(tree).glob("/sys/bus/pci/devices/0000:*") == ["/sys/bus/pci/devices/0000:00:02.0"]


def test_dotdot_after_a_link_steps_up_from_the_link_target_as_the_kernel_does(tmp_path):
    # /sys/class/net/eth0 -> ../../devices/pci0000:00/0000:00:03.0/net/eth0, and
    # eth0/device -> ../../../0000:00:03.0: ".." must walk the *target's* parents.
    device = tmp_path / "sys/devices/pci0000:00/0000:00:03.0"
    (device / "net/eth0").mkdir(parents=True)
    (device / "vendor").write_text("0x8086\n")
    (tmp_path / "sys/class/net").mkdir(parents=True)
    os.symlink("../../devices/pci0000:00/0000:00:03.0/net/eth0", tmp_path / "sys/class/net/eth0")
    os.symlink("../../../0000:00:03.0", device / "net/eth0/device")
    host = HostFS(tmp_path)
    assert host.resolve("/sys/class/net/eth0/device") == "/sys/devices/pci0000:00/0000:00:03.0"
    assert host.read_attr("/sys/class/net/eth0/device/vendor") == "0x8086"


def test_symlink_loops_are_a_failed_read_not_a_hang_nor_absence(tmp_path):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    host = HostFS(tmp_path)
    with pytest.raises(HostFileError, match="too many levels") as loop:
        host.resolve("/a/x")
    assert loop.value.unreadable
    for ask in (host.exists, host.is_dir, host.read_attr, host.listdir, host.readlink):
        with pytest.raises(HostFileError):
            ask("/a/x")


def test_clear_cache_sees_devices_that_moved(tmp_path):
    (tmp_path / "devices/one").mkdir(parents=True)
    (tmp_path / "devices/two").mkdir(parents=True)
    (tmp_path / "devices/two/serial").write_text("2\n")
    os.symlink("devices/one", tmp_path / "current")
    host = HostFS(tmp_path)
    assert host.read_attr("/current/serial") is None
    os.remove(tmp_path / "current")
    os.symlink("devices/two", tmp_path / "current")
    host.clear_cache()
    assert host.read_attr("/current/serial") == "2"


def test_links_to_outside_the_root_are_re_rooted_at_every_level(tmp_path):
    # a directory link and a leaf link, both absolute and pointing at this machine's real path
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("outside\n")
    root = tmp_path / "host"
    (root / "sys").mkdir(parents=True)
    (root / str(outside).lstrip("/")).mkdir(parents=True)
    (root / str(outside).lstrip("/") / "secret").write_text("inside\n")
    os.symlink(str(outside), root / "sys/dirlink")
    os.symlink(str(outside / "secret"), root / "sys/leaflink")
    os.symlink("../../../../../../../../outside/secret", root / "sys/dotdot")
    host = HostFS(root)
    assert host.read_attr("/sys/dirlink/secret") == "inside"
    assert host.read_attr("/sys/leaflink") == "inside"
    assert host.read_attr("/sys/dotdot") is None  # ".." stops at the root: /outside is not there
    assert host.is_file("/sys/leaflink") and host.is_dir("/sys/dirlink") and host.is_link("/sys/dirlink")
    assert host.listdir("/sys/dirlink") == ["secret"]


def test_a_link_is_never_opened_as_a_directory_relative_to_its_parent(tmp_path):
    (tmp_path / "sys/bus/x").mkdir(parents=True)
    (tmp_path / "sys/devices/dev").mkdir(parents=True)
    (tmp_path / "sys/devices/dev/name").write_text("inside\n")
    os.symlink("/sys/devices/dev", tmp_path / "sys/bus/x/dev")
    (tmp_path / "sys/bus/x/plain").write_text("p\n")
    host = HostFS(tmp_path)
    assert host.read_attr("/sys/bus/x/plain") == "p"  # opens /sys/bus/x
    assert host.read_attr("/sys/bus/x/dev/name") == "inside"
    assert host.listdir("/sys/bus/x/dev") == ["name"]


def test_open_directories_stay_bounded_and_close_with_the_pass(tmp_path):
    for n in range(3 * MAX_OPEN_DIRECTORIES):
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}/value").write_text(f"{n}\n")
    before = open_fds()
    host = HostFS(tmp_path)
    for n in range(3 * MAX_OPEN_DIRECTORIES):
        assert host.read_attr(f"/d{n}/value") == str(n)
        assert len(os.listdir("/proc/self/fd")) <= before + MAX_OPEN_DIRECTORIES + 1  # + the root
    host.clear_cache()
    host.close()
    assert open_fds() == before


def test_threads_share_one_seam_and_its_descriptors_safely(tree):
    """Several threads read through one seam while another drops its cache over and over: the
    descriptors are used and closed under one lock, so every answer is right."""
    host = HostFS(tree)
    seen = []

    def other():
        for _ in range(200):
            seen.append((host.read_attr("/sys/bus/pci/devices/absolute/vendor"),
                         host.link_name("/sys/devices/pci0000:00/0000:00:02.0/driver"),
                         host.is_dir("/sys/bus/pci/devices/absolute"), host.listdir("/sys/bus/pci/devices")))

    workers = [threading.Thread(target=other) for _ in range(3)]
    for worker in workers:
        worker.start()
    for _ in range(200):
        host.clear_cache()
        assert host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor") == "0x8086"
    for worker in workers:
        worker.join()
    assert len(seen) == 600
    assert all(s == ("0x8086", "i915", True, ["0000:00:02.0", "absolute"]) for s in seen)


def test_large_files_are_read_whole_and_fifos_refused(tmp_path):
    (tmp_path / "big").write_bytes(b"x" * 200_000)
    (tmp_path / "pages").write_bytes(b"p" * 8192)
    os.mkfifo(tmp_path / "fifo")
    host = HostFS(tmp_path)
    assert host.read_bytes("/big", 1 << 20) == b"x" * 200_000
    assert host.read_bytes("/big", 10) == b"x" * 10
    assert host.read_bytes("/pages") == b"p" * 8192
    with pytest.raises(HostFileError, match="not a regular file") as refused:
        host.read_bytes("/fifo")
    assert refused.value.unreadable


def test_procfs_files_are_read_to_the_end():
    # procfs states size 0 and hands out about a page per read: one read would cut it short
    with open("/proc/self/maps", "rb") as handle:
        expected_at_least = len(handle.read())
    data = HostFS("/").read_bytes("/proc/self/maps", 1 << 20)
    assert len(data) >= min(expected_at_least, 1 << 20) * 0.5 and len(data) > 4096


def test_a_file_that_states_its_size_takes_one_read(tmp_path, monkeypatch):
    """The end-of-file rule: a read that is not whole pages ends a sized file (a sysfs text
    attribute: one read); whole pages may be followed by more."""
    (tmp_path / "small").write_text("0x8086\n")
    (tmp_path / "pages").write_bytes(b"p" * 4096)
    reads = []
    real = os.read
    monkeypatch.setattr(hostfs_module.os, "read", lambda fd, n: reads.append(n) or real(fd, n))
    host = HostFS(tmp_path)
    assert host.read_attr("/small") == "0x8086" and len(reads) == 1
    reads.clear()
    assert host.read_bytes("/pages") == b"p" * 4096 and len(reads) == 2  # the second says: the end


def test_nul_bytes_in_a_path_are_missing_not_a_crash(tree):
    host = HostFS(tree)
    assert host.read_attr("/sys/devices\x00/x") is None
    assert host.exists("/sys/\x00") is False and host.readlink("/sys/\x00") is None
    assert host.listdir("/sys/\x00") == []
    assert host.read_attrs("/sys/devices/pci0000:00/0000:00:02.0", ["a\x00b"]) == ({"a\x00b": None}, {})


def test_read_attrs_answers_as_read_attr_does_file_by_file(tmp_path):
    """The batch keeps every check of the one-file read: links re-rooted (never followed out of
    the root), FIFOs and directories refused, junk an error, absent files ``None``."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host\n")
    root = tmp_path / "root"
    dev = root / "sys/devices/d0"
    dev.mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc/secret").write_text("inside\n")
    (dev / "vendor").write_text("0x8086\n")
    (dev / "label").write_text("  caf\u00e9 \n")
    (dev / "junk").write_bytes(b"\xff\xfe\x00\x01")
    (dev / "empty").write_text("")
    (dev / "big").write_bytes(b"y" * 100_000)
    (dev / "subdir").mkdir()
    os.mkfifo(dev / "fifo")
    os.symlink("/etc/secret", dev / "absolute")  # re-rooted: /etc/secret under the root
    os.symlink(str(outside / "secret"), dev / "escape")  # absolute: re-rooted, so missing
    os.symlink("../../../../outside/secret", dev / "dotdot")  # ".." stops at the root
    os.symlink("loop", dev / "loop")
    names = ["vendor", "label", "junk", "empty", "big", "subdir", "fifo", "absolute", "escape",
             "dotdot", "loop", "absent", "..", "", "a\x00b"]
    values, failures = HostFS(root).read_attrs("/sys/devices/d0", names)
    one_by_one = HostFS(root)
    expected_values, expected_failures = {}, {}
    for name in names:
        try:
            expected_values[name] = one_by_one.read_attr(f"/sys/devices/d0/{name}")
        except HostFileError as exc:
            expected_failures[name] = (exc.host_path, exc.reason, exc.missing, exc.content)
    assert values == expected_values
    assert {name: (e.host_path, e.reason, e.missing, e.content) for name, e in failures.items()} == expected_failures
    assert values["vendor"] == "0x8086" and values["label"] == "caf\u00e9"
    assert values["absolute"] == "inside" and values["absent"] is None and values["empty"] == ""
    assert values["escape"] is None and values["dotdot"] is None
    assert len(values["big"]) == 65536
    assert failures["fifo"].reason == NOT_REGULAR and "binary" in failures["junk"].reason
    assert set(failures) >= {"fifo", "junk", "subdir", "loop"}
    # a missing directory: every file absent, nothing raised
    assert HostFS(root).read_attrs("/sys/devices/gone", ["vendor"]) == ({"vendor": None}, {})


def test_link_name_is_the_target_s_last_name_or_none(tree):
    device = "/sys/devices/pci0000:00/0000:00:02.0"
    os.symlink("/", tree / "sys/devices/pci0000:00/0000:00:02.0/to_root")
    host = HostFS(tree)
    assert host.link_name(f"{device}/driver") == "i915"
    assert [host.link_name(f"{device}/{name}") for name in ("vendor", "absent", "..", "", "a\x00b")] == [None] * 5
    assert host.link_name(f"{device}/to_root") == ""  # "/" has no last name
    assert host.link_name("/sys/bus/pci/devices/absolute/driver") == "i915"  # below a link, re-rooted
    assert host.link_name("/sys/no/such/driver") is None


def _swapping_open(monkeypatch, swap):
    """``agent.hostfs``'s ``os.open`` runs ``swap(name)`` right before each real open: the worst
    moment for an entry to change kind (after any look the seam may have taken)."""
    real = os.open

    def open_(path, flags, *args, **kwargs):
        swap(path)
        return real(path, flags, *args, **kwargs)

    monkeypatch.setattr(hostfs_module.os, "open", open_)


def test_an_entry_swapped_for_a_fifo_between_listing_and_open_is_never_read(tmp_path, monkeypatch):
    """A device directory is listed (``vendor`` a regular file), then ``vendor`` becomes a FIFO
    holding data just before the seam opens it: the read is refused after ``fstat`` and the
    FIFO's data is still all there (nobody read it)."""
    dev = tmp_path / "sys/devices/platform/dev0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x8086\n")
    host = HostFS(tmp_path)
    assert host.listdir("/sys/devices/platform/dev0") == ["vendor"]
    writer = []

    def swap(name):
        if name == "vendor" and not writer:
            (dev / "vendor").unlink()
            os.mkfifo(dev / "vendor")
            writer.append(os.open(dev / "vendor", os.O_RDWR))  # keeps the pipe open: data stays
            os.write(writer[0], b"secret\n")

    _swapping_open(monkeypatch, swap)
    try:
        error = host.read_attrs("/sys/devices/platform/dev0", ["vendor"])[1]["vendor"]
        assert error.reason == NOT_REGULAR and error.unreadable
        with pytest.raises(HostFileError) as again:
            host.read_bytes("/sys/devices/platform/dev0/vendor")
        assert again.value.reason == NOT_REGULAR
        monkeypatch.undo()
        assert os.read(os.open(dev / "vendor", os.O_RDONLY | os.O_NONBLOCK), 64) == b"secret\n"
    finally:
        for fd in writer:
            os.close(fd)


def test_a_device_node_is_never_read(tmp_path, monkeypatch):
    """``/dev/zero``'s numbers where an attribute was, swapped in just before the open: refused."""
    dev = tmp_path / "sys/devices/platform/dev0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x8086\n")
    try:
        os.mknod(dev / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("no CAP_MKNOD here: a device node cannot be made")
    os.unlink(dev / "zero")
    host = HostFS(tmp_path)

    def swap(name):
        if name == "vendor" and (dev / "vendor").is_file():
            (dev / "vendor").unlink()
            os.mknod(dev / "vendor", 0o600 | stat.S_IFCHR, os.makedev(1, 5))

    _swapping_open(monkeypatch, swap)
    values, failures = host.read_attrs("/sys/devices/platform/dev0", ["vendor"])
    assert values == {} and failures["vendor"].reason == NOT_REGULAR


@needs_openat2
def test_links_resolve_as_the_kernel_resolves_them_inside_the_root(tmp_path):
    """Chains of links, ``..`` after a link, absolute targets re-rooted, ``..`` stopping at the
    root, links to files, targets ending in ``/`` or ``/.`` (a directory required), dangling
    links and loops: every read, listing, kind and link answer is the kernel's own."""
    root = tmp_path
    (root / "sys/devices/pci0000:00/0000:00:03.0/net/eth0").mkdir(parents=True)
    (root / "sys/devices/system/cpu/cpu0/topology").mkdir(parents=True)
    (root / "sys/devices/system/cpu/cpu0/topology/core_id").write_text("0\n")
    (root / "sys/bus/cpu/devices").mkdir(parents=True)
    (root / "sys/class/net").mkdir(parents=True)
    (root / "sys/x").mkdir(parents=True)
    (root / "sys/x/file").write_text("f\n")
    os.mkfifo(root / "sys/x/fifo")
    links = {"sys/bus/cpu/devices/cpu0": "../../../devices/system/cpu/cpu0",
             "sys/class/net/eth0": "../../devices/pci0000:00/0000:00:03.0/net/eth0",
             "sys/devices/pci0000:00/0000:00:03.0/net/eth0/device": "../../../0000:00:03.0",
             "sys/x/chain": "../class/net/eth0/device/../0000:00:03.0/net", "sys/x/absolute": "/sys/bus/cpu/devices/cpu0/topology",
             "sys/x/up": "../../../../../../../../sys/x", "sys/x/tofile": "file", "sys/x/dangling": "nowhere/deeper",
             "sys/x/loop1": "loop2", "sys/x/loop2": "loop1", "sys/x/self": ".", "sys/x/parent": "..", "sys/x/root": "/",
             "sys/x/slash": "file/", "sys/x/dot": "file/.", "sys/x/dirdot": "up/.", "sys/x/missingup": "gone/../file",
             "sys/x/fileup": "file/../file", "sys/x/tofifo": "fifo"}
    for link, target in links.items():
        os.symlink(target, root / link)
    queries = ["/sys/bus/cpu/devices/cpu0/topology", "/sys/bus/cpu/devices/cpu0/topology/core_id",
               "/sys/class/net/eth0/device", "/sys/class/net/eth0/device/net", "/sys/x/chain/eth0/device",
               "/sys/x/up/up/file", "/sys/x/self/self/file", "/sys/x/parent/x/root/sys", "/sys/x/up/file",
               *(f"/{link}" for link in links), *(f"/{link}/file" for link in links)]
    host, kernel = HostFS(root), kernel_oracle.Kernel(root)
    try:
        for query in queries:
            assert _seam(host, query) == _kernel(kernel, query), query
    finally:
        kernel.close()


def _seam(host: HostFS, query: str) -> tuple:
    """The seam's answers in the oracle's words."""
    def kind(follow: bool) -> str:
        try:
            status = host.stat(query, follow=follow)
        except HostFileError:
            return "error"
        if status is None:
            return "missing"
        return next((k for k, t in (("dir", stat.S_ISDIR), ("file", stat.S_ISREG), ("link", stat.S_ISLNK))
                     if t(status.st_mode)), "other")

    def refusal(exc: HostFileError) -> str:
        return "refused" if exc.reason in (NOT_REGULAR, os.strerror(errno.EISDIR), os.strerror(errno.ENOTDIR)) else "error"

    try:
        read: bytes | str = host.read_bytes(query, 1 << 20)
    except HostFileError as exc:
        read = "missing" if exc.missing else refusal(exc)
    try:
        listing: list[str] | str = host.listdir(query)
        if not listing and kind(True) == "missing":
            listing = "missing"
    except HostFileError as exc:
        listing = refusal(exc)
    try:
        link = host.readlink(query)
    except HostFileError:
        link = "error"
    return read, listing, kind(True), kind(False), link


def _kernel(kernel: kernel_oracle.Kernel, query: str) -> tuple:
    return (kernel.read(query), kernel.listdir(query), kernel.kind(query), kernel.kind(query, follow=False),
            kernel.readlink(query))


def test_descriptors_do_not_leak_over_passes_with_device_churn(tmp_path):
    """Many passes while devices come, go, and turn from links into directories and back: open
    descriptors stay bounded during the passes and all close with the seam."""
    import random

    bus = tmp_path / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    entries = []
    for n in range(20):
        name = f"0000:00:0{n % 10}.{n // 10}"
        dev = tmp_path / f"sys/devices/pci0000:00/{name}"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text("0x8086\n")
        os.symlink(f"../../../devices/pci0000:00/{name}", bus / name)
        entries.append(name)
    rng = random.Random(13)
    before = open_fds()
    host = HostFS(tmp_path)
    for _ in range(60):
        host.clear_cache()
        link = bus / rng.choice(entries)
        if link.is_symlink():
            target = os.readlink(link)
            link.unlink()
            if rng.random() < 0.5:
                link.mkdir()
            else:
                os.symlink(target.replace("0000:00:0", "0000:00:1"), link)  # moved: dangling now
        elif link.is_dir():
            link.rmdir()
            os.symlink("../../../devices/pci0000:00/0000:00:00.0", link)
        for name in entries:
            path = f"/sys/bus/pci/devices/{name}"
            host.listdir("/sys/bus/pci/devices")
            host.read_attrs(path, ["vendor"])
            host.link_name(f"{path}/driver")
            host.is_dir(path)
            host.resolve(path)
        assert len(os.listdir("/proc/self/fd")) <= before + MAX_OPEN_DIRECTORIES + 1
    host.close()
    assert open_fds() == before


_NO_DESCRIPTORS = """
import json, os, resource, sys
from agent.hostfs import HostFileError, HostFS
host = HostFS(sys.argv[1])
open_now = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
out = {}
for name, ask in [("read_attr", lambda: host.read_attr("/sys/devices/pci0000:00/0000:00:02.0/vendor")),
                  ("read_attrs", lambda: host.read_attrs("/sys/bus/pci/devices/0000:00:02.0", ["vendor"])),
                  ("listdir", lambda: host.listdir("/sys/bus/pci/devices")),
                  ("is_dir", lambda: host.is_dir("/sys/bus/pci/devices")),
                  ("exists", lambda: host.exists("/sys/bus/pci/devices/absolute")),
                  ("is_file", lambda: host.is_file("/sys/devices/pci0000:00/0000:00:02.0/vendor")),
                  ("readlink", lambda: host.readlink("/sys/devices/pci0000:00/0000:00:02.0/driver")),
                  ("resolve", lambda: host.resolve("/sys/bus/pci/devices/absolute"))]:
    try:
        answer = ask()
        out[name] = ["answered", answer[1]["vendor"].unreadable if name == "read_attrs" else repr(answer)]
    except HostFileError as exc:
        out[name] = ["raised", exc.unreadable, exc.reason]
print(json.dumps(out))
"""


def test_out_of_descriptors_is_a_failed_read_never_absence(tree):
    """With no descriptor left (EMFILE), every question the seam cannot answer raises an
    unreadable ``HostFileError`` (``read_attrs`` reports it per file): none says "absent"."""
    done = subprocess.run([sys.executable, "-c", _NO_DESCRIPTORS, str(tree)], capture_output=True, text=True,
                          timeout=120, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0, done.stderr
    import json

    answers = json.loads(done.stdout)
    assert answers.pop("read_attrs") == ["answered", True]
    assert all(kind == "raised" and unreadable and "Too many open files" in reason
               for kind, unreadable, reason in answers.values()), answers
