"""The host seam: rooting, symlink re-rooting, escape refusal, error classes, recording."""

from __future__ import annotations

import errno
import functools
import gc
import os
import stat
import threading
import time

import pytest

import agent.hostfs as hostfs_module
from agent.hostfs import HostFileError
from agent.hostfs import HostFS as SeamHostFS

#: every test runs against both ways of confining paths: the kernel's (openat2 with
#: RESOLVE_IN_ROOT, where this kernel has it) and the Python walk that is its fallback; each
#: with the walk over open directories that resolves plain device links before them
#: (``HostFS._canonical``) and without it, so the resolvers still answer every case themselves
RESOLVERS = ["python", "python-only"] + (["kernel", "kernel-only"] if hostfs_module._openat2_available() else [])


class ResolversOnly(SeamHostFS):
    """The seam without its link walk over open directories: the resolvers alone."""

    _walk_links = False


@pytest.fixture(params=RESOLVERS)
def HostFS(request):  # noqa: N802 - stands in for the class in every test below
    seam = ResolversOnly if request.param.endswith("-only") else SeamHostFS
    return functools.partial(seam, kernel_resolve=request.param.startswith("kernel"))


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


def test_reads_through_relative_and_absolute_links(tree, HostFS):
    host = HostFS(tree)
    assert host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor") == "0x8086"
    assert host.read_attr("/sys/bus/pci/devices/absolute/vendor") == "0x8086"
    assert host.resolve("/sys/bus/pci/devices/absolute") == "/sys/devices/pci0000:00/0000:00:02.0"
    assert host.link_name("/sys/bus/pci/devices/0000:00:02.0/driver") == "i915"


def test_missing_is_none_and_junk_is_an_error(tree, HostFS):
    host = HostFS(tree)
    assert host.read_attr("/sys/devices/nothing/here") is None
    with pytest.raises(HostFileError) as err:
        host.read_attr("/sys/devices/pci0000:00/0000:00:02.0/junk")
    assert "binary" in err.value.reason
    assert host.listdir("/sys/no/such/dir") == []


def test_dotdot_cannot_escape_root(tree, HostFS):
    host = HostFS(tree)
    assert host.path("/../../etc/passwd") == tree / "etc/passwd"
    assert host.resolve("/sys/../../../etc") == "/etc"


def test_unreadable_file_is_an_error_not_missing(tree, HostFS):
    target = tree / "sys/devices/pci0000:00/0000:00:02.0/vendor"
    target.chmod(0)
    try:
        if os.access(target, os.R_OK):
            pytest.skip("running as root: permissions are not enforced")
        with pytest.raises(HostFileError) as err:
            HostFS(tree).read_attr("/sys/devices/pci0000:00/0000:00:02.0/vendor")
        assert not err.value.missing
    finally:
        target.chmod(0o644)


def test_recorder_sees_every_path_read(tree, HostFS):
    seen: list[str] = []
    host = HostFS(tree, recorder=seen.append)
    host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor")
    host.listdir("/sys/bus/pci/devices")
    assert "/sys/bus/pci/devices/0000:00:02.0/vendor" in seen
    assert "/sys/bus/pci/devices" in seen


def test_glob_last_component(tree, HostFS):
    host = HostFS(tree)
    assert host.glob("/sys/bus/pci/devices/0000:*") == ["/sys/bus/pci/devices/0000:00:02.0"]


def test_dotdot_after_a_link_steps_up_from_the_link_target_as_the_kernel_does(tmp_path, HostFS):
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


def test_symlink_loops_are_an_error_not_a_hang(tmp_path, HostFS):
    os.symlink("b", tmp_path / "a")
    os.symlink("a", tmp_path / "b")
    host = HostFS(tmp_path)
    with pytest.raises(HostFileError, match="too many levels"):
        host.resolve("/a/x")
    assert host.exists("/a/x") is False


def test_clear_cache_sees_devices_that_moved(tmp_path, HostFS):
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


def test_links_to_outside_the_root_are_re_rooted_at_every_level(tmp_path, HostFS):
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
    assert sorted(host.listdir("/sys/dirlink")) == ["secret"]


def test_entries_report_links_from_one_listing(tree, HostFS):
    host = HostFS(tree)
    found = host.entries("/sys/devices/pci0000:00/0000:00:02.0")
    assert found == {"vendor": False, "junk": False, "driver": True}
    assert host.entries("/sys/bus/pci/devices") == {"0000:00:02.0": True, "absolute": True}
    assert host.entries("/sys/no/such/dir") == {}
    with pytest.raises(HostFileError):
        host.entries("/sys/devices/pci0000:00/0000:00:02.0/vendor")  # not a directory


def test_open_directories_stay_bounded_and_close_with_the_pass(tmp_path, HostFS):
    for n in range(3 * hostfs_module._MAX_DIR_FDS):
        (tmp_path / f"d{n}").mkdir()
        (tmp_path / f"d{n}/value").write_text(f"{n}\n")
    before = len(os.listdir("/proc/self/fd"))
    host = HostFS(tmp_path)
    for n in range(3 * hostfs_module._MAX_DIR_FDS):
        assert host.read_attr(f"/d{n}/value") == str(n)
    assert len(os.listdir("/proc/self/fd")) <= before + hostfs_module._MAX_DIR_FDS + 1  # + the root
    host.clear_cache()
    host.close()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_second_thread_reads_right_without_sharing_descriptors(tree, HostFS):
    host = HostFS(tree)
    assert host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor") == "0x8086"  # this thread owns the cache
    seen = []

    def other():
        for _ in range(50):
            seen.append((host.read_attr("/sys/bus/pci/devices/absolute/vendor"),
                         host.link_name("/sys/devices/pci0000:00/0000:00:02.0/driver"),
                         host.is_dir("/sys/bus/pci/devices/absolute"), host.listdir("/sys/bus/pci/devices")))

    worker = threading.Thread(target=other)
    worker.start()
    for _ in range(50):
        host.clear_cache()  # closes this thread's descriptors while the other one reads
        assert host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor") == "0x8086"
    worker.join()
    assert len(seen) == 50
    assert all(s == ("0x8086", "i915", True, ["0000:00:02.0", "absolute"]) for s in seen)


def test_large_files_are_read_whole_and_fifos_refused(tmp_path, HostFS):
    (tmp_path / "big").write_bytes(b"x" * 200_000)
    os.mkfifo(tmp_path / "fifo")
    host = HostFS(tmp_path)
    assert host.read_bytes("/big", 1 << 20) == b"x" * 200_000
    assert host.read_bytes("/big", 10) == b"x" * 10
    with pytest.raises(HostFileError, match="not a regular file"):
        host.read_bytes("/fifo")
    assert not stat.S_ISREG(os.lstat(tmp_path / "fifo").st_mode)


def test_procfs_files_are_read_to_the_end(HostFS):
    # procfs states size 0 and hands out about a page per read: one read would cut it short
    with open("/proc/self/maps", "rb") as handle:
        expected_at_least = len(handle.read())
    data = HostFS("/").read_bytes("/proc/self/maps", 1 << 20)
    assert len(data) >= min(expected_at_least, 1 << 20) * 0.5 and len(data) > 4096


def test_nul_bytes_in_a_path_are_missing_not_a_crash(tree, HostFS):
    host = HostFS(tree)
    assert host.read_attr("/sys/devices\x00/x") is None
    assert host.exists("/sys/\x00") is False and host.readlink("/sys/\x00") is None
    assert host.listdir("/sys/\x00") == []


