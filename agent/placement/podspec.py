"""What placement reads from a pod and the one PATCH it writes back. Pure; pods are the v1
JSON dicts the API server sends.

The PATCH is legal under the scheduling-readiness rules the API server enforces on a pod
that is still gated (``ValidatePodUpdate`` in kubernetes ``pkg/apis/core/validation``;
KEP-3838), judged on the pod *before* the patch, so the patch may tighten affinity and
remove the last gate in one write:

* required node affinity: when the pod has none (or no terms), we set our terms; otherwise
  each existing term keeps its requirements, in order, and ours are appended (the old lists
  must stay a prefix). A term without any requirement selects nothing and must stay empty,
  so it is left alone. We never add or remove terms of an existing selector;
* tolerations: additions only (taint mode);
* scheduling gates: only ours is removed;
* ``metadata.resourceVersion`` makes the write conditional (409 when the pod changed).

It is a JSON merge patch: lists (gates, terms, tolerations) are written whole, which the
resourceVersion precondition makes exact.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.kube.affinity import node_selector_terms
from agent.placement.nodeclasses import ARCH_LABEL, Clause, Requirement

Json = dict[str, Any]
GATE = "node-feature-agent.io/arch"
SELECTOR_LABEL = "node-feature-agent.io/placement"
GATED = "gated"
"""Admission sets ``node-feature-agent.io/placement: gated`` with the gate; the controller
watches that label (so it sees gated pods only) and removes it with the gate."""
OPTED_OUT = "disabled"
"""``node-feature-agent.io/placement: disabled`` on a pod or namespace: never gated."""
TAINT_KEY = "node-feature-agent.io/arch"
RESOLVED_ANNOTATION = "node-feature-agent.io/arch-resolved"
DIGESTS_ANNOTATION = "node-feature-agent.io/image-digests"


def spec_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = pod.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def meta_of(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = pod.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def has_gate(pod: Mapping[str, Any], gate: str = GATE) -> bool:
    return any(isinstance(g, Mapping) and g.get("name") == gate for g in spec_of(pod).get("schedulingGates") or [])


@dataclass(frozen=True)
class ImageUse:
    """One image a pod pulls, with what the resolver needs to know about it."""

    reference: str
    pull_always: bool


def images(pod: Mapping[str, Any]) -> tuple[ImageUse, ...]:
    """The images of ``containers`` and ``initContainers`` (native sidecars included), each
    once; ephemeral containers are added after binding and cannot affect scheduling."""
    seen: dict[str, bool] = {}
    for kind in ("initContainers", "containers"):
        for container in spec_of(pod).get(kind) or []:
            if not isinstance(container, Mapping) or not isinstance(container.get("image"), str):
                continue
            ref = container["image"].strip()
            if ref:
                seen[ref] = seen.get(ref, False) or container.get("imagePullPolicy") == "Always"
    return tuple(ImageUse(ref, always) for ref, always in seen.items())


def _arch_values(req: Mapping[str, Any], universe: set[str]) -> set[str]:
    """The architectures of ``universe`` one requirement on ``kubernetes.io/arch`` admits."""
    op, values = req.get("operator"), set(req.get("values") or [])
    if op == "In":
        return universe & values
    if op == "NotIn":
        return universe - values
    if op == "Exists":
        return set(universe)
    return set()


def user_arch_choice(pod: Mapping[str, Any], universe: set[str]) -> set[str] | None:
    """The architectures of ``universe`` the pod's own constraints admit, when the pod already
    constrains ``kubernetes.io/arch`` the way the Multiarch Tuning Operator respects (in
    ``nodeSelector``, or in *every* required term); None when it does not (we add ours)."""
    spec = spec_of(pod)
    selector = spec.get("nodeSelector") or {}
    terms = node_selector_terms(spec)
    term_archs = [[r for r in (t.get("matchExpressions") or []) if r.get("key") == ARCH_LABEL] for t in terms]
    if ARCH_LABEL not in selector and not (terms and all(term_archs)):
        return None
    admitted = set(universe)
    if ARCH_LABEL in selector:
        admitted &= {selector[ARCH_LABEL]}
    if terms and all(term_archs):
        per_term = set()
        for reqs in term_archs:
            here = set(universe)
            for req in reqs:
                here &= _arch_values(req, universe)
            per_term |= here
        admitted &= per_term
    return admitted


@dataclass(frozen=True)
class Placement:
    """What the controller writes: the requirements (None: leave affinity as it is) and the
    architectures to tolerate in taint mode."""

    clauses: tuple[Clause, ...] | None
    tolerate: tuple[str, ...] = ()


def tightened_terms(pod: Mapping[str, Any], clauses: Sequence[Clause]) -> tuple[list[Json], bool]:
    """The required terms after ours are added, and whether we had to narrow (a pod with terms
    can only be ANDed into, so when the allowed nodes need two clauses we keep the first, the
    one without level requirement). ``clauses`` must not be empty."""
    terms = node_selector_terms(spec_of(pod))
    if not terms:
        return [{"matchExpressions": [r.to_json() for r in c.requirements()]} for c in clauses], False
    chosen: Clause = clauses[0]
    out = []
    for term in terms:
        new = copy.deepcopy(dict(term))
        if new.get("matchExpressions") or new.get("matchFields"):
            new["matchExpressions"] = list(new.get("matchExpressions") or []) + [r.to_json() for r in chosen.requirements()]
        out.append(new)
    return out, len(clauses) > 1


def tolerations(pod: Mapping[str, Any], archs: Sequence[str]) -> list[Json] | None:
    """The pod's tolerations plus one ``node-feature-agent.io/arch=<arch>:NoSchedule`` per
    architecture (None: nothing to add)."""
    current = [dict(t) for t in spec_of(pod).get("tolerations") or [] if isinstance(t, Mapping)]
    wanted = [{"key": TAINT_KEY, "operator": "Equal", "value": arch, "effect": "NoSchedule"} for arch in archs]
    added = [t for t in wanted if t not in current]
    return current + added if added else None


def ungate_patch(pod: Mapping[str, Any], *, terms: list[Json] | None = None, tolerate: Sequence[str] = (),
                 annotations: Mapping[str, str] | None = None, gate: str = GATE, keep_label: bool = False) -> Json:
    """The one merge patch: our gate and selector label gone, ``terms`` (when given) as the
    required node affinity, tolerations for ``tolerate``, our annotations; conditional on
    the pod's resourceVersion. ``keep_label``: the selector label is not ours to remove (a
    pod that no longer carries ``placement=gated``: its label says what its owner wants)."""
    meta = meta_of(pod)
    patch_meta: Json = {"resourceVersion": meta.get("resourceVersion")}
    if not keep_label:
        patch_meta["labels"] = {SELECTOR_LABEL: None}
    if annotations:
        patch_meta["annotations"] = dict(annotations)
    remaining = [g for g in spec_of(pod).get("schedulingGates") or [] if not (isinstance(g, Mapping) and g.get("name") == gate)]
    spec: Json = {"schedulingGates": remaining or None}
    if terms is not None:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    added = tolerations(pod, tolerate)
    if added is not None:
        spec["tolerations"] = added
    return {"metadata": patch_meta, "spec": spec}


def fallback_clause(arch: str) -> Clause:
    return Clause(("linux",), (arch,))


__all__ = [
    "GATE",
    "GATED",
    "OPTED_OUT",
    "SELECTOR_LABEL",
    "TAINT_KEY",
    "ImageUse",
    "Placement",
    "Requirement",
    "fallback_clause",
    "has_gate",
    "images",
    "tightened_terms",
    "tolerations",
    "ungate_patch",
    "user_arch_choice",
]
