"""Image platforms → the nodes that can run them (``agent/placement/nodeclasses.py``).

Expected values follow the rules the module states, each from outside this project:
containerd's platform normalisation (an ``arm`` entry without variant is ``v7``, ``arm64``
without variant is ``v8``: containerd ``platforms/database.go`` ``normalizeArch``), the
x86-64 levels of the psABI as NFD labels them (``cpu-cpuid.X86_64_V2..V4``), and the issue's
own example of archaware-controller's union bug."""

from __future__ import annotations

import pytest

from agent.images import Platform
from agent.placement.nodeclasses import (
    ARCH_LABEL,
    ARM32_LABEL,
    OS_LABEL,
    Clause,
    NodeClass,
    Requirement,
    allowed_classes,
    classes_for,
    clauses,
    describe,
)


def p(text: str) -> Platform:
    os, arch, *variant = text.split("/")
    return Platform(os, arch, variant[0] if variant else "")


def allowed(*images: str) -> frozenset[NodeClass]:
    return allowed_classes([[p(t) for t in image.split()] for image in images])


def test_the_intersection_of_three_images_is_empty_where_archaware_gave_both() -> None:
    """[amd64, arm64] ∩ [amd64] ∩ [arm64]: archaware-controller unions the pairs and allows
    both; no node runs all three images."""
    assert allowed("linux/amd64 linux/arm64", "linux/amd64", "linux/arm64") == frozenset()
    assert clauses(allowed("linux/amd64 linux/arm64", "linux/amd64", "linux/arm64")) == ()


def test_a_common_subset_becomes_one_term() -> None:
    both = allowed("linux/amd64 linux/arm64 linux/arm/v7 windows/amd64", "linux/amd64 linux/arm64")
    assert clauses(both) == (Clause(("linux",), ("amd64", "arm64")),)
    assert describe(both) == "linux/amd64, linux/arm64"


def test_arm_v7_runs_on_v7_and_v8_arm_nodes_and_on_arm64_nodes_with_aarch32() -> None:
    only_v7 = allowed("linux/arm/v7")
    assert only_v7 == {NodeClass("linux", "arm", 7), NodeClass("linux", "arm", 8), NodeClass("linux", "arm64", 8)}
    (clause,) = clauses(only_v7)
    assert clause == Clause(("linux",), ("arm", "arm64"), Requirement(ARM32_LABEL, "In", ("v7", "v8")))
    assert allowed("linux/arm") == only_v7  # no variant: v7, as containerd normalises it
    assert allowed("linux/arm/v6", "linux/arm/v7") == only_v7  # a v7 node runs both


def test_arm64_with_a_32_bit_image_needs_aarch32() -> None:
    (clause,) = clauses(allowed("linux/arm64 linux/arm/v7", "linux/arm/v7"))
    assert clause.archs == ("arm", "arm64") and clause.level == Requirement(ARM32_LABEL, "In", ("v7", "v8"))
    assert clauses(allowed("linux/arm64/v8", "linux/arm64")) == (Clause(("linux",), ("arm64",)),)


def test_windows_entries_never_count_as_linux() -> None:
    assert allowed("windows/amd64") == {NodeClass("windows", "amd64")}
    assert allowed("windows/amd64", "linux/amd64") == frozenset()
    (clause,) = clauses(allowed("windows/amd64"))
    assert clause.requirements()[0] == Requirement(OS_LABEL, "In", ("windows",))


def test_x86_64_levels_need_nfd_s_level_label() -> None:
    (clause,) = clauses(allowed("linux/amd64/v3"))
    assert clause.level == Requirement("feature.node.kubernetes.io/cpu-cpuid.X86_64_V3", "Exists")
    assert clauses(allowed("linux/amd64 linux/amd64/v3")) == (Clause(("linux",), ("amd64",)),)
    assert clauses(allowed("linux/amd64/v2", "linux/amd64/v3 linux/arm64")) == (
        Clause(("linux",), ("amd64",), Requirement("feature.node.kubernetes.io/cpu-cpuid.X86_64_V3", "Exists")),)


@pytest.mark.parametrize("text", ["unknown/unknown", "linux/arm64/v9", "linux/riscv64/rva22u64", "linux/amd64/v5",
                                  "linux/arm/v4", "linux/arm/7"])
def test_platforms_no_node_label_can_promise_run_nowhere(text: str) -> None:
    assert classes_for(p(text)) == frozenset()


def test_mixed_levels_make_several_terms_free_one_first() -> None:
    mixed = allowed("linux/amd64 linux/arm/v7")
    assert clauses(mixed) == (Clause(("linux",), ("amd64",)),
                              Clause(("linux",), ("arm", "arm64"), Requirement(ARM32_LABEL, "In", ("v7", "v8"))))
    assert [r.key for r in clauses(mixed)[1].requirements()] == [OS_LABEL, ARCH_LABEL, ARM32_LABEL]
