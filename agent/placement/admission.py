"""Which new pods get the architecture gate, and the static mutation that adds it. Pure.

The same rules as the MutatingAdmissionPolicy's ``matchConditions`` (``deploy/placement.yaml``;
both are tested on one table of pod shapes): a CREATEd pod is gated unless

* it names a node (``spec.nodeName``: the API server refuses a gate there); mirror pods
  always do (``ValidatePodSpecificAnnotations`` requires it);
* a DaemonSet controls it (its pods are placed per node by their controller);
* it already chose its architecture: ``kubernetes.io/arch`` in ``nodeSelector``, or in every
  required node-affinity term (the Multiarch Tuning Operator's rule);
* it opted out (label ``node-feature-agent.io/placement: disabled``) or already has the gate;
* it is in ``kube-system`` or the controller's own namespace (the webhook configuration's
  ``namespaceSelector`` also excludes namespaces labelled ``placement: disabled``).

The mutation adds the gate ``node-feature-agent.io/arch`` and the label
``node-feature-agent.io/placement: gated`` (the controller watches that label), nothing else:
no registry, no network, so admission latency does not depend on any registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.kube.affinity import node_selector_terms
from agent.placement.nodeclasses import ARCH_LABEL
from agent.placement.podspec import (
    GATE,
    GATED,
    OPTED_OUT,
    SELECTOR_LABEL,
    has_gate,
    meta_of,
    spec_of,
)

EXCLUDED_NAMESPACES = ("kube-system",)


def _arch_in_every_term(spec: Mapping[str, Any]) -> bool:
    terms = node_selector_terms(spec)
    return bool(terms) and all(any(e.get("key") == ARCH_LABEL for e in (t.get("matchExpressions") or [])) for t in terms)


def skip_reason(pod: Mapping[str, Any], namespace: str, own_namespace: str) -> str | None:
    """Why this pod is not gated (None: gate it)."""
    meta, spec = meta_of(pod), spec_of(pod)
    labels = meta.get("labels") or {}
    if namespace in EXCLUDED_NAMESPACES or namespace == own_namespace:
        return "excluded namespace"
    if labels.get(SELECTOR_LABEL) == OPTED_OUT:
        return "opted out"
    if spec.get("nodeName"):
        return "bound to a node"
    if any(r.get("kind") == "DaemonSet" and r.get("controller") for r in meta.get("ownerReferences") or []):
        return "DaemonSet pod"
    if ARCH_LABEL in (spec.get("nodeSelector") or {}) or _arch_in_every_term(spec):
        return "chose its architecture"
    if has_gate(pod):
        return "already gated"
    return None


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def gate_patch(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON patch (RFC 6902) that adds the gate and the label, keeping what is there."""
    ops: list[dict[str, Any]] = []
    if meta_of(pod).get("labels"):
        ops.append({"op": "add", "path": "/metadata/labels/" + _escape(SELECTOR_LABEL), "value": GATED})
    else:
        ops.append({"op": "add", "path": "/metadata/labels", "value": {SELECTOR_LABEL: GATED}})
    if spec_of(pod).get("schedulingGates"):
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": GATE}})
    else:
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": GATE}]})
    return ops
