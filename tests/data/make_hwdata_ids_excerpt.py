#!/usr/bin/env python3
"""Write tests/data/hwdata_ids_excerpt.txt: the pci.ids / usb.ids lines for every device id
the shipped catalogue names, copied verbatim from the system's files.

    python tests/data/make_hwdata_ids_excerpt.py   # needs Debian's hwdata (pci.ids) and usbutils (usb.ids)

Each output line is ``<file>\\t<vendor>[ <device>]\\t<name as the file writes it>``; ids the
files do not carry come from the vendor source named in ``VENDOR_SOURCES`` instead.
The catalogue's ids are read by ``tests/rules/test_catalogue_ids.py:catalogue_ids``.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.rules.test_catalogue_ids import EXCERPT, catalogue_ids  # noqa: E402

ID_FILES = {"pci": Path("/usr/share/misc/pci.ids"), "usb": Path("/usr/share/misc/usb.ids")}
#: ids absent from usb.ids/pci.ids, with the vendor's own file that defines them
VENDOR_SOURCES = {
    ("usb", "1a6e", "089a"): (("google-coral/libedgetpu@3164995622300286ef2bb14d7fdc2792dae045b7:"
                               "debian/edgetpu-accelerator.rules"), "Coral USB Accelerator before firmware load"),
    ("usb", "18d1", "9302"): (("google-coral/libedgetpu@3164995622300286ef2bb14d7fdc2792dae045b7:"
                               "debian/edgetpu-accelerator.rules"), "Coral USB Accelerator after firmware load"),
    ("pci", "1e60", "45c4"): (("hailo-ai/hailort-drivers@45e5fc53c6922fd6985febfc09399653497a2082:"
                               "common/pcie_common.h"), "Hailo-10H (PCI_DEVICE_ID_HAILO_HAILO10H 0x45C4)"),
}


def parse_ids(path: Path) -> tuple[str, dict[tuple[str, str | None], str]]:
    """(version line, {(vendor, device or None): name}) of a pci.ids/usb.ids file's vendor part."""
    version, names, vendor = "", {}, None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("#") and "Version:" in line and not version:
            version = line.split("Version:", 1)[1].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("C "):
            break  # the class lists follow the vendor list
        if not line.startswith("\t"):
            vendor = line[:4].lower()
            names[(vendor, None)] = line[4:].strip()
        elif not line.startswith("\t\t") and vendor:
            names[(vendor, line[1:5].lower())] = line[5:].strip()
    return version, names


def main() -> int:
    out = ["# Excerpt of pci.ids / usb.ids: the ids labels/ and deploy/optional-rules/ name.",
           "# Written by tests/data/make_hwdata_ids_excerpt.py; do not edit by hand."]
    tables = {}
    for bus, path in ID_FILES.items():
        version, names = parse_ids(path)
        tables[bus] = names
        out.append(f"# {path.name} Version: {version} ({path})")
    for bus, vendor, device in sorted(catalogue_ids(), key=lambda i: (i[0], i[1], i[2] or "")):
        for key in ((vendor, None), (vendor, device)) if device else ((vendor, None),):
            name = tables[bus].get(key)
            ident = " ".join(k for k in key if k)
            line = f"{bus}.ids\t{ident}\t{name}" if name else None
            if line is None and (bus, vendor, device) in VENDOR_SOURCES and key[1]:
                source, what = VENDOR_SOURCES[(bus, vendor, device)]
                line = f"{bus}:{source}\t{ident}\t{what}"
            if line is None:
                print(f"{bus} {ident}: in neither {ID_FILES[bus]} nor VENDOR_SOURCES", file=sys.stderr)
                return 1
            if line not in out:
                out.append(line)
    EXCERPT.write_text("\n".join(out) + "\n")
    print(f"wrote {EXCERPT.relative_to(REPO)} ({len(out) - 4} ids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
