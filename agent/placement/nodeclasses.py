"""Which nodes can run a pod's images: image platforms → node classes → node requirements.

Pure: no I/O, no clock. A *node class* is what the scheduler can tell nodes apart by, from
labels kubelet and our node agent publish: ``kubernetes.io/os``, ``kubernetes.io/arch`` and
a level within the architecture:

* amd64: the x86-64 micro-architecture level 1-4, from NFD's ``cpu-cpuid.X86_64_V2/V3/V4``
  labels (a level-3 node carries V2 and V3);
* arm (a 32-bit Arm kernel): the Arm architecture version 5-8 the CPU executes, from our
  ``node-feature-agent.io/arm32-variant`` label (``v5``..``v8``);
* arm64: 8 when the CPU also executes 32-bit Arm user code (AArch32 EL0), published as
  ``arm32-variant: v8``, else 0. Many recent Arm cores (Cortex-A510/A715/X3, Neoverse V2)
  have no AArch32; containerd still pulls ``arm/v7`` images on every arm64 node
  (``platforms.Only``), which then fail with "exec format error" there;
* every other architecture: one class.

An image platform runs on the classes at or above its variant (``linux/arm/v7``: arm nodes
at v7 or v8, and arm64 nodes with AArch32); an Arm entry without variant means v7 and an
arm64 one v8, as containerd normalises them. A variant we cannot map to a node label
(``arm64/v9``, a ``riscv64`` profile, ``amd64/v5``) runs nowhere we can promise, so it is
left out rather than guessed. ``386`` images run on ``386`` nodes only (an amd64 node runs
them only when its kernel has IA-32 emulation, which no label tells). Windows ``os.version``
is not matched.

The allowed set of a pod is the intersection over its images of the union over each image's
platforms: exactly the nodes where every image has something to run (archaware-controller
used a union, which is wrong for three or more images).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

OS_LABEL = "kubernetes.io/os"
ARCH_LABEL = "kubernetes.io/arch"
ARM32_LABEL = "node-feature-agent.io/arm32-variant"
X86_LEVEL_LABEL = "feature.node.kubernetes.io/cpu-cpuid.X86_64_V{level}"
AMD64_LEVELS = (1, 2, 3, 4)
ARM_LEVELS = (5, 6, 7, 8)
ARM64_LEVELS = (0, 8)


class PlatformLike(Protocol):
    """What ``agent.images.Platform`` offers: the platform as the registry states it."""

    @property
    def os(self) -> str: ...

    @property
    def architecture(self) -> str: ...

    @property
    def variant(self) -> str: ...


@dataclass(frozen=True, order=True)
class NodeClass:
    os: str
    arch: str
    level: int = 0


@dataclass(frozen=True)
class Requirement:
    """One ``NodeSelectorRequirement`` (``values`` empty for ``Exists``)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"key": self.key, "operator": self.operator}
        if self.values:
            out["values"] = list(self.values)
        return out


@dataclass(frozen=True)
class Clause:
    """One node-selector term's worth of requirements: nodes of these OSes and architectures,
    optionally narrowed by a level requirement."""

    oses: tuple[str, ...]
    archs: tuple[str, ...]
    level: Requirement | None = None

    def requirements(self) -> tuple[Requirement, ...]:
        base = (Requirement(OS_LABEL, "In", self.oses), Requirement(ARCH_LABEL, "In", self.archs))
        return base + ((self.level,) if self.level else ())


def _version(variant: str, default: int) -> int | None:
    """``v7`` → 7, "" → ``default``, anything else → None."""
    if not variant:
        return default
    if variant[:1] == "v" and variant[1:].isdigit():
        return int(variant[1:])
    return None


def classes_for(platform: PlatformLike) -> frozenset[NodeClass]:
    """The node classes that can run ``platform`` (empty: none we can promise)."""
    os, arch = platform.os, platform.architecture
    if not os or not arch or os == "unknown" or arch == "unknown":
        return frozenset()
    if os == "windows":
        return frozenset({NodeClass(os, arch)})
    by_variant = _CLASSES_BY_VARIANT.get(arch)
    if by_variant is not None:
        return by_variant(os, platform.variant)
    return frozenset() if platform.variant else frozenset({NodeClass(os, arch)})


