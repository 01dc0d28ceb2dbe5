"""Stage three of the data flow, features -> desired state -> **changes** -> writes.

``diff_node``, pure: live Node + ownership record + desired state -> the minimal ``NodeChanges``
(the patches the Reconciler writes, stage four, and the ``Change`` list they make).

Rules (the whole contract of the reconciler lives here, so it is unit-tested without a server):

* We add, change or remove only what the record says is ours, or what is absent and desired
  (then it becomes ours). Something present that we do not own is never touched; if we wanted
  a different value there, that is a ``Clash``. If it already has the value we want, it is left
  alone and stays *not ours* (so we never remove it later).
* Removal of a label/annotation/taint and its removal from the record happen in the same merge
  patch (atomic). A resource leaves the record in the same ``/status`` JSON patch that removes
  it from capacity and allocatable (the status strategy resets only ``spec``, so metadata
  changes ride along: ``nodeStatusStrategy`` in Kubernetes' ``pkg/registry/core/node/strategy.go``), so the
  removal and the record trim are atomic too; a resource we add is recorded before (never
  after) it is written.
* ``skip`` names items left exactly as they are (an owned one stays in the record): those the
  API server rejected (422) and those another writer keeps changing back (``contest``).
* The desired state is valid by construction (``agent.rules.desired_state`` refuses every item
  Kubernetes or the namespace policy would reject, where it is built), so nothing in it is
  checked again here. The Node's own state is outside input and still is: an unreadable
  ownership-record entry is dropped and reported (``NodeChanges.refused``).
* ``desired.held_labels`` (keys an undetermined feature with no earlier answer decides, a
  trailing ``*`` a prefix; ``hold_every_label``: all) and ``desired.held_resources``: an owned
  label or extended resource so held is neither removed nor changed; it stays on the Node and
  in the record. ``desired.hold_everything``: so for every owned label, annotation, extended
  resource and taint.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.desired import (
    ANNOTATION_OWNED_ANNOTATIONS,
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    OWNERSHIP_ANNOTATIONS,
    DesiredNodeState,
    Problem,
    Taint,
)
from agent.features import undetermined_key
from agent.reconcile.model import Change, Clash, ItemRef, LiveNode, NodeChanges, taint_ref
from agent.reconcile.ownership import Ownership, format_record, format_taint_record, parse_ownership
from agent.reconcile.quantity import parse_quantity, same_quantity


def escape_pointer(key: str) -> str:
    """RFC 6901: ``~`` -> ``~0`` then ``/`` -> ``~1``."""
    return key.replace("~", "~0").replace("/", "~1")


@dataclass
class _MapChanges:
    """Labels or annotations: merge-patch entries, the new record, changes, clashes.
    ``held(key)``: an owned key on the Node stays exactly as it is (and in the record)."""

    live: Mapping[str, str]
    owned: frozenset[str]
    skip: Collection[ItemRef]
    kind: str
    held: Callable[[str], bool]
    patch: dict[str, str | None] = field(default_factory=dict)
    record: set[str] = field(default_factory=set)
    changes: list[Change] = field(default_factory=list)
    clashes: list[Clash] = field(default_factory=list)

    def wanted(self, key: str, value: str) -> None:
        live, old = self.live, self.live.get(key)
        if (self.kind, key) in self.skip:
            return
        if key in self.owned and key in live and self.held(key):
            self.record.add(key)  # undetermined: keep the Node's value
        elif key in self.owned or key not in live:
            self.record.add(key)
            if old != value:
                self.patch[key] = value
                self.changes.append(Change(self.kind, "add" if old is None else "change", key, old, value))
        elif old != value:
            self.clashes.append(Clash(self.kind, key, value, live[key]))

    def unwanted(self, key: str) -> None:
        """An owned key the agent no longer wants (or one whose wanted value is skipped)."""
        if (self.kind, key) in self.skip or (key in self.live and self.held(key)):
            self.record.add(key)  # rejected change, or removals held: leave ours exactly as it is
        elif key in self.live:
            self.patch[key] = None
            self.changes.append(Change(self.kind, "remove", key, self.live[key]))


def _maps(live: Mapping[str, str], owned: frozenset[str], want: Mapping[str, str], skip: Collection[ItemRef],
          kind: str, held: Callable[[str], bool] = lambda key: False
          ) -> tuple[dict[str, str | None], set[str], list[Change], list[Clash]]:
    """Shared label/annotation logic: merge-patch entries, new record, changes, clashes."""
    diff = _MapChanges(live, owned, skip, kind, held)
    for key, value in sorted(want.items()):
        diff.wanted(key, value)
    for key in sorted(owned):
        if key not in want or (kind, key) in skip:
            diff.unwanted(key)
    return diff.patch, diff.record, diff.changes, diff.clashes


def _held_labels(desired: DesiredNodeState) -> Callable[[str], bool]:
    if desired.hold_every_label or desired.hold_everything:
        return lambda key: True
    return lambda key: undetermined_key(desired.held_labels, key)


@dataclass
class _ResourceChanges:
    """JSON-patch ops on capacity+allocatable, the record until the status write, the names
    that write removes, changes, clashes, whether the record grows. ``held``: an owned resource
    on the Node stays exactly as it is (and in the record)."""

    live: LiveNode
    owned: frozenset[str]
    skip: Collection[ItemRef]
    held: frozenset[str]
    ops: list[dict[str, Any]] = field(default_factory=list)
    record: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)
    changes: list[Change] = field(default_factory=list)
    clashes: list[Clash] = field(default_factory=list)
    grows: bool = False
    parents_needed: bool = False

    def __post_init__(self) -> None:
        self.capacity, self.allocatable = dict(self.live.capacity or {}), dict(self.live.allocatable or {})

    def present(self, name: str) -> bool:
        return name in self.capacity or name in self.allocatable

    def wanted(self, name: str, value: str) -> None:
        owned = name in self.owned
        if ("resource", name) in self.skip or (owned and self.present(name) and name in self.held):
            if owned:
                self.record.add(name)  # left as it is (refused, contested, undetermined), still ours
            return
        if not owned and self.present(name):
            if not (same_quantity(self.capacity.get(name), value)
                    and same_quantity(self.allocatable.get(name, value), value)):
                found = str(self.capacity.get(name, self.allocatable.get(name)))
                self.clashes.append(Clash("resource", name, value, found))
            return
        self.record.add(name)
        self.grows = self.grows or not owned
        self._write(name, value)

    def _write(self, name: str, value: str) -> None:
        stale = [section for section, values in (("capacity", self.capacity), ("allocatable", self.allocatable))
                 if not same_quantity(values.get(name), value)]
        if not stale:
            return
        self.parents_needed = True
        self.ops.extend({"op": "add", "path": f"/status/{section}/{escape_pointer(name)}", "value": value}
                        for section in stale)
        old = self.capacity.get(name)
        if old is None:
            self.changes.append(Change("resource", "add", name, None, value))
        elif parse_quantity(old) == 0 and name in self.owned:
            self.changes.append(Change("resource", "restore", name, str(old), value,
                                       "kubelet zeroes extended resources when it re-registers the node"))
        else:
            self.changes.append(Change("resource", "change", name, str(old), value))

    def unwanted(self, name: str) -> None:
        if ("resource", name) in self.skip or (self.present(name) and name in self.held):
            self.record.add(name)  # rejected change, or removal held: leave ours exactly as it is
            return
        if not self.present(name):
            return
        for section, values in (("capacity", self.capacity), ("allocatable", self.allocatable)):
            if name in values:  # remove of a missing path is a 422: only remove what is there
                self.ops.append({"op": "remove", "path": f"/status/{section}/{escape_pointer(name)}"})
        self.record.add(name)  # leaves the record in the status write that removes it (_status_record)
        self.removed.add(name)
        self.changes.append(Change("resource", "remove", name, str(self.capacity.get(name, self.allocatable.get(name)))))

    def all_ops(self) -> list[dict[str, Any]]:
        """The ops, after those creating ``status``, ``capacity``, ``allocatable`` where missing."""
        if not self.parents_needed:
            return self.ops
        prefix = [] if self.live.has_status else [{"op": "add", "path": "/status", "value": {}}]
        if self.live.capacity is None:
            prefix.append({"op": "add", "path": "/status/capacity", "value": {}})
        if self.live.allocatable is None:
            prefix.append({"op": "add", "path": "/status/allocatable", "value": {}})
        return prefix + self.ops


def _resources(live: LiveNode, owned: frozenset[str], want: Mapping[str, str], skip: Collection[ItemRef],
               held: frozenset[str] = frozenset()
               ) -> tuple[list[dict[str, Any]], set[str], set[str], list[Change], list[Clash], bool]:
    diff = _ResourceChanges(live, owned, skip, held)
    for name, value in sorted(want.items()):
        diff.wanted(name, value)
    for name in sorted(owned - set(want)):
        diff.unwanted(name)
    return diff.all_ops(), diff.record, diff.removed, diff.changes, diff.clashes, diff.grows


def _status_record(live: LiveNode, value: str | None) -> list[dict[str, Any]]:
    """JSON-patch ops setting the resources record to ``value`` (None: no annotation) inside
    the ``/status`` patch, so a resource and its record entry go in one atomic write."""
    name = ANNOTATION_OWNED_RESOURCES
    if live.annotations.get(name) == value:
        return []
    path = f"/metadata/annotations/{escape_pointer(name)}"
    if value is None:
        return [{"op": "remove", "path": path}]
    if not live.annotations:  # an empty map is omitted by the server: the parent may be missing
        return [{"op": "add", "path": "/metadata/annotations", "value": {name: value}}]
    return [{"op": "add", "path": path, "value": value}]


def _taints(live: LiveNode, owned: frozenset[tuple[str, str]], wanted_taints: Iterable[Taint],
            skip: Collection[ItemRef], remove_foreign: Collection[tuple[str, str]]
            ) -> tuple[list[dict[str, Any]], list[Taint], list[Change], list[Clash]]:
    """The full new taints list (foreign ones kept verbatim), our record, changes, clashes."""
    want = {taint.identity: taint for taint in wanted_taints}
    new_list: list[dict[str, Any]] = []
    record: list[Taint] = []
    changes: list[Change] = []
    clashes: list[Clash] = []
    seen: set[tuple[str, str]] = set()
    for raw, taint in zip(live.taints, live.taint_objects(), strict=True):
        ident = taint.identity
        seen.add(ident)
        skipped = taint_ref(*ident) in skip
        if ident in owned:
            wanted = want.get(ident)
            if skipped or (wanted is not None and wanted.value == taint.value):
                new_list.append(dict(raw))
                record.append(taint)
            elif wanted is not None:
                new_list.append(wanted.to_json())
                record.append(wanted)
                changes.append(Change("taint", "change", wanted.to_string(), taint.to_string(), wanted.to_string()))
            else:
                changes.append(Change("taint", "remove", taint.to_string(), taint.to_string()))
        elif ident in remove_foreign:
            changes.append(Change("taint", "remove", taint.to_string(), taint.to_string(),
                                  note="startup taint, removed once the node is labelled (operator setting)"))
        else:
            new_list.append(dict(raw))
            wanted = want.get(ident)
            if wanted is not None and wanted.value != taint.value and not skipped:
                clashes.append(Clash("taint", f"{taint.key}:{taint.effect}", wanted.value, taint.value))
    for ident, taint in sorted(want.items()):
        if ident not in seen and taint_ref(*ident) not in skip:
            new_list.append(taint.to_json())
            record.append(taint)
            changes.append(Change("taint", "add", taint.to_string(), None, taint.to_string()))
    return new_list, record, changes, clashes


def _held_others(desired: DesiredNodeState, owned: Ownership, skip: Collection[ItemRef]
                 ) -> tuple[frozenset[str], Collection[ItemRef]]:
    """The extended resources held, and the taints left exactly as they are (skipped or held)."""
    if not desired.hold_everything:
        return desired.held_resources, skip
    return owned.resources, {*skip, *(taint_ref(*t) for t in owned.taints)}


def diff_node(
    live: LiveNode,
    desired: DesiredNodeState,
    *,
    skip: Collection[ItemRef] = frozenset(),
    remove_foreign_taints: Collection[tuple[str, str]] = frozenset(),
    ownership: Ownership | None = None,
) -> NodeChanges:
    """The minimal writes taking ``live`` to ``desired``, touching only what we own."""
    owned = ownership if ownership is not None else parse_ownership(live.annotations)
    refused = [Problem("reconcile", "ownership record", f"unreadable entry dropped: {j}") for j in owned.junk]

    label_patch, label_record, label_changes, clashes = _maps(live.labels, owned.labels, desired.labels, skip, "label",
                                                             held=_held_labels(desired))
    held_resources, taint_skip = _held_others(desired, owned, skip)
    ann_patch, ann_record, ann_changes, ann_clashes = _maps(live.annotations, owned.annotations, desired.annotations, skip,
                                                            "annotation", held=lambda key: desired.hold_everything)
    ops, res_record, res_removed, res_changes, res_clashes, grows = _resources(live, owned.resources, desired.extended_resources, skip,
                                                                               held_resources)
    new_taints, taint_record, taint_changes, taint_clashes = _taints(live, owned.taints, desired.taints, taint_skip,
                                                                     remove_foreign_taints)

    records = {
        ANNOTATION_OWNED_LABELS: format_record(label_record),
        ANNOTATION_OWNED_ANNOTATIONS: format_record(ann_record),
        ANNOTATION_OWNED_RESOURCES: format_record(res_record),
        ANNOTATION_OWNED_TAINTS: format_taint_record(taint_record),
    }
    record_changes = []
    for name, value in records.items():
        if live.annotations.get(name) != value:
            ann_patch[name] = value
            record_changes.append(Change("record", "change", name, live.annotations.get(name), value))

    if ops and not grows:  # the record after the status write: without what that write removes
        # (a growing record goes first in the metadata patch; the next diff carries the trim)
        trimmed = format_record(res_record - res_removed)
        trim_ops = _status_record(live, trimmed)
        ops = ops + trim_ops
        if trim_ops:
            res_changes = res_changes + [Change("record", "change", ANNOTATION_OWNED_RESOURCES,
                                                live.annotations.get(ANNOTATION_OWNED_RESOURCES), trimmed)]

    metadata: dict[str, Any] = {}
    body: dict[str, Any] = {}
    if label_patch:
        metadata["labels"] = label_patch
    if ann_patch:
        metadata["annotations"] = ann_patch
    live_taints = [dict(t) for t in live.taints]
    if new_taints != live_taints:
        body["spec"] = {"taints": new_taints}
        metadata["resourceVersion"] = live.resource_version  # taints are read-modify-write
    if metadata:
        body["metadata"] = metadata
    return NodeChanges(
        metadata_patch=body or None,
        status_ops=tuple(ops),
        metadata_changes=tuple(label_changes + ann_changes + taint_changes + record_changes),
        status_changes=tuple(res_changes),
        status_first=bool(ops) and not grows,
        clashes=tuple(clashes + ann_clashes + res_clashes + taint_clashes),
        refused=tuple(refused),
    )


def annotations_after(live: LiveNode, node_changes: NodeChanges) -> int:
    """Bytes of the Node's annotations once ``node_changes``'s ownership record is written (its other
    annotations as they are now: the server judges a new one, and a refused one is skipped),
    counted as the API server counts its budget (``ValidateAnnotationsSize``: key and value
    lengths in bytes)."""
    annotations = dict(live.annotations)
    patch = ((node_changes.metadata_patch or {}).get("metadata") or {}).get("annotations") or {}
    for key, value in patch.items():
        if key not in OWNERSHIP_ANNOTATIONS:
            continue
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    for op in node_changes.status_ops:
        if op.get("path") == f"/metadata/annotations/{escape_pointer(ANNOTATION_OWNED_RESOURCES)}":
            if op.get("op") == "remove":
                annotations.pop(ANNOTATION_OWNED_RESOURCES, None)
            else:
                annotations[ANNOTATION_OWNED_RESOURCES] = str(op.get("value"))
    return sum(len(k.encode()) + len(str(v).encode()) for k, v in annotations.items())
