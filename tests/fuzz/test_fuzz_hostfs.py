"""Fuzz the HostFS seam itself against the kernel: arbitrary link webs (relative, absolute,
``..``-heavy, loops, FIFOs) and arbitrary query paths. Every answer the seam gives — bytes
read, names listed, kinds, link targets, absent or refused — must be the one ``openat2`` with
``RESOLVE_IN_ROOT`` gives (``tests/kernel_oracle.py``); nothing outside the root is ever read;
every failure is a ``HostFileError``; and a directory's files read together are what reading
each alone gives."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.hostfs import HostFileError, HostFS
from tests import kernel_oracle
from tests.fuzz.hosttree import build, fuzz
from tests.test_hostfs import _kernel, _seam

SECRET = b"outside-the-host-root\n"
NAMES = ["a", "b", "sys", "link", "loop", "f"]
SEGMENTS = [*NAMES, "..", ".", "", "outside", "secret"]
SEGMENT_PATH = st.lists(st.sampled_from(SEGMENTS), max_size=8).map("/".join)
#: mostly names that exist in the tree, so links lead somewhere and ".." decides where
RELATIVE = st.lists(st.sampled_from([*NAMES, "..", "."]), min_size=1, max_size=5).map("/".join)
TARGET = st.one_of(
    RELATIVE,
    RELATIVE.map(lambda p: "/" + p),
    st.tuples(st.integers(1, 4), RELATIVE).map(lambda t: "../" * t[0] + t[1]),
    RELATIVE.map(lambda p: p + "/"),           # a directory required
    RELATIVE.map(lambda p: p + "/."),
    SEGMENT_PATH,
    st.integers(1, 6).map(lambda n: "../" * n + "outside/secret"),
    st.just("{outside}"),                      # the real absolute path of the secret file
)
LINK = st.tuples(st.just("link"), TARGET)
FILE = st.just(("file", b"inside\n"))
NODE = st.one_of(LINK, LINK, FILE, FILE, st.just(("dir",)), st.just(("fifo",)))
TREE = st.dictionaries(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts)),
                       NODE, max_size=12)
CHILDREN = [*NAMES, "secret"]


def queries(tree: dict) -> st.SearchStrategy[list[str]]:
    """Paths through the tree's own entries (a link's, then below it), and arbitrary ones."""
    entries = st.sampled_from(sorted(tree) or ["/"])
    below = st.tuples(entries, st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3)).map(
        lambda t: "/".join([t[0], *t[1]]))
    return st.lists(st.one_of(entries, entries, below, SEGMENT_PATH), min_size=1, max_size=8)


@pytest.mark.skipif(not kernel_oracle.available(), reason="this kernel has no openat2 to judge by")
@fuzz(400)
@given(data=st.data())
def test_hostfs_answers_as_the_kernel_and_never_escapes_root(data):
    tree = data.draw(TREE, label="tree")
    asked = data.draw(queries(tree), label="queries")
    with tempfile.TemporaryDirectory(prefix="nfa-fuzz-") as tmp:
        outside = Path(tmp) / "outside"
        outside.mkdir()
        (outside / "secret").write_bytes(SECRET)
        root = Path(tmp) / "host"
        root.mkdir()
        spec = {p: (("link", n[1].replace("{outside}", str(outside / "secret"))) if n[0] == "link" else n)
                for p, n in tree.items()}
        build(root, spec)
        kernel = kernel_oracle.Kernel(root)
        try:
            for query in asked:
                host = HostFS(root)
                seam = _seam(host, query)
                assert seam[0] != SECRET, f"{query!r} read a file outside the host root"
                assert seam == _kernel(kernel, query), query
                _batch_answers_as_single_reads(root, query)
        finally:
            kernel.close()


def _batch_answers_as_single_reads(root: Path, query: str) -> None:
    """``read_attrs`` of a directory's children = ``read_attr`` of each on a fresh seam; the
    other calls never raise anything but ``HostFileError``."""
    host, single = HostFS(root), HostFS(root)
    base = "/" + "/".join(p for p in query.split("/") if p)
    values, failures = host.read_attrs(query, CHILDREN)
    assert SECRET.decode().strip() not in values.values()
    for name in CHILDREN:
        try:
            expected = single.read_attr(f"{base}/{name}".replace("//", "/"))
        except HostFileError as exc:
            assert name in failures and (failures[name].reason, failures[name].missing) == (exc.reason, exc.missing)
        else:
            assert values[name] == expected and name not in failures
    for ask in (host.resolve, host.link_name, lambda q: host.glob(q.rstrip("/") + "/*"),
                lambda q: host.stat(q, follow=False)):
        try:
            ask(query)
        except HostFileError:
            pass