def _amd64_classes(os: str, variant: str) -> frozenset[NodeClass]:
    """An amd64 image of level vN runs on nodes of level N and above (no variant: v1)."""
    level = _version(variant, 1)
    return frozenset(NodeClass(os, "amd64", n) for n in AMD64_LEVELS if level is not None and n >= level)


def _arm_classes(os: str, variant: str) -> frozenset[NodeClass]:
    """A 32-bit arm image of vN runs on arm nodes of vN and above, and on arm64 (v8) nodes."""
    level = _version(variant, 7)
    if level is None or level not in ARM_LEVELS:
        return frozenset()
    arm64 = {NodeClass(os, "arm64", 8)}
    return frozenset({NodeClass(os, "arm", n) for n in ARM_LEVELS if n >= level} | arm64)


def _arm64_classes(os: str, variant: str) -> frozenset[NodeClass]:
    """An arm64 image runs on every arm64 node when its variant is v8 or absent."""
    if _version(variant, 8) != 8:
        return frozenset()
    return frozenset(NodeClass(os, "arm64", n) for n in ARM64_LEVELS)


_CLASSES_BY_VARIANT = {"amd64": _amd64_classes, "arm": _arm_classes, "arm64": _arm64_classes}


def image_classes(platforms: Iterable[PlatformLike]) -> frozenset[NodeClass]:
    """Where one image runs: the union over its platforms."""
    out: set[NodeClass] = set()
    for platform in platforms:
        out |= classes_for(platform)
    return frozenset(out)


def allowed_classes(images: Iterable[Iterable[PlatformLike]]) -> frozenset[NodeClass]:
    """Where every image runs: the intersection over the images (empty for no images)."""
    result: frozenset[NodeClass] | None = None
    for platforms in images:
        here = image_classes(platforms)
        result = here if result is None else result & here
    return result or frozenset()


def _level_requirement(arch: str, levels: set[int]) -> Requirement | None:
    """The requirement that keeps exactly ``levels`` of ``arch`` (None: all of them)."""
    if arch == "amd64" and min(levels) > 1:
        return Requirement(X86_LEVEL_LABEL.format(level=min(levels)), "Exists")
    if arch == "arm" and min(levels) > ARM_LEVELS[0]:
        return Requirement(ARM32_LABEL, "In", tuple(f"v{n}" for n in ARM_LEVELS if n >= min(levels)))
    if arch == "arm64" and levels == {8}:
        return Requirement(ARM32_LABEL, "In", ("v8",))
    return None


def clauses(classes: frozenset[NodeClass]) -> tuple[Clause, ...]:
    """The allowed classes as node-selector terms (ORed), fewest first-free: per OS one
    clause for the architectures allowed whole, one per narrowed architecture, except that
    arm and arm64 narrowed by the arm32 label share one clause (arm64 nodes only ever carry
    ``v8``, which every arm requirement includes)."""
    out: list[Clause] = []
    for os in sorted({c.os for c in classes}):
        levels: dict[str, set[int]] = {}
        for c in classes:
            if c.os == os:
                levels.setdefault(c.arch, set()).add(c.level)
        narrowed = {arch: req for arch, lv in levels.items() if (req := _level_requirement(arch, lv)) is not None}
        free = tuple(sorted(a for a in levels if a not in narrowed))
        if free:
            out.append(Clause((os,), free))
        if "arm" in narrowed and "arm64" in narrowed:
            out.append(Clause((os,), ("arm", "arm64"), narrowed.pop("arm")))
            del narrowed["arm64"]
        out += [Clause((os,), (arch,), req) for arch, req in sorted(narrowed.items())]
    return tuple(out)


def architectures(classes: Iterable[NodeClass]) -> tuple[str, ...]:
    return tuple(sorted({c.arch for c in classes}))


def describe(classes: frozenset[NodeClass]) -> str:
    """``linux/amd64, linux/arm (v7+), linux/arm64 (AArch32)`` — for Events and logs."""
    parts = []
    for clause in clauses(classes):
        for arch in clause.archs:
            lv = sorted(c.level for c in classes if c.os == clause.oses[0] and c.arch == arch)
            note = ""
            if clause.level is not None and arch == "amd64":
                note = f" (x86-64-v{lv[0]}+)"
            elif clause.level is not None and arch == "arm":
                note = f" (v{lv[0]}+)"
            elif clause.level is not None and arch == "arm64":
                note = " (with AArch32)"
            parts.append(f"{clause.oses[0]}/{arch}{note}")
    return ", ".join(parts) if parts else "none"
