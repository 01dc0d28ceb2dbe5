"""Every device id the shipped catalogue names exists in pci.ids / usb.ids (or the vendor
file named for it), and the rule files say beside each id where it comes from.

The ids are checked against ``tests/data/hwdata_ids_excerpt.txt``, written from Debian's
``hwdata``/``usbutils`` files by ``tests/data/make_hwdata_ids_excerpt.py`` (no network in
CI); where those files are installed, the excerpt itself is checked against them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import LABELS_DIR, REPO

EXCERPT = REPO / "tests" / "data" / "hwdata_ids_excerpt.txt"
RULE_DIRS = (LABELS_DIR, REPO / "deploy" / "optional-rules")
_LABEL_ID = re.compile(r"feature\.node\.kubernetes\.io/(pci|usb)-[0-9a-f]{2,4}_([0-9a-f]{4})(?:_([0-9a-f]{4}))?\.")
_SOURCE_COMMENT = re.compile(r"#.*\b(pci\.ids|usb\.ids|google-coral/libedgetpu|hailo-ai/hailort-drivers)\b")


def _rule_files() -> list[Path]:
    return sorted(p for d in RULE_DIRS for p in d.rglob("*.y*ml") if "/vendor/" not in p.as_posix())


def _terms(node):
    """Every matchFeatures term anywhere in a NodeFeatureRule document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "matchFeatures" and isinstance(value, list):
                yield from (t for t in value if isinstance(t, dict))
            yield from _terms(value)
    elif isinstance(node, list):
        for item in node:
            yield from _terms(item)


def catalogue_ids() -> set[tuple[str, str, str | None]]:
    """``(bus, vendor, device or None)`` for every id in our rule and label files (Intel's
    vendor file under labels/vendor/ is theirs, copied unchanged, and not ours to annotate)."""
    ids: set[tuple[str, str, str | None]] = set()
    for path in _rule_files():
        for doc in yaml.safe_load_all(path.read_text()):
            for term in _terms(doc):
                bus = {"pci.device": "pci", "usb.device": "usb"}.get(str(term.get("feature", "")).lower())
                exprs = term.get("matchExpressions") or {}
                if bus is None or "vendor" not in exprs:
                    continue
                vendors = exprs["vendor"].get("value", [])
                devices = (exprs.get("device") or {}).get("value") or [None]
                ids |= {(bus, v, d) for v in vendors for d in devices}
    for path in sorted(LABELS_DIR.rglob("*")):
        if path.is_file() and path.suffix not in (".yaml", ".yml", ".md"):
            for match in _LABEL_ID.finditer(path.read_text()):
                ids.add((match[1], match[2], match[3]))
    return ids


def excerpt_ids() -> dict[tuple[str, str, str | None], str]:
    """``(bus, vendor, device or None) -> source file`` from the committed excerpt."""
    known: dict[tuple[str, str, str | None], str] = {}
    for line in EXCERPT.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        source, ident, _name = line.split("\t")
        bus = source[:3] if source.endswith(".ids") else source.split(":", 1)[0]  # "usb:<vendor source>"
        vendor, _, device = ident.partition(" ")
        known[(bus, vendor, device or None)] = source
    return known


def test_catalogue_names_ids_at_all():
    ids = catalogue_ids()
    assert ("pci", "1ac1", "089a") in ids and ("usb", "03e7", "2485") in ids and ("pci", "10de", None) in ids


@pytest.mark.parametrize("bus, vendor, device", sorted(catalogue_ids(), key=str))
def test_every_catalogue_id_is_a_real_id(bus, vendor, device):
    known = excerpt_ids()
    assert (bus, vendor, None) in known and known[(bus, vendor, None)] == f"{bus}.ids", \
        f"{bus} vendor {vendor} is not in {bus}.ids (tests/data/hwdata_ids_excerpt.txt)"
    if device is not None:
        assert (bus, vendor, device) in known, f"{bus} {vendor}:{device} is in neither {bus}.ids nor a named vendor source"


def test_every_id_line_names_its_source_beside_it():
    missing = []
    for path in _rule_files():
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if re.match(r"\s*(vendor|device):", line) and not _SOURCE_COMMENT.search(line):
                missing.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not missing, "ids without their source beside them:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("bus", ["pci", "usb"])
def test_excerpt_lines_are_verbatim_from_the_installed_ids_file(bus):
    """On a machine with Debian's hwdata/usbutils (not CI), the excerpt must match them."""
    path = Path(f"/usr/share/misc/{bus}.ids")
    if not path.is_file():
        pytest.skip(f"{path} not installed (apt-get install hwdata usbutils); the committed excerpt is used")
    text = path.read_text(encoding="utf-8", errors="replace")
    version = re.search(r"^#\s*Version:\s*(\S+)", text, re.M)
    header = next(line for line in EXCERPT.read_text().splitlines() if line.startswith(f"# {bus}.ids Version:"))
    if version is None or version[1] not in header:
        pytest.skip(f"installed {bus}.ids is another version than the excerpt's ({header})")
    for line in EXCERPT.read_text().splitlines():
        if line.startswith(f"{bus}.ids\t"):
            _source, ident, name = line.split("\t")
            vendor, _, device = ident.partition(" ")
            wanted = f"\t{device}  {name}" if device else f"{vendor}  {name}"
            assert f"\n{wanted}\n" in text, f"{line!r} is not in {path}"
