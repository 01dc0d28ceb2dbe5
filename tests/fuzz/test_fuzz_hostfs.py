"""Fuzz the HostFS seam itself: arbitrary link webs (relative, absolute, ``..``-heavy, loops)
and arbitrary query paths must never reach outside the host root, and every failure must be
a ``HostFileError`` (never another exception type)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import agent.hostfs as hostfs_module
from agent.hostfs import HostFileError, HostFS
from tests.fuzz.hosttree import build, fuzz

SECRET = b"outside-the-host-root\n"
SEGMENTS = ["a", "b", "sys", "link", "loop", "..", ".", "", "outside", "secret", "f"]
SEGMENT_PATH = st.lists(st.sampled_from(SEGMENTS), max_size=8).map("/".join)
TARGET = st.one_of(
    SEGMENT_PATH,
    SEGMENT_PATH.map(lambda p: "/" + p),
    st.integers(1, 6).map(lambda n: "../" * n + "outside/secret"),
    st.just("{outside}"),                      # the real absolute path of the secret file
)
NODE = st.one_of(st.tuples(st.just("link"), TARGET), st.just(("dir",)), st.just(("file", b"inside\n")))
TREE = st.dictionaries(st.lists(st.sampled_from(["a", "b", "sys", "link", "loop", "f"]), min_size=1, max_size=4)
                       .map(lambda parts: "/" + "/".join(parts)), NODE, max_size=10)


@fuzz(400)
@given(tree=TREE, queries=st.lists(SEGMENT_PATH, min_size=1, max_size=6))
def test_hostfs_never_escapes_root(tree, queries):
    with tempfile.TemporaryDirectory(prefix="nfa-fuzz-") as tmp:
        outside = Path(tmp) / "outside"
        outside.mkdir()
        (outside / "secret").write_bytes(SECRET)
        root = Path(tmp) / "host"
        root.mkdir()
        spec = {p: (("link", n[1].replace("{outside}", str(outside / "secret"))) if n[0] == "link" else n)
                for p, n in tree.items()}
        build(root, spec)
        # each resolver with and without the link walk over open directories that comes first
        hosts = [HostFS(root, kernel_resolve=False), WithoutLinkWalk(root, kernel_resolve=False)]
        if hostfs_module._openat2_available():
            hosts += [HostFS(root, kernel_resolve=True), WithoutLinkWalk(root, kernel_resolve=True)]
        for query in queries:
            outcomes = []
            for host in hosts:
                outcomes.append(_probe(host, root, query))
            # the kernel's confinement (openat2 RESOLVE_IN_ROOT), the Python walk and the link
            # walk over open directories agree
            assert all(o == outcomes[0] for o in outcomes), (query, outcomes)


class WithoutLinkWalk(HostFS):
    """The seam with only the kernel's or the Python resolver (no :meth:`HostFS._canonical`)."""

    _walk_links = False


def _probe(host: HostFS, root: Path, query: str) -> tuple:
    try:
        data = host.read_bytes(query)
    except HostFileError:
        data = None
    assert data != SECRET, f"{query!r} read a file outside the host root"
    try:
        real = os.path.realpath(host.real_path(query))
        assert real == str(root) or real.startswith(str(root) + os.sep) or not os.path.exists(real), real
        resolved = host.resolve(query)
        assert resolved.startswith("/")
        listing = host.listdir(query)
    except HostFileError:
        resolved = listing = None
    kinds = tuple(check(query) for check in (host.exists, host.is_dir, host.is_file, host.is_link, host.readlink,
                                             host.link_name))  # total: never raises
    try:
        host.glob(query.rstrip("/") + "/*")
    except HostFileError:
        pass
    try:
        found = host.read_directory(query, ["f", "secret", "link"], optional=["a", "b"], links=["link", "loop"])
        assert SECRET not in [v.encode() + b"\n" for v in found.values.values() if v is not None]
        # what was read; not whether a file that could not be read was missing or an error (as
        # read_bytes above: the Python walk resolves a dangling "b/.." lexically, the kernel not)
        directory = (found.path, found.names, {n: v for n, v in found.values.items() if v is not None},
                     found.links, found.listing_error is None)
    except HostFileError:
        directory = None
    # several subdirectories through one lookup of their parent: what read_attrs and link_names
    # of each child answer (a fresh seam, so neither answer reuses the other's descriptors)
    children = ["a", "b", "sys", "link", "loop", "f"]
    try:
        batch = host.read_children(query, children, ["f", "secret"], ["link", "loop"])
        batch = {child: ({n: v for n, v in values.items() if v is not None}, links)
                 for child, (values, _failures, links) in batch.items()}
        assert all(SECRET not in [v.encode() + b"\n" for v in values.values()] for values, _ in batch.values())
    except HostFileError:
        batch = None
    single = type(host)(root, kernel_resolve=host._kernel_resolve)
    base = single._normalise(query).rstrip("/")
    try:
        expected = {}
        for child in children:
            values, _failures = single.read_attrs(f"{base}/{child}", ["f", "secret"])
            expected[child] = ({n: v for n, v in values.items() if v is not None},
                               single.link_names(f"{base}/{child}", ["link", "loop"]))
    except HostFileError:
        expected = None
    assert batch == expected, (query, batch, expected)
    # several device directories in one go: what a fresh seam's read_directory answers per child
    def directory_answer(found):
        if isinstance(found, HostFileError):
            return None
        assert SECRET not in [v.encode() + b"\n" for v in found.values.values() if v is not None]
        return (found.path, found.names, {n: v for n, v in found.values.items() if v is not None}, found.links,
                found.listing_error is None)

    directories = [(child, directory_answer(found)) for child, found in host.read_directories(
        query, children, ["f", "secret"], optional=["a"], links=["link", "loop"])]
    expected_directories = []
    for child in children:
        try:
            found = single.read_directory(f"{base}/{child}", ["f", "secret"], optional=["a"], links=["link", "loop"])
        except HostFileError as exc:
            found = exc
        expected_directories.append((child, directory_answer(found)))
    assert directories == expected_directories, (query, directories, expected_directories)
    return data, resolved, listing, kinds, directory, batch, directories