def test_a_link_is_never_opened_as_a_directory_relative_to_its_parent(tmp_path, HostFS):
    # /sys/bus/x/dev -> absolute link; the parent is already open, the child must still be
    # resolved inside the root rather than opened as the link itself
    (tmp_path / "sys/bus/x").mkdir(parents=True)
    (tmp_path / "sys/devices/dev").mkdir(parents=True)
    (tmp_path / "sys/devices/dev/name").write_text("inside\n")
    os.symlink("/sys/devices/dev", tmp_path / "sys/bus/x/dev")
    (tmp_path / "sys/bus/x/plain").write_text("p\n")
    host = HostFS(tmp_path)
    assert host.read_attr("/sys/bus/x/plain") == "p"  # opens /sys/bus/x
    assert host.read_attr("/sys/bus/x/dev/name") == "inside"
    assert host.listdir("/sys/bus/x/dev") == ["name"]


def test_read_attrs_answers_as_read_attr_does_file_by_file(tmp_path, HostFS):
    """The batched read keeps every check of the one-file read: links re-rooted (never followed
    out of the root), FIFOs and directories refused, junk an error, absent files ``None``."""
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
            expected_failures[name] = (exc.host_path, exc.reason, exc.missing)
    assert values == expected_values
    assert {name: (e.host_path, e.reason, e.missing) for name, e in failures.items()} == expected_failures
    assert values["vendor"] == "0x8086" and values["label"] == "caf\u00e9"
    assert values["absolute"] == "inside" and values["absent"] is None and values["empty"] == ""
    assert values["escape"] is None and values["dotdot"] is None
    assert len(values["big"]) == 65536
    assert "not a regular file" in failures["fifo"].reason and "binary" in failures["junk"].reason
    assert set(failures) >= {"fifo", "junk", "subdir", "loop"}
    # a missing directory: every file absent, nothing raised
    assert HostFS(root).read_attrs("/sys/devices/gone", ["vendor"]) == ({"vendor": None}, {})


def test_read_attrs_goes_through_a_subclass_s_read_methods(tree):
    """A seam that overrides a read (a recorder, a fault injector) sees every file of a batch."""
    seen = []

    class Watching(SeamHostFS):
        def read_bytes(self, host_path, max_bytes=hostfs_module.MAX_ATTR_BYTES):
            seen.append(host_path)
            return super().read_bytes(host_path, max_bytes)

    values, _ = Watching(tree).read_attrs("/sys/devices/pci0000:00/0000:00:02.0", ["vendor", "absent"])
    assert values == {"vendor": "0x8086", "absent": None}
    assert seen == ["/sys/devices/pci0000:00/0000:00:02.0/vendor", "/sys/devices/pci0000:00/0000:00:02.0/absent"]


def test_link_names_answer_as_link_name_does_entry_by_entry(tree, HostFS):
    device = "/sys/devices/pci0000:00/0000:00:02.0"
    os.symlink("/", tree / "sys/devices/pci0000:00/0000:00:02.0/to_root")
    names = ["driver", "vendor", "absent", "to_root", "..", "", "a\x00b"]
    found = HostFS(tree).link_names(device, names)
    one_by_one = HostFS(tree)
    assert found == {name: one_by_one.link_name(f"{device}/{name}") for name in names}
    assert found["driver"] == "i915" and found["vendor"] is None and found["absent"] is None
    # through a directory that is itself a link (re-rooted inside the root)
    assert HostFS(tree).link_names("/sys/bus/pci/devices/absolute", ["driver"]) == {"driver": "i915"}
    assert HostFS(tree).link_names("/sys/no/such", ["driver"]) == {"driver": None}


def test_read_directory_answers_as_its_parts(tmp_path, HostFS):
    """One-go device read = resolve, listdir, read_attrs of the files (optional ones only where
    listed), link_names of the listed links: same values, same failures, nothing from outside."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host\n")
    root = tmp_path / "root"
    dev = root / "sys/devices/pci0000:00/0000:00:02.0"
    dev.mkdir(parents=True)
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    (root / "sys/bus/pci/drivers/i915").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "etc/secret").write_text("inside\n")
    (dev / "vendor").write_text("0x8086\n")
    (dev / "junk").write_bytes(b"\xff\xfe\x00\x01")
    (dev / "subdir").mkdir()
    os.mkfifo(dev / "fifo")
    os.symlink("/etc/secret", dev / "absolute")
    os.symlink(str(outside / "secret"), dev / "escape")
    os.symlink("../../../../../../outside/secret", dev / "dotdot")
    os.symlink("../../../bus/pci/drivers/i915", dev / "driver")
    os.symlink("loop", dev / "loop")
    os.symlink("../../../devices/pci0000:00/0000:00:02.0", root / "sys/bus/pci/devices/0000:00:02.0")
    os.symlink("/sys/devices/pci0000:00/0000:00:02.0", root / "sys/bus/pci/devices/absolute")
    os.symlink("../../../devices/pci0000:00/gone", root / "sys/bus/pci/devices/dangling")
    os.symlink(str(outside), root / "sys/bus/pci/devices/outside")
    os.symlink("../../../../etc/secret", root / "sys/bus/pci/devices/file")
    files = ["vendor", "junk", "subdir", "fifo", "absent", "..", ""]
    optional = ["absolute", "escape", "dotdot", "loop", "not-there"]
    links = ["driver", "vendor", "absolute", "missing", "", ".", "..", "../driver", "driver/"]
    for entry in ["0000:00:02.0", "absolute", "dangling", "outside", "file", "nothing"]:
        path = f"/sys/bus/pci/devices/{entry}"
        found = HostFS(root).read_directory(path, files, optional=optional, links=links)
        parts = HostFS(root)
        real = parts.resolve(path)
        try:
            names = frozenset(parts.listdir(real))
        except HostFileError:
            names = None
        assert (found.path, found.names) == (real, names), entry
        assert (found.listing_error is None) == (names is not None)
        if names:
            values, failures = parts.read_attrs(real, [*files, *(n for n in optional if n in names)])
            assert found.values == values, entry
            assert {n: (e.host_path, e.reason) for n, e in found.failures.items()} == \
                {n: (e.host_path, e.reason) for n, e in failures.items()}, entry
            assert found.links == parts.link_names(real, [n for n in links if n in names]), entry
        else:
            assert found.values == found.failures == found.links == {}
    found = HostFS(root).read_directory("/sys/bus/pci/devices/0000:00:02.0", files, optional=optional, links=links)
    assert found.path == "/sys/devices/pci0000:00/0000:00:02.0"
    assert found.values["vendor"] == "0x8086" and found.values["absolute"] == "inside"
    assert found.values["escape"] is None and found.values["dotdot"] is None and "not-there" not in found.values
    assert set(found.failures) >= {"junk", "subdir", "fifo", "loop"}
    assert found.links == {"driver": "i915", "vendor": None, "absolute": "secret"}
    assert HostFS(root).read_directory("/sys/bus/pci/devices/outside", ["secret"]).names == frozenset()


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 8192, 12289, hostfs_module.MAX_ATTR_BYTES,
                                  hostfs_module.MAX_ATTR_BYTES + 5000])
def test_read_directory_reads_listed_files_whole_without_their_size(tmp_path, HostFS, size):
    """A file the listing shows as regular is read without ``fstat`` (no size known): a read of
    whole pages reads on, so a file of any length comes back whole (up to the seam's limit),
    exactly as :meth:`read_attrs` (which asks ``fstat``) reads it."""
    dev = tmp_path / "sys/devices/platform/dev0"
    dev.mkdir(parents=True)
    content = ("0123456789abcde\n" * (size // 16 + 1))[:size]
    (dev / "attr").write_text(content)
    found = HostFS(tmp_path).read_directory("/sys/devices/platform/dev0", ["attr"])
    assert found.failures == {}
    assert found.values["attr"] == content[:hostfs_module.MAX_ATTR_BYTES].strip()
    assert found.values == HostFS(tmp_path).read_attrs("/sys/devices/platform/dev0", ["attr"])[0]


def _blocked_in_fifo_open(thread: threading.Thread) -> bool:
    """Whether ``thread`` waits in the kernel for a FIFO's other end (``fs/pipe.c``)."""
    try:
        with open(f"/proc/self/task/{thread.native_id}/wchan") as wchan:
            return wchan.read().strip() == "wait_for_partner"
    except OSError:
        return False


@pytest.mark.parametrize("kernel_resolve", [False, True] if hostfs_module._openat2_available() else [False])
def test_read_directory_never_opens_a_listed_fifo(tmp_path, kernel_resolve):
    """A FIFO the listing shows is refused without an open: a writer blocked in ``open`` on it
    (which any reader's open releases) is still waiting after the read.  (Without a listing,
    ``read_attrs`` opens it non-blocking and refuses it after ``fstat``.)"""
    dev = tmp_path / "sys/devices/platform/dev0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x8086\n")
    os.mkfifo(dev / "fifo")
    opened = threading.Event()

    def writer():
        fd = os.open(dev / "fifo", os.O_WRONLY)  # blocks until some reader opens the FIFO
        opened.set()
        os.close(fd)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not _blocked_in_fifo_open(thread):
            if time.monotonic() > deadline:
                pytest.fail("the writer never blocked in open(); /proc/self/task/*/wchan unreadable?")
            time.sleep(0.005)
        found = SeamHostFS(tmp_path, kernel_resolve=kernel_resolve).read_directory(
            "/sys/devices/platform/dev0", ["vendor", "fifo"])
        assert found.values == {"vendor": "0x8086"}
        assert found.failures["fifo"].reason == "not a regular file (FIFO, socket or device node)"
        assert not opened.wait(0.1) and _blocked_in_fifo_open(thread), "reading the directory opened the FIFO"
    finally:
        os.close(os.open(dev / "fifo", os.O_RDONLY | os.O_NONBLOCK))  # release the writer
        thread.join(5)


