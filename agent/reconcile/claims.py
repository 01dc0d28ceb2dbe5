"""The ownership record is a claim to check, not an order.

Why: the record lives in the Node's own annotations, and whoever holds the node's credentials
(a kubelet, root on the node) may edit them. If the agent removed whatever the record lists,
writing ``kubernetes.io/hostname`` or ``node.kubernetes.io/unreachable:NoExecute`` into it
would make the agent strip labels and taints NodeRestriction forbids a kubelet to touch: an
escalation. So an entry is honoured only when the agent could itself have produced it under
its current policy; everything else is dropped from the record and reported
(``OwnershipRecordRejected``), never removed from the Node.

And the record can vanish (deleted by hand, a restore from backup): then the agent adopts the
items it wants that are already on the Node with exactly the wanted value and writes the record
back (``OwnershipRecordRebuilt``), so unplugging a device later still removes its labels. Items
Node Feature Discovery lists in its own record are NFD's and never adopted (see ``nfd_owned``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Mapping

from agent.desired import OWNERSHIP_ANNOTATIONS, DesiredNodeState
from agent.k8s_validation import reserved_namespace_problem
from agent.reconcile.ownership import Ownership
from agent.reconcile.quantity import canonical_count

if TYPE_CHECKING:
    from agent.reconcile.model import LiveNode

KeyProblem = Callable[[str], "str | None"]


@dataclass(frozen=True)
class ClaimPolicy:
    """What the agent may claim. ``key_problem`` is the label-namespace policy (the same one
    that filters what rules produce: ``rules.namespaces.namespace_problem`` with the policy
    flags); ``taint_keys`` returns the taint keys the catalogue and ``--startup-taint`` can
    produce (None: any key the namespace policy allows)."""

    key_problem: KeyProblem = reserved_namespace_problem
    taint_keys: Callable[[], frozenset[str]] | None = None


@dataclass(frozen=True)
class CheckedClaims:
    ownership: Ownership
    rejected: tuple[str, ...] = ()
    adopted: tuple[str, ...] = ()


def _why_not(key: str, policy: ClaimPolicy) -> str | None:
    return reserved_namespace_problem(key) or policy.key_problem(key)


def check_claims(ownership: Ownership, desired: DesiredNodeState, policy: ClaimPolicy) -> CheckedClaims:
    """Keep only the entries the agent could have produced; say why each other one is dropped."""
    rejected: list[str] = []

    def keep(kind: str, keys, extra=lambda _k: None) -> frozenset[str]:
        kept = set()
        for key in sorted(keys):
            why = _why_not(key, policy) or extra(key)
            if why:
                rejected.append(f"{kind} {key}: {why}")
            else:
                kept.add(key)
        return frozenset(kept)

    def own_annotation(key: str) -> str | None:
        if key in OWNERSHIP_ANNOTATIONS:
            return "the ownership record cannot own itself"
        return None

    wanted_taint_keys = {t.key for t in desired.taints}
    producible = policy.taint_keys() if policy.taint_keys is not None else None
    taints = set()
    for key, effect in sorted(ownership.taints):
        why = _why_not(key, policy)
        if not why and producible is not None and key not in producible and key not in wanted_taint_keys:
            why = "no rule in the catalogue and no --startup-taint produces this taint key"
        if why:
            rejected.append(f"taint {key}:{effect}: {why}")
        else:
            taints.add((key, effect))
    checked = Ownership(
        labels=keep("label", ownership.labels),
        resources=keep("extended resource", ownership.resources),
        taints=frozenset(taints),
        annotations=keep("annotation", ownership.annotations, own_annotation),
        junk=ownership.junk,
    )
    return CheckedClaims(checked, tuple(rejected))


def record_missing(annotations: Mapping[str, str]) -> bool:
    """No record annotation at all: never written, or deleted."""
    return not any(name in annotations for name in OWNERSHIP_ANNOTATIONS)


#: Node Feature Discovery's record of what nfd-master wrote (NFD ``api/nfd/v1alpha1/annotations_labels.go``):
#: comma-separated names, ``feature.node.kubernetes.io/`` left out of those in that namespace
#: (``pkg/nfd-master/nfd-master.go`` ``updateNodeObject``); with ``-instance=NAME`` the
#: annotation names start with ``NAME.``
NFD_RECORDS = {"label": "nfd.node.kubernetes.io/feature-labels",
               "extended resource": "nfd.node.kubernetes.io/extended-resources",
               "annotation": "nfd.node.kubernetes.io/feature-annotations"}
NFD_NAMESPACE = "feature.node.kubernetes.io"
#: taints as ``key=value:Effect`` / ``key:Effect``; the same name whatever the instance (NFD's setTaints)
NFD_TAINTS = "nfd.node.kubernetes.io/taints"


def nfd_owned(annotations: Mapping[str, str], kind: str) -> frozenset[str]:
    """The ``kind`` names NFD's record on this Node lists (every NFD instance's), in full."""
    record = NFD_RECORDS[kind]
    names: set[str] = set()
    for key, value in annotations.items():
        if key == record or key.endswith("." + record):
            names.update(n if "/" in n else f"{NFD_NAMESPACE}/{n}" for n in (p.strip() for p in value.split(",")) if n)
    return frozenset(names)


def nfd_owned_taints(annotations: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    """(key, effect) of every taint NFD's record lists."""
    entries = (e.strip() for e in annotations.get(NFD_TAINTS, "").split(","))
    return frozenset((e.rpartition(":")[0].partition("=")[0], e.rpartition(":")[2]) for e in entries if ":" in e)


