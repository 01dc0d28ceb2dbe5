"""Work out which item a 422 refused, so only that item is skipped and the rest still applied.

The API server reports validation failures as Status ``details.causes`` with a field path
(``metadata.labels``, ``metadata.taints[2].effect`` — ``ValidateNode`` builds taint paths from
"metadata" —, ``status.capacity.example.com/x``) and a message quoting the bad value
(``Invalid value: "bad key": ...``); a main-resource update lists a metadata cause twice (two
validators run). Label errors name only ``metadata.labels``, so the quoted key or value is
matched against what we were sending. A JSON-patch op that does not apply (a stale view) is
a 422 with a generic message and no causes: it names no item, and the caller re-reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.desired import OWNERSHIP_ANNOTATIONS, Problem
from agent.reconcile.model import ItemRef, taint_ref
from agent.reconcile.node_api import StatusCause

_BRACKET_RE = re.compile(r"\[([^\]]*)\]")
_QUOTED_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')
# a real kube-apiserver names taint errors metadata.taints[i] (ValidateNode builds the path
# from "metadata"); spec.taints[i] is what the field really is, accepted too
_TAINT_INDEX_RE = re.compile(r"^(?:metadata|spec)\.taints\[(\d+)\]")


def _quoted(message: str) -> set[str]:
    return {m.group(1) for m in _QUOTED_RE.finditer(message)}


def _map_items(field: str, message: str, reason: str, sent: Mapping[str, Any], kind: str) -> set[ItemRef]:
    """Labels/annotations being set (non-null) that the cause points at."""
    candidates = {k: v for k, v in sent.items() if v is not None and k not in OWNERSHIP_ANNOTATIONS}
    bracket = _BRACKET_RE.search(field)
    if bracket and bracket.group(1) in candidates:
        return {(kind, bracket.group(1))}
    quoted = _quoted(message)
    hits = {(kind, k) for k, v in candidates.items() if k in quoted or (v and str(v) in quoted)}
    if hits:
        return hits
    if kind == "annotation" and _too_long(reason, message) and candidates:  # over 256 KiB: drop our largest
        largest = max(candidates, key=lambda k: (len(k) + len(str(candidates[k])), k))
        return {(kind, largest)}
    if len(candidates) == 1:
        return {(kind, next(iter(candidates)))}
    return set()


def _too_long(reason: str, message: str) -> bool:
    return "TooLong" in reason or "Too long" in message or "at most" in message


def _taint_items(field: str, message: str, sent_taints: Sequence[Mapping[str, Any]], ours: set[str]) -> set[ItemRef]:
    match = _TAINT_INDEX_RE.match(field)
    if match and int(match.group(1)) < len(sent_taints):
        taint = sent_taints[int(match.group(1))]
        ref = taint_ref(str(taint.get("key", "")), str(taint.get("effect", "")))
        return {ref} if ref[1] in ours else set()
    quoted = _quoted(message)
    return {("taint", key_effect) for key_effect in ours if key_effect.split(":")[0] in quoted}


def _resource_items(field: str, message: str, ops: Sequence[Mapping[str, Any]]) -> set[ItemRef]:
    names = set()
    for op in ops:
        parts = str(op.get("path", "")).split("/")
        if len(parts) == 4 and parts[2] in ("capacity", "allocatable"):
            names.add(parts[3].replace("~1", "/").replace("~0", "~"))
    bracket = _BRACKET_RE.search(field)
    if bracket and bracket.group(1) in names:
        return {("resource", bracket.group(1))}
    quoted = _quoted(message)
    # the real server's path is dotted: field.NewPath("status", "capacity", name) -> status.capacity.<name>
    dotted = {n for n in names if field in (f"status.capacity.{n}", f"status.allocatable.{n}")}
    return {("resource", n) for n in names if n in quoted or f"[{n}]" in field} | {("resource", n) for n in dotted}


def rejected_items(
    causes: Iterable[StatusCause],
    message: str,
    *,
    metadata_patch: Mapping[str, Any] | None = None,
    status_ops: Sequence[Mapping[str, Any]] = (),
    our_taints: Iterable[str] = (),
) -> set[ItemRef]:
    """Items of the request just refused that the 422 blames; empty when it names none."""
    sent = _Sent(metadata_patch, tuple(status_ops), frozenset(our_taints))
    found: set[ItemRef] = set()
    for cause in list(causes) or [StatusCause("", message, "")]:
        found |= sent.blamed(cause.field or "", cause.message or message, cause.reason)
    return found


class _Sent:
    """What the refused request carried, to match a cause's field and message against."""

    def __init__(self, metadata_patch: Mapping[str, Any] | None, status_ops: tuple[Mapping[str, Any], ...],
                 our_taints: frozenset[str]) -> None:
        meta = (metadata_patch or {}).get("metadata") or {}
        self.metadata = metadata_patch is not None
        self.labels: Mapping[str, Any] = meta.get("labels") or {}
        self.annotations: Mapping[str, Any] = meta.get("annotations") or {}
        self.taints: Sequence[Mapping[str, Any]] = ((metadata_patch or {}).get("spec") or {}).get("taints") or []
        self.status_ops = status_ops
        self.our_taints = our_taints

    def blamed(self, field: str, text: str, reason: str) -> set[ItemRef]:
        if field.startswith("metadata.labels") and self.labels:
            return _map_items(field, text, reason, self.labels, "label")
        if field.startswith("metadata.annotations") and self.annotations:
            return _map_items(field, text, reason, self.annotations, "annotation")
        if field.startswith(("metadata.taints", "spec.taints")):
            return _taint_items(field, text, self.taints, set(self.our_taints))
        if field.startswith("status.") and self.status_ops:
            return _resource_items(field, text, self.status_ops)
        if not field and self.metadata:
            quoted = _quoted(text)
            return {("label", k) for k, v in self.labels.items() if v is not None and (k in quoted or v in quoted)}
        return set()


class RefusedItems:
    """Items the API server refused (422), skipped for as long as the agent still wants the
    value it refused: a new wish is worth another try, the same one would be refused again."""

    def __init__(self) -> None:
        self._refused: dict[ItemRef, tuple[str | None, str]] = {}  # item -> (refused value, why)

    def skip(self, wanted: Mapping[ItemRef, str]) -> frozenset[ItemRef]:
        """The items to leave as they are; forgets those whose wish changed."""
        for ref, (value, _why) in list(self._refused.items()):
            if wanted.get(ref) != value:
                del self._refused[ref]
        return frozenset(self._refused)

    def add(self, refs: Iterable[ItemRef], wanted: Mapping[ItemRef, str], why: str) -> set[ItemRef]:
        """Remember ``refs`` as refused with this value; returns those not known already."""
        new = {ref for ref in refs if ref not in self._refused}
        for ref in new:
            self._refused[ref] = (wanted.get(ref), why)
        return new

    def known(self) -> frozenset[ItemRef]:
        return frozenset(self._refused)

    def problems(self) -> list[Problem]:
        return [Problem("api-server", f"{kind} {key}", f"rejected by the API server, not retried while unchanged: {why}")
                for (kind, key), (_value, why) in sorted(self._refused.items())]