def test_read_directory_never_reads_a_device_node(tmp_path, HostFS):
    """A character device named like an attribute is listed as no regular file: refused as
    :meth:`read_attrs` refuses it, its content never read."""
    dev = tmp_path / "sys/devices/platform/dev0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text("0x8086\n")
    try:
        os.mknod(dev / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pytest.skip("no CAP_MKNOD here: a device node cannot be made")
    found = HostFS(tmp_path).read_directory("/sys/devices/platform/dev0", ["vendor"], optional=["zero"])
    assert found.values == {"vendor": "0x8086"}
    assert found.failures["zero"].reason == "not a regular file (FIFO, socket or device node)"


def test_read_directory_goes_through_a_subclass_s_methods(tree):
    """A seam that overrides what a one-go read stands for (a tracer, a fault injector) sees each part."""
    seen = []

    class Watching(SeamHostFS):
        def resolve(self, host_path):
            seen.append(("resolve", host_path))
            return super().resolve(host_path)

        def listdir(self, host_path):
            seen.append(("listdir", host_path))
            return super().listdir(host_path)

    found = Watching(tree).read_directory("/sys/bus/pci/devices/0000:00:02.0", ["vendor"], links=["driver"])
    device = "/sys/devices/pci0000:00/0000:00:02.0"
    assert (found.path, found.values, found.links) == (device, {"vendor": "0x8086"}, {"driver": "i915"})
    assert seen == [("resolve", "/sys/bus/pci/devices/0000:00:02.0"), ("listdir", device)]


def test_link_walk_resolves_as_the_resolvers_do(tmp_path):
    """The walk over open directories (links read and followed from their real parent) answers
    every path as the kernel's and the Python resolver do: chains of links, ``..`` after a
    link, absolute targets re-rooted, ``..`` stopping at the root, links to files, dangling
    links and loops."""
    root = tmp_path
    (root / "sys/devices/pci0000:00/0000:00:03.0/net/eth0").mkdir(parents=True)
    (root / "sys/devices/system/cpu/cpu0/topology").mkdir(parents=True)
    (root / "sys/bus/cpu/devices").mkdir(parents=True)
    (root / "sys/class/net").mkdir(parents=True)
    (root / "sys/x").mkdir(parents=True)
    (root / "sys/x/file").write_text("f\n")
    os.symlink("../../../devices/system/cpu/cpu0", root / "sys/bus/cpu/devices/cpu0")
    os.symlink("../../devices/pci0000:00/0000:00:03.0/net/eth0", root / "sys/class/net/eth0")
    os.symlink("../../../0000:00:03.0", root / "sys/devices/pci0000:00/0000:00:03.0/net/eth0/device")
    os.symlink("../class/net/eth0/device/../0000:00:03.0/net", root / "sys/x/chain")
    os.symlink("/sys/bus/cpu/devices/cpu0/topology", root / "sys/x/absolute")
    os.symlink("../../../../../../../../sys/x", root / "sys/x/up")
    os.symlink("file", root / "sys/x/tofile")
    os.symlink("nowhere/deeper", root / "sys/x/dangling")
    os.symlink("loop2", root / "sys/x/loop1")
    os.symlink("loop1", root / "sys/x/loop2")
    os.symlink(".", root / "sys/x/self")
    os.symlink("..", root / "sys/x/parent")
    os.symlink("/", root / "sys/x/root")
    queries = ["/sys/bus/cpu/devices/cpu0/topology", "/sys/class/net/eth0/device", "/sys/class/net/eth0/device/net",
               "/sys/x/chain", "/sys/x/chain/eth0/device", "/sys/x/absolute", "/sys/x/up/up/file", "/sys/x/tofile",
               "/sys/x/dangling", "/sys/x/loop1", "/sys/x/self/self/file", "/sys/x/parent/x/root/sys",
               "/sys/x/root", "/sys/x/up/file"]
    resolvers = [SeamHostFS(root, kernel_resolve=False), ResolversOnly(root, kernel_resolve=False)]
    if hostfs_module._openat2_available():
        resolvers += [SeamHostFS(root, kernel_resolve=True), ResolversOnly(root, kernel_resolve=True)]

    def answers(host, query):
        found = []
        for ask in (host.resolve, host.listdir, lambda q: host.read_attr(q + "/file"), host.read_attr):
            try:
                found.append(ask(query))
            except HostFileError as exc:
                found.append(("error", exc.missing))
        return found, host.is_dir(query), host.is_file(query), host.exists(query)

    for query in queries:
        found = [answers(host, query) for host in resolvers]
        assert all(answer == found[0] for answer in found), (query, found)
    walk = SeamHostFS(root)
    assert walk.resolve("/sys/x/chain") == "/sys/devices/pci0000:00/0000:00:03.0/net"
    assert walk.resolve("/sys/bus/cpu/devices/cpu0/topology") == "/sys/devices/system/cpu/cpu0/topology"
    assert walk.resolve("/sys/x/up") == "/sys/x" and walk.resolve("/sys/x/root") == "/"
    assert walk._canon  # the walk really answered (directories opened along real paths)


@pytest.mark.skipif(not hostfs_module._openat2_available(), reason="this kernel has no openat2: nothing to race")
def test_reads_through_dotdot_links_survive_renames_elsewhere_on_the_system(tree, tmp_path):
    """openat2(2): RESOLVE_IN_ROOT fails a lookup through ``..`` with EAGAIN when any rename on
    the system raced it. A node renames files all the time; the seam retries, so a device
    link read during a storm of renames (another process, real kernel) is never "missing"."""
    import subprocess
    import sys
    import time

    churn_dir = tmp_path / "churn"
    churn_dir.mkdir()
    (churn_dir / "a").write_text("")
    churn = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\n"
        "a, b = sys.argv[1] + '/a', sys.argv[1] + '/b'\n"
        "end = time.monotonic() + 30\n"
        "while time.monotonic() < end:\n"
        "    os.rename(a, b); os.rename(b, a)\n"), str(churn_dir)])
    try:
        time.sleep(0.2)  # the loop is running
        # the kernel resolves every path; and the walk over open directories, which reads the
        # link and never hands the kernel a ".." (so has nothing to retry)
        for host in (ResolversOnly(str(tree), kernel_resolve=True), SeamHostFS(str(tree), kernel_resolve=True)):
            missing = 0
            for _ in range(500):
                # through the relative link (../../../devices/...)
                if host.read_attr("/sys/bus/pci/devices/0000:00:02.0/vendor") != "0x8086":
                    missing += 1
                if host.read_directory("/sys/bus/pci/devices/0000:00:02.0", ["vendor"]).values != {"vendor": "0x8086"}:
                    missing += 1
                host.clear_cache()
            assert missing == 0, host
    finally:
        churn.kill()
        churn.wait()


