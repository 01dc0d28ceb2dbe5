"""The agent's ownership record: which labels, resources, taints and annotations are ours.

The record lives on the Node itself, in four annotations (``agent.desired.OWNERSHIP_ANNOTATIONS``),
each a sorted, comma-separated list, as NFD's ``nfd.node.kubernetes.io/feature-labels`` is.
Keys are stored in full (no prefix stripping) so an entry can never be ambiguous; taints are
stored as ``Taint.to_string()`` (``key=value:Effect``) and identified by ``(key, effect)``.

Because the record travels with the Node, a restarted agent knows exactly what it may change,
and a recreated Node (new uid, empty record) makes the agent re-add only what is still absent.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from agent.desired import (
    ANNOTATION_OWNED_ANNOTATIONS,
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    Taint,
)
from agent.k8s_validation import annotation_key_errors, qualified_name_errors

TaintIdentity = tuple[str, str]


@dataclass(frozen=True)
class Ownership:
    """What the Node's annotations say we own. ``junk`` lists entries that could not be parsed
    (a hand-edited record); they are reported and dropped on the next write. ``damaged``: the
    record annotations holding such an entry."""

    labels: frozenset[str] = frozenset()
    resources: frozenset[str] = frozenset()
    taints: frozenset[TaintIdentity] = frozenset()
    annotations: frozenset[str] = frozenset()
    junk: tuple[str, ...] = field(default=())
    damaged: frozenset[str] = frozenset()

    @property
    def empty(self) -> bool:
        return not (self.labels or self.resources or self.taints or self.annotations)


def split_record(value: str | None) -> list[str]:
    """Entries of one record annotation; blanks and surrounding spaces are ignored."""
    if not value:
        return []
    return [part.strip() for part in value.split(",") if part.strip()]


def format_record(entries: Iterable[str]) -> str | None:
    """Sorted, de-duplicated, comma-separated; ``None`` (no annotation at all) when empty,
    as NFD creates its annotations only when non-empty."""
    unique = sorted(set(entries))
    return ",".join(unique) if unique else None


def format_taint_record(taints: Iterable[Taint]) -> str | None:
    return format_record(t.to_string() for t in taints)


def parse_ownership(annotations: Mapping[str, str] | None) -> Ownership:
    """Read the four record annotations; malformed entries go to ``junk``, never raise."""
    annotations = annotations or {}
    junk: list[str] = []
    damaged: set[str] = set()

    def bad(annotation: str, entry: str) -> None:
        junk.append(f"{annotation}: {entry!r}")
        damaged.add(annotation)

    def keys(annotation: str, check: Callable[[str], list[str]]) -> frozenset[str]:
        good = set()
        for entry in split_record(annotations.get(annotation)):
            if check(entry):
                bad(annotation, entry)
            else:
                good.add(entry)
        return frozenset(good)

    taints: set[TaintIdentity] = set()
    for entry in split_record(annotations.get(ANNOTATION_OWNED_TAINTS)):
        try:
            taint = Taint.parse(entry)
        except ValueError:
            bad(ANNOTATION_OWNED_TAINTS, entry)
            continue
        if qualified_name_errors(taint.key):
            bad(ANNOTATION_OWNED_TAINTS, entry)
            continue
        taints.add(taint.identity)

    return Ownership(
        labels=keys(ANNOTATION_OWNED_LABELS, qualified_name_errors),
        resources=keys(ANNOTATION_OWNED_RESOURCES, qualified_name_errors),
        taints=frozenset(taints),
        annotations=keys(ANNOTATION_OWNED_ANNOTATIONS, annotation_key_errors),
        junk=tuple(junk),
        damaged=frozenset(damaged),
    )
