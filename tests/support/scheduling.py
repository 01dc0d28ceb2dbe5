"""Where a pod could land: kube-scheduler's NodeAffinity and TaintToleration filters, for
tests that assert placement without running a scheduler.

* ``nodeSelector``: every pair must be a node label;
* required node affinity: terms are ORed, a term's requirements ANDed, a term with no
  requirements matches nothing (k8s.io/component-helpers ``scheduling/corev1/nodeaffinity/
  nodeaffinity.go``, ``nodeSelectorTerms``); operators as apimachinery's label selector
  implements them (``pkg/labels/selector.go`` ``Requirement.Matches``): ``NotIn`` and
  ``DoesNotExist`` match a node without the label, ``Gt``/``Lt`` need the label to be an
  integer; ``matchFields`` support ``metadata.name`` only;
* taints: every ``NoSchedule``/``NoExecute`` taint must be tolerated (k8s.io/api
  ``core/v1/toleration.go`` ``ToleratesTaint``: an empty effect tolerates every effect, an
  empty key with ``Exists`` every taint, ``Equal`` compares the value; component-helpers
  ``FindMatchingUntoleratedTaint``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def requirement_matches(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op, values = req.get("key", ""), req.get("operator", ""), list(req.get("values") or [])
    present, value = key in labels, labels.get(key, "")
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        have, want = _int(value), _int(values[0])
        if have is None or want is None:
            return False
        return have > want if op == "Gt" else have < want
    return False


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    exprs, fields = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not fields:
        return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    name = {"metadata.name": (node.get("metadata") or {}).get("name", "")}
    return all(requirement_matches(r, labels) for r in exprs) and all(requirement_matches(r, name) for r in fields)


def affinity_matches(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    return any(term_matches(t, node) for t in required.get("nodeSelectorTerms") or [])


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    if toleration.get("key") and toleration.get("key") != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and toleration.get("value", "") == taint.get("value", "")


def taints_tolerated(pod: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    return all(any(tolerates(t, taint) for t in tolerations)
               for taint in (node.get("spec") or {}).get("taints") or []
               if taint.get("effect") in ("NoSchedule", "NoExecute"))


def feasible_nodes(pod: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]) -> list[str]:
    """Names of the nodes both filters let the pod onto (an ungated pod only)."""
    if (pod.get("spec") or {}).get("schedulingGates"):
        return []
    return [str(n["metadata"]["name"]) for n in nodes if affinity_matches(pod, n) and taints_tolerated(pod, n)]