def test_dotdot_after_a_missing_or_file_component_stays_broken(tmp_path):
    """``b/..`` is not ``.``: the kernel enters ``b`` before ``..`` leaves it, so with ``b`` missing
    (or a file) the path fails.  The Python walk once resolved it lexically (and disagreed with
    the kernel on ``is_dir``); it must also never hand out a path that a lexical ``realpath``
    would turn into one outside the root (the fuzz found both)."""
    (tmp_path / "f").write_text("x\n")
    os.symlink("b/..", tmp_path / "missing")
    os.symlink("/b/..", tmp_path / "absolute")
    os.symlink("f/..", tmp_path / "file")
    resolvers = [SeamHostFS(tmp_path, kernel_resolve=False), ResolversOnly(tmp_path, kernel_resolve=False)]
    if hostfs_module._openat2_available():
        resolvers += [SeamHostFS(tmp_path, kernel_resolve=True), ResolversOnly(tmp_path, kernel_resolve=True)]
    for query in ("/missing", "/absolute", "/file", "/missing/f", "/absolute/absolute", "/file/f"):
        for host in resolvers:
            assert not host.is_dir(query) and not host.is_file(query), (query, host)
            assert host.read_attr(query + "/f") is None
            try:
                assert host.listdir(query) == []  # missing
            except HostFileError as exc:
                assert "Not a directory" in exc.reason  # below a file
            real = os.path.realpath(host.real_path(query))
            assert real.startswith(str(tmp_path) + os.sep), (query, real)


def test_a_link_target_ending_in_slash_or_dot_requires_a_directory(tmp_path, HostFS):
    """``a -> sys/.`` and ``c -> sys/`` name the directory ``sys``: on a regular file the kernel
    answers ENOTDIR (``openat2`` under the root and plain ``open`` alike), so no resolver may read
    the file through them (the Python walk once dropped the ``.`` and read it; the fuzz found it).
    The expected answers are the kernel's own: plain ``open`` of the same relative links."""
    (tmp_path / "sys").write_text("inside\n")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "f").write_text("in dir\n")
    links = {"a": "sys/.", "c": "sys/", "e": "./sys/./", "g": "b/.", "h": "dir/.", "i": "dir/", "j": "i/./"}
    os.symlink("sys", tmp_path / "b")  # a link to the file, then "/."
    for name, target in links.items():
        os.symlink(target, tmp_path / name)
    host = HostFS(tmp_path)
    for name in ("a", "c", "e", "g"):
        with pytest.raises(NotADirectoryError):
            open(tmp_path / name, "rb")  # the kernel's answer
        with pytest.raises(HostFileError):
            host.read_bytes("/" + name)
        assert host.read_attr("/" + name + "/f") is None
        assert not host.is_file("/" + name) and not host.is_dir("/" + name)
        found = host.read_directory("/", optional=[name])
        assert found.values.get(name) is None, (name, found.values)
        values, _ = host.read_attrs("/", [name])
        assert values.get(name) is None
    for name in ("h", "i", "j"):  # the same on a directory: it is one
        assert host.is_dir("/" + name)
        assert host.read_attr("/" + name + "/f") == (tmp_path / name / "f").read_text().strip()
        assert host.listdir("/" + name) == ["f"]


def _interface_tree(tmp_path):
    """A USB device with hostile interfaces: ``(root, children, files, links)`` for read_children."""
    outside = tmp_path / "outside"
    (outside / "escaped").mkdir(parents=True)
    (outside / "escaped" / "bInterfaceClass").write_text("ff\n")
    root = tmp_path / "root"
    device = root / "sys/devices/usb1/1-2"
    (root / "sys/bus/usb/drivers/usbhid").mkdir(parents=True)
    for name, value in {"1-2:1.0": b"03\n", "1-2:1.1": b"\xff\x00", "1-2:1.2": b"0e\n"}.items():
        (device / name).mkdir(parents=True)
        (device / name / "bInterfaceClass").write_bytes(value)
    os.symlink("../../../../bus/usb/drivers/usbhid", device / "1-2:1.0" / "driver")
    os.symlink("/etc", device / "1-2:1.2" / "driver")
    os.mkfifo(device / "1-2:1.2" / "fifo")
    os.symlink(str(outside / "escaped"), device / "1-2:1.3")  # absolute: re-rooted, so missing
    os.symlink("1-2:1.0", device / "1-2:1.4")  # a link to a sibling: followed inside the root
    os.symlink("../../../../../outside/escaped", device / "1-2:1.5")  # ".." stops at the root
    (device / "1-2:1.6").write_text("a file\n")
    bus = root / "sys/bus/usb/devices"
    bus.mkdir(parents=True)
    os.symlink("../../../devices/usb1/1-2", bus / "1-2")
    children = ["1-2:1.0", "1-2:1.1", "1-2:1.2", "1-2:1.3", "1-2:1.4", "1-2:1.5", "1-2:1.6", "1-2:9.9", "..", "",
                "a\x00b", "x/y"]
    return root, children, ("bInterfaceClass", "fifo", "absent"), ("driver", "bInterfaceClass", "..")


def _children_one_by_one(root, directory, children, files, links, host=None):
    """What ``read_children`` must answer: ``read_attrs`` and ``link_names`` of each child's path
    (on a fresh seam unless one is given), failures compared by path, reason and kind."""
    one_by_one = host or SeamHostFS(root)
    expected = {}
    for child in children:
        path = f"{directory}/{child}"
        values, failures = one_by_one.read_attrs(path, files)
        expected[child] = _comparable_child(values, failures, one_by_one.link_names(path, links))
    return expected


