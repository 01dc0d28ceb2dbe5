"""Generated host trees for fuzzing: a tree *spec* (host path -> node) and its builder.

A spec maps host-absolute paths to nodes: ``("file", bytes)``, ``("dir",)``,
``("link", target)``, ``("fifo",)`` or ``("missing",)`` (the same as leaving the path out, but it overrides
an earlier fragment when specs are merged).  Strategies here produce
hostile contents (invalid UTF-8, NULs, huge lines, empty files, odd Unicode digits) and
hostile node kinds (directories where files are expected, dangling links, link loops) mixed
with plausible values, so the fuzzers reach both the happy paths and the error paths.

Hypothesis does not reset function-scoped fixtures between examples, so each example builds
its tree in its own :func:`host_tree` temporary directory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from agent.hostfs import MAX_ATTR_BYTES

Spec = Mapping[str, tuple]

FUZZ_SETTINGS = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much,
                           HealthCheck.large_base_example],
    print_blob=True,
)


def fuzz(max_examples: int):
    """The settings every fuzz test uses; only the example count differs.

    ``NFA_FUZZ_SCALE=20`` multiplies every count for a long local campaign; CI runs scale 1.
    """
    scale = max(1, int(os.environ.get("NFA_FUZZ_SCALE", "1") or 1))
    return settings(max_examples=max_examples * scale, **FUZZ_SETTINGS)


# -- building -----------------------------------------------------------------------------

def build(root: Path, spec: Spec) -> None:
    """Create ``spec`` under ``root``; an entry that cannot exist (its parent is a file) is skipped.

    Directories first, then files, then links, each in path order, so the same spec always
    yields the same tree.
    """
    order = {"missing": -1, "dir": 0, "file": 1, "fifo": 1, "link": 2}
    for host_path, node in sorted(spec.items(), key=lambda item: (order[item[1][0]], item[0])):
        if node[0] == "missing":
            continue
        path = root / host_path.lstrip("/")
        try:
            if node[0] == "dir":
                path.mkdir(parents=True, exist_ok=True)
            elif node[0] == "fifo":  # would hang a blocking open(): the seam must refuse it
                path.parent.mkdir(parents=True, exist_ok=True)
                os.mkfifo(path)
            elif node[0] == "file":
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_dir() and not path.is_symlink():
                    continue
                path.write_bytes(node[1])
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                if os.path.lexists(path):
                    continue
                os.symlink(node[1], path)
        except OSError:
            continue  # e.g. a parent of this path is a file in the spec


@contextlib.contextmanager
def host_tree(spec: Spec) -> Iterator[Path]:
    """A fresh temporary host root holding ``spec``, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="nfa-fuzz-") as tmp:
        root = Path(tmp) / "host"
        root.mkdir()
        build(root, spec)
        yield root


def merge(*specs: Spec) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for spec in specs:
        out.update(spec)
    return out


def rebase(spec: Spec, base: str) -> dict[str, tuple]:
    """A spec with relative paths (as :func:`slots` makes them) placed under host dir ``base``."""
    return {f"{base.rstrip('/')}/{path.lstrip('/')}": node for path, node in spec.items()}


# -- contents -----------------------------------------------------------------------------

#: Unicode digits and look-alikes that ``str.isdigit`` accepts but ``int`` may not
ODD_DIGITS = ["\u00b2", "\u0661\u0662", "\u2460", "\uff11", "\u09e7", "\U0001d7ce", "1\u00b2", "\u00b9\u00b2\u00b3"]

JUNK_BYTES = st.sampled_from([
    b"", b"\n", b"   \n", b"\x00", b"\x00\x00\n", b"1\x00", b"\xff\xfe\xfd", b"\xc3(", b"\xed\xa0\x80",
    b"\x80abc\n", b"0x\xff\xff\n", b"\t\r\n\x0b\x0c", b"\x1b[31mred\x1b[0m\n", "é\u200b\n".encode(),
    b"-1\n", b"-0\n", b"+5\n", b"0x\n", b"00000000000000000000000000001\n", b"99999999999999999999999\n",
])


def huge(unit: bytes = b"A") -> st.SearchStrategy[bytes]:
    """A line longer than the seam reads (or just under), with and without a newline."""
    sizes = st.sampled_from([MAX_ATTR_BYTES - 1, MAX_ATTR_BYTES, MAX_ATTR_BYTES + 7, 3 * MAX_ATTR_BYTES])
    return st.builds(lambda n, nl: (unit * n)[:n] + (b"\n" if nl else b""), sizes, st.booleans())


