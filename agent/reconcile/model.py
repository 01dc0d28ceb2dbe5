"""Data the diff reads and produces: the live Node as we see it, each change, clashes, ``NodeChanges``.

All frozen; the diff is a pure function from (``LiveNode``, ``DesiredNodeState``) to ``NodeChanges``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agent.desired import DesiredNodeState, Problem, Taint

#: ("label" | "annotation" | "resource" | "taint", key); taints are keyed ``key:Effect``
ItemRef = tuple[str, str]


def taint_ref(key: str, effect: str) -> ItemRef:
    return ("taint", f"{key}:{effect}")


def wanted_items(desired: DesiredNodeState) -> dict[ItemRef, str]:
    """Each item ``desired`` asks for, with its value (a taint's value for ``key:Effect``)."""
    wanted: dict[ItemRef, str] = {("label", k): v for k, v in desired.labels.items()}
    wanted.update({("annotation", k): v for k, v in desired.annotations.items()})
    wanted.update({("resource", k): str(v) for k, v in desired.extended_resources.items()})
    wanted.update({taint_ref(*t.identity): t.value for t in desired.taints})
    return wanted


@dataclass(frozen=True)
class LiveNode:
    """The parts of a Node object (as the API returned it, a plain JSON dict) we reconcile.

    ``capacity``/``allocatable`` are ``None`` when the map is absent (a JSON-patch ``add``
    under a missing parent fails, so the diff must know). ``taints`` keep the raw dicts so
    foreign taints (with ``timeAdded``) are written back byte-for-byte.
    """

    name: str
    uid: str
    resource_version: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, Any], ...] = ()
    capacity: Mapping[str, Any] | None = None
    allocatable: Mapping[str, Any] | None = None
    has_status: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "annotations", MappingProxyType(dict(self.annotations)))
        object.__setattr__(self, "taints", tuple(MappingProxyType(dict(t)) for t in self.taints))
        if self.capacity is not None:
            object.__setattr__(self, "capacity", MappingProxyType(dict(self.capacity)))
        if self.allocatable is not None:
            object.__setattr__(self, "allocatable", MappingProxyType(dict(self.allocatable)))

    @classmethod
    def from_dict(cls, node: Mapping[str, Any]) -> LiveNode:
        """Parse a Node JSON object; missing or null sections become empty."""
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status")
        taints = tuple(t for t in (spec.get("taints") or []) if isinstance(t, Mapping))
        return cls(
            name=str(meta.get("name") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            labels=_strings(meta.get("labels")),
            annotations=_strings(meta.get("annotations")),
            taints=taints,
            capacity=_section(status, "capacity"),
            allocatable=_section(status, "allocatable"),
            has_status=isinstance(status, Mapping),
        )

    def taint_objects(self) -> list[Taint]:
        return [Taint(key=str(t.get("key", "")), effect=str(t.get("effect", "")), value=str(t.get("value") or "")) for t in self.taints]


def _strings(values: object) -> dict[str, str]:
    """A labels/annotations map as strings; anything else (null, absent) as empty."""
    return {str(k): str(v) for k, v in values.items()} if isinstance(values, Mapping) else {}


def _section(status: object, name: str) -> dict[str, Any] | None:
    """``status.<name>`` as a dict, None when the map is absent (a JSON patch must add it first)."""
    if not isinstance(status, Mapping) or not isinstance(status.get(name), Mapping):
        return None
    return dict(status[name])


_KIND_NAMES = {"label": "label", "annotation": "annotation", "resource": "extended resource", "taint": "taint", "record": "ownership record"}


@dataclass(frozen=True)
class Change:
    """One thing a write changes, phrased for ``kubectl describe node`` and the log."""

    kind: str  # label | annotation | resource | taint | record
    action: str  # add | change | remove | restore
    key: str
    old: str | None = None
    new: str | None = None
    note: str = ""

    @property
    def pending(self) -> str:
        """The change as still to do (``add extended resource x``), for "still missing" reports."""
        return f"{self.action} {_KIND_NAMES.get(self.kind, self.kind)} {self.key}"

    def __str__(self) -> str:
        what = f"{_KIND_NAMES.get(self.kind, self.kind)} {self.key}"
        if self.kind == "taint":
            text = {"add": f"added taint {self.new}", "change": f"changed taint {self.old} to {self.new}",
                    "remove": f"removed taint {self.old}"}.get(self.action, f"{self.action} taint {self.key}")
        elif self.kind == "record":
            text = f"updated {what}"
        elif self.action == "add":
            text = f"added {what}={self.new}" if self.kind != "resource" else f"set {what} to {self.new}"
        elif self.action == "change":
            text = f"changed {what} from {self.old!r} to {self.new!r}"
        elif self.action == "restore":
            text = f"restored {what} to {self.new} (the node reported {self.old!r})"
        else:
            text = f"removed {what}" + (f" (was {self.old!r})" if self.old is not None else "")
        return f"{text}; {self.note}" if self.note else text


@dataclass(frozen=True)
class Clash:
    """Something we want is already set by someone else; we leave it alone and say so once."""

    kind: str
    key: str
    wanted: str
    found: str

    def __str__(self) -> str:
        return (f"{_KIND_NAMES.get(self.kind, self.kind)} {self.key}: wanted {self.wanted!r} but it is "
                f"{self.found!r}, set by someone else; left untouched")

    def as_problem(self) -> Problem:
        return Problem(origin="node", item=f"{self.kind} {self.key}", reason=str(self))


@dataclass(frozen=True)
class NodeChanges:
    """The minimal writes that take the live Node to the desired state.

    ``metadata_patch``: JSON merge patch for the main resource (labels, annotations incl. the
    ownership record, and ``spec.taints`` + ``metadata.resourceVersion`` when taints change).
    ``status_ops``: JSON patch for ``/status`` (capacity and allocatable of our resources, and
    the resources record without what it removes: metadata changes apply on ``/status``).
    ``status_first``: the status write may go first (it only restores or removes resources the
    record already lists); otherwise the record must grow first so a crash in between never
    leaves an unrecorded resource of ours behind.
    """

    metadata_patch: Mapping[str, Any] | None = None
    status_ops: tuple[Mapping[str, Any], ...] = ()
    metadata_changes: tuple[Change, ...] = ()
    status_changes: tuple[Change, ...] = ()
    status_first: bool = False
    clashes: tuple[Clash, ...] = ()
    refused: tuple[Problem, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.metadata_patch and not self.status_ops

    @property
    def changes(self) -> tuple[Change, ...]:
        return self.metadata_changes + self.status_changes
