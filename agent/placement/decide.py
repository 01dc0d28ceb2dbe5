"""From a gated pod and what the registry said about its images to the pod's ``Decision``. Pure.

A decision is placement's per-pod outcome (what to write and which Event to post); the
controller writes it.

* no node class runs every image: keep the pod gated, Warning ``NoCommonArch``;
* the pod already chose its architecture (``nodeSelector`` or every required term names
  ``kubernetes.io/arch``): leave its affinity alone and remove the gate; Warning
  ``ArchConflict`` when its choice and its images share no architecture;
* otherwise: tighten the required node affinity to the allowed node classes, tolerate the
  architecture taints in taint mode, remove the gate; Normal ``ArchResolved`` with each image's
  digest and platforms.

Every ungate also writes the annotations ``node-feature-agent.io/image-digests`` (what the
registry answered, so a retagged ``:latest`` can be noticed later) and
``node-feature-agent.io/arch-resolved`` (the allowed nodes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agent.placement import nodeclasses, podspec
from agent.placement.nodeclasses import NodeClass, PlatformLike

Json = dict[str, Any]
MAX_MESSAGE = 1024
PLACE, RESPECT, CONFLICT, NO_COMMON = "place", "respect", "conflict", "no-common"


@dataclass(frozen=True)
class ImageAnswer:
    reference: str
    digest: str
    platforms: tuple[PlatformLike, ...]


@dataclass(frozen=True)
class Decision:
    """What to do with one gated pod: the action, its Event, the patch and the allowed nodes."""

    action: str
    reason: str
    event_type: str
    message: str
    patch: Json | None = None
    allowed: frozenset[NodeClass] = frozenset()


def _short(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


def _images_text(answers: Sequence[ImageAnswer]) -> str:
    parts = []
    for answer in answers:
        platforms = ",".join(str(p) for p in answer.platforms) or "none"
        parts.append(f"{answer.reference} ({answer.digest[:19]}): {platforms}")
    return "; ".join(parts)


def _annotations(answers: Sequence[ImageAnswer], allowed: frozenset[NodeClass]) -> dict[str, str]:
    digests = json.dumps({a.reference: a.digest for a in answers}, separators=(",", ":"), sort_keys=True)
    return {podspec.DIGESTS_ANNOTATION: digests, podspec.RESOLVED_ANNOTATION: nodeclasses.describe(allowed)}


def decide(pod: Mapping[str, Any], answers: Sequence[ImageAnswer], *, taint_mode: bool = False) -> Decision:
    allowed = nodeclasses.allowed_classes(a.platforms for a in answers)
    images = _images_text(answers)
    if not allowed:
        return Decision(NO_COMMON, "NoCommonArch", "Warning",
                        _short(f"no node can run every image of this pod; kept gated until the deadline: {images}"))
    archs = set(nodeclasses.architectures(allowed))
    annotations = _annotations(answers, allowed)
    chosen = podspec.user_arch_choice(pod, archs)
    if chosen is not None:
        patch = podspec.ungate_patch(pod, annotations=annotations)
        if not chosen:
            return Decision(CONFLICT, "ArchConflict", "Warning",
                            _short(f"the pod's own kubernetes.io/arch constraint excludes every node its images "
                                   f"run on ({nodeclasses.describe(allowed)}); left as written: {images}"),
                            patch, allowed)
        return Decision(RESPECT, "ArchResolved", "Normal",
                        _short(f"kept the pod's own kubernetes.io/arch constraint; images run on "
                               f"{nodeclasses.describe(allowed)}: {images}"), patch, allowed)
    clauses = nodeclasses.clauses(allowed)
    terms, narrowed = podspec.tightened_terms(pod, clauses)
    tolerate = nodeclasses.architectures(allowed) if taint_mode else ()
    patch = podspec.ungate_patch(pod, terms=terms, tolerate=tolerate, annotations=annotations)
    note = ""
    if narrowed:
        note = (f" (the pod's own required terms can only be narrowed, so only "
                f"{'/'.join(clauses[0].archs)} nodes of {nodeclasses.describe(allowed)} are allowed)")
    return Decision(PLACE, "ArchResolved", "Normal",
                    _short(f"required nodes: {nodeclasses.describe(allowed)}{note}; images: {images}"), patch, allowed)


def fallback_patch(pod: Mapping[str, Any], arch: str, *, taint_mode: bool = False) -> Json:
    """``fallback:<arch>``: linux nodes of that architecture."""
    terms, _ = podspec.tightened_terms(pod, (podspec.fallback_clause(arch),))
    return podspec.ungate_patch(pod, terms=terms, tolerate=(arch,) if taint_mode else (),
                                annotations={podspec.RESOLVED_ANNOTATION: f"linux/{arch} (fallback)"})