def adopt_matching(claims: CheckedClaims, live: LiveNode, desired: DesiredNodeState, policy: ClaimPolicy) -> CheckedClaims:
    """With the record missing or damaged: claim the wanted items already on the Node with
    exactly the wanted value (what the agent manages now), so the record is written back;
    never what NFD's record lists (NFD wrote it and removes it; a first contact with a Node NFD
    labels has no record either)."""
    owned = claims.ownership
    adopted: list[str] = []
    labels = set(owned.labels)
    nfd_labels = nfd_owned(live.annotations, "label")
    for key, value in desired.labels.items():
        if key not in labels and key not in nfd_labels and live.labels.get(key) == value and not _why_not(key, policy):
            labels.add(key)
            adopted.append(f"label {key}")
    annotations = set(owned.annotations)
    nfd_annotations = nfd_owned(live.annotations, "annotation")
    for key, value in desired.annotations.items():
        if (key not in annotations and key not in OWNERSHIP_ANNOTATIONS and key not in nfd_annotations
                and live.annotations.get(key) == str(value)
                and not _why_not(key, policy)):
            annotations.add(key)
            adopted.append(f"annotation {key}")
    resources = set(owned.resources)
    nfd_resources = nfd_owned(live.annotations, "extended resource")
    capacity = getattr(live, "capacity", {}) or {}
    for name, quantity in desired.extended_resources.items():
        have = capacity.get(name)
        if (name not in resources and name not in nfd_resources and have is not None and canonical_count(str(have)) is not None
                and canonical_count(str(have)) == canonical_count(str(quantity))
                and not _why_not(name, policy)):
            resources.add(name)
            adopted.append(f"extended resource {name}")
    taints = set(owned.taints)
    live_taints = {(t.get("key"), t.get("effect")): t for t in live.taints}
    nfd_taints = nfd_owned_taints(live.annotations)
    for taint in desired.taints:
        found = live_taints.get(taint.identity)
        if taint.identity not in taints and taint.identity not in nfd_taints and found is not None and (found.get("value") or "") == (taint.value or ""):
            taints.add(taint.identity)
            adopted.append(f"taint {taint.to_string()}")
    ownership = replace(owned, labels=frozenset(labels), annotations=frozenset(annotations),
                        resources=frozenset(resources), taints=frozenset(taints))
    return CheckedClaims(ownership, claims.rejected, tuple(adopted))



#: label namespaces an agent of this kind writes by default; used only to tell an operator what
#: ``clean`` found without a record, never to remove anything
FEATURE_NAMESPACES = ("feature.node.kubernetes.io", "node-feature-agent.io", "accelerators")


def unattributed_labels(live) -> list[str]:
    """Labels in the agent's usual namespaces on a Node whose ownership record is missing."""
    if not record_missing(live.annotations):
        return []
    return sorted(k for k in live.labels if k.split("/", 1)[0] in FEATURE_NAMESPACES and "/" in k)