def _comparable_child(values, failures, names):
    return values, {n: (e.host_path, e.reason, e.missing) for n, e in failures.items()}, names


def test_read_children_answers_as_read_attrs_and_link_names_child_by_child(tmp_path, HostFS):
    """Several subdirectories read through one lookup of their parent (a USB device's interfaces):
    each child's files and links exactly as ``read_attrs`` and ``link_names`` of its path answer —
    a child that is a link is followed inside the root only, a FIFO refused, junk an error, a
    file or a missing child gives absent values, odd names never reach ``openat``."""
    root, children, files, links = _interface_tree(tmp_path)
    for directory in ("/sys/devices/usb1/1-2", "/sys/devices/usb1/../usb1/1-2/"):
        found = HostFS(root).read_children(directory, children, files, links)
        expected = _children_one_by_one(root, "/sys/devices/usb1/1-2", children, files, links, HostFS(root))
        assert {child: _comparable_child(*answer) for child, answer in found.items()} == expected
        assert found["1-2:1.0"][0]["bInterfaceClass"] == "03" and found["1-2:1.0"][2]["driver"] == "usbhid"
        assert found["1-2:1.4"][0]["bInterfaceClass"] == "03"
        assert "binary" in found["1-2:1.1"][1]["bInterfaceClass"].reason
        assert "not a regular file" in found["1-2:1.2"][1]["fifo"].reason and found["1-2:1.2"][2]["driver"] == "etc"
        for child in ("1-2:1.3", "1-2:1.5", "1-2:1.6", "1-2:9.9"):
            assert found[child][0]["bInterfaceClass"] is None, child
    assert HostFS(root).read_children("/sys/no/such", ["1-2:1.0"], files, links)["1-2:1.0"][0] == dict.fromkeys(files)


@pytest.mark.parametrize("opened_as", ["real path", "bus link", "read_directory through the link"])
def test_read_children_of_a_directory_the_seam_holds_open_answers_as_its_parts(tmp_path, HostFS, opened_as,
                                                                               monkeypatch):
    """A directory the seam already holds open under the name asked (the device a source just
    read) is taken from its cache without another lookup; the answers are still exactly those of
    ``read_attrs`` and ``link_names`` per child, hostile children included, also once a child
    vanished after the directory was opened, and a second thread still gets its own lookups."""
    root, children, files, links = _interface_tree(tmp_path)
    real, link = "/sys/devices/usb1/1-2", "/sys/bus/usb/devices/1-2"
    host = HostFS(root)
    if opened_as == "real path":
        host.read_attrs(real, ["absent"])
        directory = real
    elif opened_as == "bus link":
        host.read_attrs(link, ["absent"])
        directory = link
    else:
        assert host.read_directory(link, through_link=True).path == real
        directory = real
    lookups = []
    dirfd = hostfs_module.HostFS._dirfd
    monkeypatch.setattr(hostfs_module.HostFS, "_dirfd", lambda self, path: lookups.append(path) or dirfd(self, path))
    # real directories, plain file and link names: nothing to look up but the directory itself
    plain, plain_links = ["1-2:1.0", "1-2:1.1", "1-2:1.2"], ("driver", "bInterfaceClass")
    answer = host.read_children(directory, plain, files, plain_links)
    if opened_as == "real path":  # (what a link leaves cached depends on the resolver)
        assert lookups == []  # the cached descriptor served, as the docstring says
    assert {child: _comparable_child(*found) for child, found in answer.items()} == _children_one_by_one(
        root, directory, plain, files, plain_links)
    found = host.read_children(directory, children, files, links)
    assert {child: _comparable_child(*answer) for child, answer in found.items()} == _children_one_by_one(
        root, directory, children, files, links)
    assert found["1-2:1.0"][0]["bInterfaceClass"] == "03" and found["1-2:1.0"][2]["driver"] == "usbhid"

    (root / "sys/devices/usb1/1-2/1-2:1.0/bInterfaceClass").unlink()  # an interface going away
    (root / "sys/devices/usb1/1-2/1-2:1.0/driver").unlink()
    (root / "sys/devices/usb1/1-2/1-2:1.0").rmdir()
    again = host.read_children(directory, children, files, links)
    assert {child: _comparable_child(*answer) for child, answer in again.items()} == _children_one_by_one(
        root, directory, children, files, links)
    assert again["1-2:1.0"][:2] == (dict.fromkeys(files), {}) and again["1-2:1.0"][2]["driver"] is None

    from_thread = {}
    worker = threading.Thread(target=lambda: from_thread.update(host.read_children(directory, children, files, links)))
    worker.start()
    worker.join()
    assert {child: _comparable_child(*answer) for child, answer in from_thread.items()} == _children_one_by_one(
        root, directory, children, files, links)


def test_read_children_of_an_open_directory_goes_through_a_recorder(tmp_path):
    """A recorder sees every child's files and links even where the directory is already open."""
    root, _, _, _ = _interface_tree(tmp_path)
    seen: list[str] = []
    host = SeamHostFS(root, recorder=seen.append)
    host.read_attrs("/sys/devices/usb1/1-2", ["absent"])
    found = host.read_children("/sys/devices/usb1/1-2", ["1-2:1.0"], ["bInterfaceClass"], ["driver"])
    assert found == {"1-2:1.0": ({"bInterfaceClass": "03"}, {}, {"driver": "usbhid"})}
    assert "/sys/devices/usb1/1-2/1-2:1.0/bInterfaceClass" in seen
    assert "/sys/devices/usb1/1-2/1-2:1.0/driver" in seen


def test_read_children_goes_through_a_subclass_s_methods(tree):
    """A seam that overrides a read or a link lookup (a recorder, a tracer) sees every child."""
    seen = []

    class Watching(SeamHostFS):
        def read_attrs(self, directory, names):
            seen.append(("read_attrs", directory))
            return super().read_attrs(directory, names)

        def link_names(self, directory, names):
            seen.append(("link_names", directory))
            return super().link_names(directory, names)

    found = Watching(tree).read_children("/sys/devices/pci0000:00", ["0000:00:02.0"], ["vendor"], ["driver"])
    assert found == {"0000:00:02.0": ({"vendor": "0x8086"}, {}, {"driver": "i915"})}
    assert seen == [("read_attrs", "/sys/devices/pci0000:00/0000:00:02.0"),
                    ("link_names", "/sys/devices/pci0000:00/0000:00:02.0")]


