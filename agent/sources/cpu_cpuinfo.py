"""Read ``/proc/cpuinfo`` in every layout the kernel prints, and tell the architecture from it.

Each architecture's kernel writes its own layout (``show_cpuinfo``/``c_show`` in
``arch/*/kernel``): x86, arm64, riscv64 and ppc64 print one block per processor (ppc64 adds a
machine block after them); 32-bit ARM kernels before 3.8 and arm64 kernels before 4.0 print one
``processor`` line per CPU and *then* one shared block with ``Features`` and the MIDR fields;
s390x prints a header block (``vendor_id``, ``features``, one ``processor N: ...`` line per CPU)
and, since 4.7, a block per CPU with ``machine``/``identification`` lines; loongarch prints a
``system type`` line first.  The architecture is told from the text, not from the machine the
agent runs on, so a recording from any host replays exactly.  Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

#: the architectures this module recognises (``""`` = a layout it does not know)
ARCHES = ("x86", "arm64", "arm", "s390x", "ppc64", "riscv64", "loongarch64")

#: hwcap names only a 32-bit ARM kernel (or an arm64 kernel answering a 32-bit reader) prints
_ARM32_ONLY = frozenset({"half", "thumb", "swp", "fastmult", "vfp", "edsp", "neon", "vfpv3", "vfpv4", "tls"})


@dataclass(frozen=True)
class CpuInfoBlock:
    """What the cpu source needs from ``/proc/cpuinfo``.

    ``fields`` is the first processor's block plus the keys of any block that belongs to no
    processor (header and trailer blocks), first value wins; ``lines`` keeps every key/value
    line of the file in order, for s390x whose facts NFD collects across all of them.
    """

    fields: Mapping[str, str] = field(default_factory=dict)
    lines: tuple[tuple[str, str], ...] = ()

    # both computed once per block (a pass asks for them five times; the flags line of a big
    # x86 host is some 200 names); ``fields`` never changes after the block is made
    @cached_property
    def arch(self) -> str:
        """One of :data:`ARCHES`, or ``""`` when the layout is none of them."""
        return cpuinfo_arch(self.fields)

    @cached_property
    def raw_flags(self) -> list[str]:
        """The kernel's feature names for this architecture (x86 ``flags``, hwcaps elsewhere);
        one list shared by every caller, which only read it."""
        arch = self.arch
        key = {"x86": "flags", "arm64": "Features", "arm": "Features", "s390x": "features"}.get(arch)
        return (self.fields.get(key, "") if key else "").split()


def cpuinfo_arch(fields: Mapping[str, str]) -> str:
    """The architecture whose kernel prints these keys (see the module docstring)."""
    vendor = fields.get("vendor_id", "")
    if vendor.startswith("IBM/S390") or "# processors" in fields or "bogomips per cpu" in fields:
        return "s390x"
    if "flags" in fields or "vendor_id" in fields:
        return "x86"
    if fields.get("isa", "").startswith(("rv64", "rv32")):
        return "riscv64"
    if "loongarch" in fields.get("ISA", "") or fields.get("CPU Family", "").startswith("Loongson"):
        return "loongarch64"
    if "(pvr " in fields.get("revision", ""):
        return "ppc64"
    if "Features" in fields or "CPU implementer" in fields:
        version = fields.get("CPU architecture", "8").strip()
        if version not in ("8", "AArch64"):
            return "arm"
        features = set(fields.get("Features", "").split())
        if features & _ARM32_ONLY and not features & {"fp", "asimd"}:
            return "arm"  # an arm64 kernel shows a 32-bit reader the compat hwcaps
        return "arm64"
    return ""


def parse_cpuinfo(text: str) -> CpuInfoBlock:
    """Parse the text; total (any text gives a block, maybe an empty one).

    Where the first block is a processor block with the feature line (x86, arm64, current
    32-bit ARM), nothing after it matters and only that block is parsed (on a 256-CPU host the
    file is about 400 KiB).
    """
    stripped = text.lstrip("\n")
    head = _parse_blocks(stripped.split("\n\n", 1)[0])
    if head.fields.get("processor") is not None and head.arch in ("x86", "arm64", "arm") and head.raw_flags:
        return head
    return _parse_blocks(text)


def _parse_blocks(text: str) -> CpuInfoBlock:
    blocks: list[dict[str, str]] = []
    lines: list[tuple[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
                current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            key, value = key.strip(), value.strip()
            lines.append((key, value))
            current.setdefault(key, value)
    if current:
        blocks.append(current)
    first = next((b for b in blocks if "processor" in b), None)
    fields: dict[str, str] = dict(first) if first else {}
    for block in blocks:
        if "processor" not in block:
            for key, value in block.items():
                fields.setdefault(key, value)
    return CpuInfoBlock(fields, tuple(lines))


_PROCESSOR_KEY = re.compile(r"processor(?: \d+)?[ \t]*", re.ASCII)


def processor_count(text: str) -> int:
    """How many processors the text lists: one ``processor : N`` line per CPU in every layout
    (x86, arm, arm64, ppc64, riscv64, loongarch64), ``processor N: version = ...`` on s390x
    (``show_cpu_summary``). The 32-bit ARM model line ``Processor : ...`` is not one."""
    count = 0
    for line in text.splitlines():
        if line.startswith("processor"):
            key, sep, _ = line.partition(":")
            if sep and _PROCESSOR_KEY.fullmatch(key):
                count += 1
    return count


_CPU_RANGE = re.compile(r"(\d{1,7})(?:-(\d{1,7}))?", re.ASCII)


def cpulist_count(text: str) -> int | None:
    """How many CPUs a sysfs CPU list names (``0-3,5,8-11`` -> 9; the format of
    ``bitmap_print_list_to_buf``, lib/bitmap-str.c); ``None`` when it is no such list."""
    text = text.strip()
    if not text:
        return 0  # the kernel prints an empty mask as an empty line
    count = 0
    for part in text.split(","):
        match = _CPU_RANGE.fullmatch(part)
        if match is None:
            return None
        first, last = int(match.group(1)), int(match.group(2) or match.group(1))
        if last < first:
            return None
        count += last - first + 1
    return count