def text_bytes(max_size: int = 40) -> st.SearchStrategy[bytes]:
    return st.text(max_size=max_size).map(lambda s: s.encode("utf-8", "surrogatepass"))


def value_bytes(valid: list[str] | st.SearchStrategy[str], *, odd: bool = True) -> st.SearchStrategy[bytes]:
    """Contents for one attribute file: mostly plausible values, often junk."""
    good = valid if isinstance(valid, st.SearchStrategy) else st.sampled_from(valid)
    plausible = st.builds(lambda v, end: v.encode() + end, good, st.sampled_from([b"\n", b"", b"\n\n", b" \n"]))
    options = [plausible, plausible, JUNK_BYTES, st.binary(max_size=24), text_bytes()]
    if odd:
        options.append(st.sampled_from(ODD_DIGITS).map(lambda s: s.encode() + b"\n"))
    return st.one_of(*options)


def slot(path: str, contents: st.SearchStrategy[bytes], *, weight_file: int = 6) -> st.SearchStrategy[dict]:
    """One expected file at ``path``: usually a file, sometimes missing or the wrong kind of node."""
    name = os.path.basename(path)
    kinds = st.one_of(
        *([contents.map(lambda b: {path: ("file", b)})] * weight_file),
        st.just({path: ("missing",)}),
        st.just({path: ("dir",)}),                               # a directory where a file belongs
        st.just({path: ("fifo",)}),                              # a named pipe (no writer)
        st.just({path: ("link", "/does/not/exist")}),            # dangling absolute link
        st.just({path: ("link", name)}),                         # link to itself (loop)
        st.just({path: ("link", name + ".b"), path + ".b": ("link", name)}),  # two-link loop
        huge().map(lambda b: {path: ("file", b)}),
    )
    return kinds


def slots(paths_and_contents: Mapping[str, st.SearchStrategy[bytes]]) -> st.SearchStrategy[dict]:
    """Several slots merged into one spec fragment.

    Build these once at module level (paths relative, placed with :func:`rebase`): creating
    strategies inside a composite on every draw costs hypothesis more than the test itself.
    """
    return st.tuples(*(slot(p, c) for p, c in paths_and_contents.items())).map(lambda parts: merge(*parts))


def hex_id(digits: int, *, prefixed: bool, wrong: bool = False) -> st.SearchStrategy[str]:
    """Hex IDs of the right length (``wrong``: of wrong lengths), with and without ``0x``."""
    def render(n: int, width: int, prefix: str, upper: bool) -> str:
        text = format(n, f"0{width}x")[-width:] if width else ""
        return prefix + (text.upper() if upper else text)

    return st.builds(
        render,
        st.integers(0, 16 ** (digits + 1)),
        st.sampled_from([digits - 1, digits + 1, 0] if wrong else [digits]),
        st.sampled_from((["0x", "0x", "0X"] + ([""] if wrong else [])) if prefixed else ([""] + (["0x"] if wrong else []))),
        st.booleans(),
    )


def clean_files(values: Mapping[str, st.SearchStrategy[str]]) -> st.SearchStrategy[dict]:
    """Every file present with a plausible value and the kernel's trailing newline."""
    return st.fixed_dictionaries({p: v.map(lambda s: ("file", s.encode() + b"\n")) for p, v in values.items()})


def attribute_files(values: Mapping[str, st.SearchStrategy[str]],
                    wrong: Mapping[str, st.SearchStrategy[str]] | None = None) -> st.SearchStrategy[dict]:
    """A device directory's files: all clean, clean with one hostile file, or all hostile.

    Pure chaos almost never gets past a device's mandatory IDs, so the clean and
    one-bad-file shapes are what drive the fuzzers into label building.
    """
    wrong = wrong or {}
    hostile = {p: st.one_of(v, wrong[p]) if p in wrong else v for p, v in values.items()}
    clean = clean_files(values)
    one_bad = st.one_of(*(slot(p, value_bytes(v)) for p, v in hostile.items()))
    chaos = slots({p: value_bytes(v) for p, v in hostile.items()})
    return st.one_of(clean, st.tuples(clean, one_bad).map(lambda t: merge(*t)), chaos)