def test_read_linked_children_answers_as_read_attrs_child_by_child(tmp_path, HostFS):
    """``directory/child/within`` for children that are links (``/sys/bus/cpu/devices/cpuN``):
    each exactly as ``read_attrs`` of that path answers — links followed inside the root only
    (an absolute target re-rooted, ``..`` stopped at the root), a FIFO refused, junk an error, a
    missing ``within`` (an offline CPU) or child absent values, odd names never reach ``openat2``."""
    outside = tmp_path / "outside"
    (outside / "cpu9" / "topology").mkdir(parents=True)
    (outside / "cpu9" / "topology" / "physical_package_id").write_text("7\n")
    root = tmp_path / "root"
    cpus = root / "sys/devices/system/cpu"
    bus = root / "sys/bus/cpu/devices"
    bus.mkdir(parents=True)
    for cpu, (siblings, package) in {"cpu0": (b"0,2\n", b"0\n"), "cpu1": (b"1,3\n", b"\xff\x00"),
                                     "cpu2": (b"0,2\n", b"1\n")}.items():
        (cpus / cpu / "topology").mkdir(parents=True)
        (cpus / cpu / "topology" / "thread_siblings_list").write_bytes(siblings)
        (cpus / cpu / "topology" / "physical_package_id").write_bytes(package)
        os.symlink(f"../../../devices/system/cpu/{cpu}", bus / cpu)
    (cpus / "cpu3").mkdir()  # offline: the kernel removed its topology/
    os.symlink("../../../devices/system/cpu/cpu3", bus / "cpu3")
    os.mkfifo(cpus / "cpu2" / "topology" / "fifo")
    os.symlink("../../../../../../outside/cpu9/topology/physical_package_id", cpus / "cpu2" / "topology" / "leaf")
    os.symlink("/sys/devices/system/cpu/cpu0", bus / "absolute")  # re-rooted: cpu0
    os.symlink(str(outside / "cpu9"), bus / "escape")  # absolute outside: re-rooted, so missing
    os.symlink("../../../../../outside/cpu9", bus / "dotdot")  # ".." stops at the root: missing
    os.symlink("../../../devices/system/cpu/gone", bus / "dangling")
    (cpus / "cpu4" / "topology").mkdir(parents=True)  # a plain directory, no link
    (cpus / "cpu4" / "topology" / "physical_package_id").write_text("3\n")
    children = ["cpu0", "cpu1", "cpu2", "cpu3", "absolute", "escape", "dotdot", "dangling", "missing", "..", "",
                "a\x00b", "x/y"]
    files = ("thread_siblings_list", "physical_package_id", "fifo", "leaf")

    def comparable(values, failures):
        return values, {n: (e.host_path, e.reason, e.missing) for n, e in failures.items()}

    for directory in ("/sys/bus/cpu/devices", "/sys/bus/cpu/../cpu/devices/"):
        found = HostFS(root).read_linked_children(directory, children, "topology", files)
        one_by_one = HostFS(root)
        expected = {child: comparable(*one_by_one.read_attrs(f"/sys/bus/cpu/devices/{child}/topology", files))
                    for child in children}
        assert {child: comparable(*answer) for child, answer in found.items()} == expected
        assert found["cpu0"][0] == {"thread_siblings_list": "0,2", "physical_package_id": "0", "fifo": None,
                                    "leaf": None}
        assert found["absolute"][0]["physical_package_id"] == "0"
        assert "binary" in found["cpu1"][1]["physical_package_id"].reason
        assert "not a regular file" in found["cpu2"][1]["fifo"].reason and found["cpu2"][0]["leaf"] is None
        for child in ("cpu3", "escape", "dotdot", "dangling", "missing"):
            assert found[child] == (dict.fromkeys(files), {}), child
    plain = HostFS(root).read_linked_children("/sys/devices/system/cpu", ["cpu4"], "topology", ["physical_package_id"])
    assert plain == {"cpu4": ({"physical_package_id": "3"}, {})}


def test_read_linked_children_reads_every_kind_of_file_as_read_attrs(tmp_path, HostFS, monkeypatch):
    """The one-loop read of each child's files (kernel resolver) answers as ``read_attrs`` for
    every kind of leaf: plain text, empty, 64 KiB or more, not UTF-8, a directory, a FIFO, a
    device node, a socket, a name too long to open, a link inside and one out of the root.  A
    plain child never goes through ``read_attrs``, and every file it opens is ``fstat``-ed
    before any read (what refuses FIFOs and device nodes where no listing gave the type)."""
    import socket

    root = tmp_path / "root"
    bus = root / "sys/bus/cpu/devices"
    bus.mkdir(parents=True)
    (tmp_path / "secret").write_text("outside\n")
    for n in range(3):
        topo = root / f"sys/devices/system/cpu/cpu{n}/topology"
        topo.mkdir(parents=True)
        os.symlink(f"../../../devices/system/cpu/cpu{n}", bus / f"cpu{n}")
        (topo / "thread_siblings_list").write_text(f"{n},{n + 64}\n")
        (topo / "physical_package_id").write_text("0\n")
    topo = root / "sys/devices/system/cpu/cpu1/topology"
    (topo / "empty").write_bytes(b"")
    (topo / "big").write_bytes(b"1" * (hostfs_module.MAX_ATTR_BYTES + 100))
    (topo / "latin1").write_bytes(b"caf\xe9\n")
    (topo / "dir").mkdir()
    os.mkfifo(topo / "fifo")
    os.symlink("physical_package_id", topo / "leaf")
    os.symlink("../../../../../../../secret", topo / "escape")
    listener = socket.socket(socket.AF_UNIX)
    try:
        listener.bind(str(topo / "sock"))
    except OSError:
        pass  # path too long for a socket address: the other kinds still run
    try:
        os.mknod(topo / "zero", 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # /dev/zero's numbers
    except PermissionError:
        pass
    files = ["thread_siblings_list", "physical_package_id", "empty", "big", "latin1", "dir", "fifo", "sock",
             "zero", "leaf", "escape", "n" * 300, "absent"]
    (bus / "notdir").write_text("a file\n")  # cpuN/topology below a file: ENOTDIR
    os.symlink("loop", bus / "loop")  # ELOOP: the kernel's answer is no "absent"
    children = ["cpu0", "cpu1", "cpu2", "cpu9", "notdir", "loop"]

    def comparable(values, failures):
        return values, {n: (e.host_path, e.reason, e.missing) for n, e in failures.items()}

    host = HostFS(root)
    answered_by_read_attrs: list[str] = []
    read_attrs = host.read_attrs

    def watched(directory, names):
        answered_by_read_attrs.append(directory)
        return read_attrs(directory, names)

    host.read_attrs = watched
    unchecked: dict[int, str] = {}  # descriptor of a file opened -> its name, until it is fstat-ed
    opened: list[str] = []
    real_open, real_fstat, real_read = os.open, os.fstat, os.read

    def counting_open(path, flags, mode=0o777, *, dir_fd=None):
        fd = real_open(path, flags, mode, dir_fd=dir_fd)
        if dir_fd is not None and not flags & os.O_DIRECTORY:
            opened.append(path)
            unchecked[fd] = path
        return fd

    def counting_fstat(fd):
        unchecked.pop(fd, None)
        return real_fstat(fd)

    def checked_read(fd, size):
        assert fd not in unchecked, f"{unchecked[fd]} read before any fstat"
        return real_read(fd, size)

    monkeypatch.setattr(os, "open", counting_open)
    monkeypatch.setattr(os, "fstat", counting_fstat)
    monkeypatch.setattr(os, "read", checked_read)
    try:
        found = host.read_linked_children("/sys/bus/cpu/devices", children, "topology", files)
    finally:
        monkeypatch.undo()
        listener.close()
    expected = {child: comparable(*HostFS(root).read_attrs(f"/sys/bus/cpu/devices/{child}/topology", files))
                for child in children}
    assert {child: comparable(*answer) for child, answer in found.items()} == expected
    values, failures = found["cpu1"]
    assert values["thread_siblings_list"] == "1,65" and values["empty"] == "" and values["leaf"] == "0"
    assert values["big"] == "1" * hostfs_module.MAX_ATTR_BYTES and values["absent"] is None
    assert values["escape"] is None  # the link's target re-rooted: not there
    assert "not UTF-8" in failures["latin1"].reason and "directory" in failures["dir"].reason
    assert hostfs_module._NOT_REGULAR == failures["fifo"].reason
    assert not failures["n" * 300].missing
    if "zero" in failures:
        assert failures["zero"].reason == hostfs_module._NOT_REGULAR
    assert found["cpu9"] == found["notdir"] == (dict.fromkeys(files), {})
    if host._kernel_resolve:
        # the one-loop path: a child the kernel finds absent (ENOENT, ENOTDIR) is answered "every
        # file absent" without read_attrs; only the loop goes through it, to say what it is
        assert answered_by_read_attrs == ["/sys/bus/cpu/devices/loop/topology"]
        assert {"thread_siblings_list", "physical_package_id", "empty", "big"} <= set(opened)


@pytest.mark.skipif(not hostfs_module._openat2_available(), reason="this kernel has no openat2")
def test_read_linked_children_retries_an_openat2_a_rename_raced(tmp_path, monkeypatch):
    """A child's ``openat2`` failing with EAGAIN (a rename raced the lookup through ``..``) is
    retried, not read as a missing topology (which dropped the SMT label for a pass)."""
    import ctypes

    (tmp_path / "sys/devices/system/cpu/cpu0/topology").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/cpu0/topology/core_id").write_text("0\n")
    (tmp_path / "sys/bus/cpu/devices").mkdir(parents=True)
    os.symlink("../../../devices/system/cpu/cpu0", tmp_path / "sys/bus/cpu/devices/cpu0")
    real = hostfs_module._SYSCALL
    raced: list[int] = []

    def racing(*args):
        if len(raced) < 3:
            raced.append(1)
            ctypes.set_errno(errno.EAGAIN)
            return -1
        return real(*args)

    host = SeamHostFS(tmp_path, kernel_resolve=True)
    host.read_attrs = lambda *args: pytest.fail("retried through read_attrs, not openat2")
    monkeypatch.setattr(hostfs_module, "_SYSCALL", racing)
    found = host.read_linked_children("/sys/bus/cpu/devices", ["cpu0"], "topology", ["core_id"])
    assert found == {"cpu0": ({"core_id": "0"}, {})} and len(raced) == 3


def test_read_linked_children_goes_through_a_subclass_s_read_attrs(tmp_path):
    """A seam that overrides a read (a recorder, a tracer) sees every child's directory."""
    (tmp_path / "sys/devices/system/cpu/cpu0/topology").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/cpu0/topology/core_id").write_text("0\n")
    (tmp_path / "sys/bus/cpu/devices").mkdir(parents=True)
    os.symlink("../../../devices/system/cpu/cpu0", tmp_path / "sys/bus/cpu/devices/cpu0")
    seen = []

    class Watching(SeamHostFS):
        def read_attrs(self, directory, names):
            seen.append(directory)
            return super().read_attrs(directory, names)

    found = Watching(tmp_path).read_linked_children("/sys/bus/cpu/devices", ["cpu0"], "topology", ["core_id"])
    assert found == {"cpu0": ({"core_id": "0"}, {})}
    assert seen == ["/sys/bus/cpu/devices/cpu0/topology"]


def _device_tree(root):
    """A bus of device links as sysfs has them, plus every odd case the inline device-link path
    (``HostFS._device_link``) must hand back to the walk: a target below a bridge read before,
    an absolute target, a ``./`` target, a target that is a link, a file, gone, or outside."""
    devices = root / "sys/devices/pci0000:00"
    bus = root / "sys/bus/pci/devices"
    bus.mkdir(parents=True)
    (root / "sys/bus/pci/drivers/nvme").mkdir(parents=True)
    for n, parent in [(0, ""), (1, ""), (2, "0000:00:01.0/"), (3, "0000:00:01.0/0000:00:02.0/"), (4, "")]:
        dev = devices / f"{parent}0000:00:0{n}.0"
        dev.mkdir(parents=True)
        (dev / "vendor").write_text(f"0x10{n}e\n")
        os.symlink("../../../bus/pci/drivers/nvme", dev / "driver")
        os.symlink(f"../../../devices/pci0000:00/{parent}0000:00:0{n}.0", bus / f"0000:00:0{n}.0")
    os.symlink("0000:00:00.0", devices / "alias")
    (devices / "afile").write_text("x\n")
    os.symlink("../../../devices/pci0000:00/alias", bus / "to-alias")
    os.symlink("../../../devices/pci0000:00/afile", bus / "to-file")
    os.symlink("../../../devices/pci0000:00/gone", bus / "dangling")
    os.symlink("/sys/devices/pci0000:00/0000:00:04.0", bus / "absolute")
    os.symlink("./../../../devices/pci0000:00/0000:00:01.0", bus / "dot-first")
    os.symlink("../../../../../../../../etc", bus / "above-root")
    (bus / "real-dir").mkdir()
    (bus / "real-dir/vendor").write_text("0xdead\n")
    return [p.name for p in sorted(bus.iterdir())] * 2


def test_read_directory_in_one_pass_answers_as_its_parts(tmp_path, HostFS):
    """Devices read one after another through one seam (the inline device-link path is taken
    from the second device on) answer exactly as a fresh seam's resolve/listdir/read_attrs/link_names."""
    root = tmp_path / "root"
    entries = _device_tree(root)
    host = HostFS(root)
    for _ in range(2):
        host.clear_cache()
        for entry in entries:
            path = f"/sys/bus/pci/devices/{entry}"
            found = host.read_directory(path, ["vendor"], optional=["absent"], links=["driver"])
            parts = HostFS(root)
            real = parts.resolve(path)
            assert found.path == real == host.resolve(path), entry
            try:
                names = frozenset(parts.listdir(real))
            except HostFileError:
                names = None
            assert found.names == names, entry
            if names:
                assert (found.values, found.failures) == parts.read_attrs(real, ["vendor"]), entry
                assert found.links == parts.link_names(real, [n for n in ["driver"] if n in names]), entry
    assert host.resolve("/sys/bus/pci/devices/0000:00:03.0") == \
        "/sys/devices/pci0000:00/0000:00:01.0/0000:00:02.0/0000:00:03.0"
    assert host.read_directory("/sys/bus/pci/devices/to-alias").path == "/sys/devices/pci0000:00/0000:00:00.0"
    assert host.read_directory("/sys/bus/pci/devices/above-root").path == "/etc"


def _directory_answer(host, path, files, **kwargs):
    """read_directory's answer, comparable: the DirectoryRead's fields, or the error it raised."""
    try:
        return _comparable(host.read_directory(path, files, **kwargs))
    except HostFileError as exc:
        return _comparable(exc)


def _comparable(found):
    if isinstance(found, HostFileError):
        return ("error", found.host_path, found.reason)
    return (found.path, found.names, found.values,
            {n: (e.host_path, e.reason) for n, e in found.failures.items()}, found.links,
            None if found.listing_error is None else found.listing_error.reason)


@pytest.mark.parametrize("through_link", [False, True])
def test_read_directories_answer_as_read_directory_name_by_name(tmp_path, HostFS, through_link):
    """A bus read in one go answers, name by name and in order, what a fresh seam's
    read_directory answers for each (an error it raises comes back as the name's answer): device
    links, odd targets, a link loop, odd names, junk, a FIFO, all under every resolver."""
    root = tmp_path / "root"
    entries = _device_tree(root)
    dev = root / "sys/devices/pci0000:00/0000:00:01.0/0000:00:02.0"
    (dev / "junk").write_bytes(b"\xff\xfe\x00\x01")
    os.mkfifo(dev / "fifo")
    bus = root / "sys/bus/pci/devices"
    os.symlink("loop", bus / "loop")
    names = [*entries, "loop", "nothing", "", ".", "..", "a/b", "a\x00b", "0000:00:02.0"]
    kwargs = {"optional": ["absent", "vendor"], "links": ["driver", "vendor", "missing"], "through_link": through_link}
    host = HostFS(root)
    answers = [(name, _comparable(found)) for name, found in host.read_directories(
        "/sys/bus/pci/devices", names, ["vendor", "junk", "fifo", "absent", ""], **kwargs)]
    assert [name for name, _ in answers] == names
    for name, answer in answers:
        assert answer == _directory_answer(HostFS(root), f"/sys/bus/pci/devices/{name}",
                                           ["vendor", "junk", "fifo", "absent", ""], **kwargs), name
    by_name = dict(answers)
    assert by_name["0000:00:02.0"][2]["vendor"] == "0x102e"
    assert set(by_name["0000:00:02.0"][3]) >= {"junk", "fifo"}
    assert by_name["loop"][0] == "error"


def test_read_directories_is_lazy_and_survives_seam_use_between_answers(tmp_path, HostFS):
    """A caller may use the seam between two answers (usb reads a device's interfaces before
    the next device): the answers stay what read_directory gives, the descriptors bounded."""
    root = tmp_path / "root"
    entries = _device_tree(root)
    host = HostFS(root)
    seen = []
    for name, found in host.read_directories("/sys/bus/pci/devices", entries, ["vendor"], links=["driver"]):
        host.read_children("/sys/devices/pci0000:00", ["0000:00:00.0", "0000:00:01.0"], ["vendor"], ["driver"])
        host.read_attrs("/sys/devices/pci0000:00/0000:00:04.0", ["vendor"])
        seen.append(name)
        expected = _directory_answer(HostFS(root), f"/sys/bus/pci/devices/{name}", ["vendor"], links=["driver"])
        assert _comparable(found) == expected, name
    assert seen == entries
    host.close()


@pytest.mark.parametrize("kernel_resolve", [False, True] if hostfs_module._openat2_available() else [False])
def test_a_listed_regular_file_that_cannot_be_opened_is_answered_as_read_attrs_answers(tmp_path, kernel_resolve):
    """The listed-regular read's odd cases: a file gone between listing and open is absent, one
    replaced by a link is read through the link inside the root (as read_attrs reads it)."""
    root = tmp_path / "root"
    dev = root / "sys/devices/platform/dev0"
    dev.mkdir(parents=True)
    for name in ("vendor", "gone", "relinked"):
        (dev / name).write_text(f"{name}\n")
    (root / "etc").mkdir()
    (root / "etc/target").write_text("inside\n")
    host = hostfs_module.HostFS(root, kernel_resolve=kernel_resolve)
    assert host._walks_directories  # the one-descriptor path, whose listed-regular read this tests
    real_scandir = os.scandir
    listed = []

    def scandir_then_change(fd):
        listing = list(real_scandir(fd))  # the listing as it was; then the tree changes
        listed.append([entry.name for entry in listing])
        (dev / "gone").unlink()
        (dev / "relinked").unlink()
        os.symlink("/etc/target", dev / "relinked")
        return _ListedEntries(listing)

    hostfs_module.os.scandir, saved = scandir_then_change, hostfs_module.os.scandir
    try:
        found = host.read_directory("/sys/devices/platform/dev0", ["vendor", "gone", "relinked"])
    finally:
        hostfs_module.os.scandir = saved
    assert listed and "gone" in listed[0]
    assert found.values == {"vendor": "vendor", "gone": None, "relinked": "inside"}
    assert found.values == hostfs_module.HostFS(root).read_attrs("/sys/devices/platform/dev0",
                                                                 ["vendor", "gone", "relinked"])[0]


class _ListedEntries(list):
    """A scandir listing taken earlier, usable as ``with os.scandir(fd) as listing``."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_descriptors_do_not_leak_over_passes_with_device_churn(tmp_path, HostFS):
    """Many passes while devices come, go, and turn from links into directories and back: open
    descriptors stay bounded during the passes and all close with the seam."""
    import random

    root = tmp_path / "root"
    entries = sorted(set(_device_tree(root)))
    bus = root / "sys/bus/pci/devices"
    rng = random.Random(13)
    gc.collect()  # seams of earlier tests close their descriptors when collected
    before = len(os.listdir("/proc/self/fd"))
    host = HostFS(root)
    for _ in range(60):
        host.clear_cache()
        entry = rng.choice(entries)
        link = bus / entry
        if link.is_symlink():
            target = os.readlink(link)
            link.unlink()
            if rng.random() < 0.5:
                link.mkdir()
            else:
                os.symlink(target.replace("0000:00:0", "0000:00:1"), link)  # moved: dangling now
        elif link.is_dir():
            for child in link.iterdir():
                child.unlink()
            link.rmdir()
            os.symlink("../../../devices/pci0000:00/0000:00:00.0", link)
        for name in entries:
            path = f"/sys/bus/pci/devices/{name}"
            host.listdir("/sys/bus/pci/devices")
            host.read_directory(path, ["vendor"], links=["driver"])
            host.read_attrs(path, ["vendor"])
            host.link_names(path, ["driver"])
            host.read_children("/sys/bus/pci/devices", [name], ["vendor"], ["driver"])
            host.is_dir(path)
            host.resolve(path)
        assert len(os.listdir("/proc/self/fd")) <= before + hostfs_module._MAX_DIR_FDS + 1
    host.clear_cache()
    host.close()
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.skipif(not hostfs_module._openat2_available(), reason="this kernel has no openat2")
def test_a_link_turning_into_a_directory_mid_lookup_leaks_no_descriptor(tmp_path, monkeypatch):
    """The race ``HostFS._dirfd`` can meet under ``openat2``: the entry is a link when its
    parent's descriptor says so, and a directory by the time the kernel resolves it (a device
    re-registered in between). The descriptor kept then must be the one used, never overwritten."""
    root = tmp_path / "root"
    (root / "sys/devices/usb1/1-2").mkdir(parents=True)
    (root / "sys/bus/usb/devices").mkdir(parents=True)
    link = root / "sys/bus/usb/devices/1-2"
    os.symlink("../../../devices/usb1/1-2", link)
    real_openat2 = hostfs_module._openat2

    def racing(dirfd, path, flags):
        if path == "sys/bus/usb/devices/1-2" and link.is_symlink():
            link.unlink()
            link.mkdir()
            (link / "idVendor").write_text("1a6e\n")
        return real_openat2(dirfd, path, flags)

    monkeypatch.setattr(hostfs_module, "_openat2", racing)
    gc.collect()  # seams of earlier tests close their descriptors when collected
    before = len(os.listdir("/proc/self/fd"))
    host = ResolversOnly(root, kernel_resolve=True)
    assert host.listdir("/sys/bus/usb/devices") == ["1-2"]
    assert host.read_attrs("/sys/bus/usb/devices/1-2", ["idVendor"]) == ({"idVendor": "1a6e"}, {})
    host.clear_cache()
    host.close()
    assert len(os.listdir("/proc/self/fd")) == before
