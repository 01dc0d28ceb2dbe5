"""The ownership record is a claim to check, not an order.

Why: the record lives in the Node's own annotations, and whoever holds the node's credentials
(a kubelet, root on the node) may edit them. If the agent removed whatever the record lists,
writing ``kubernetes.io/hostname`` or ``node.kubernetes.io/unreachable:NoExecute`` into it
would make the agent strip labels and taints NodeRestriction forbids a kubelet to touch: an
escalation. So an entry is honoured only when the agent could itself have produced it under
its current policy; everything else is dropped from the record and reported
(``OwnershipRecordRejected``), never removed from the Node.

A taint is owned for its whole life: one a rule set stays the agent's after the rule is
deleted or edited to drop it, so it is removed (as nfd-master removes the taints its own
``nfd.node.kubernetes.io/taints`` annotation lists and no rule produces, ``setTaints`` in
NFD's ``pkg/nfd-master/nfd-master.go``). The proof is not the record alone (anyone with the
node's credentials can write it) but the agent's memory: an entry whose key no rule produces
now is honoured only when the same (key, effect) was honoured, with a producible key, in the
agent's previous pass on this Node, or was produced by a rule in a pass while the cluster's
objects were still being read (``vouched``: a taint the agent set in such a pass is its own). A forged entry for a taint the agent never
held is refused as before. What the memory cannot cover: a rule deleted while no agent ran
on the node since the last pass that held its taint; that taint stays, reported.

And the record can vanish or be damaged, as a whole or one annotation of it (deleted by hand,
a tool pruning annotations, a restore from backup): then, for each annotation missing or
holding an entry that does not parse, the agent adopts the items of its kind it wants that are
already on the Node with exactly the wanted value, and writes that annotation back
(``OwnershipRecordRebuilt``), so unplugging a device later still removes its labels. Items
Node Feature Discovery lists in its own record are NFD's and never adopted (see ``nfd_owned``).
Taints are adopted only from the agent's memory (``vouched``), never from what the Node shows:
an identical taint an admin set before the agent's first contact looks exactly like a lost
record's, and adopting it would make the agent remove it once no rule produces it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace

from agent.desired import (
    ANNOTATION_OWNED_ANNOTATIONS,
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    OWNERSHIP_ANNOTATIONS,
    DesiredNodeState,
    Taint,
)
from agent.k8s_validation import reserved_namespace_problem
from agent.reconcile.model import LiveNode
from agent.reconcile.ownership import Ownership
from agent.reconcile.quantity import canonical_count

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
    rebuilt: frozenset[str] = frozenset()  # the record annotations ``adopted`` writes back


def _why_not(key: str, policy: ClaimPolicy) -> str | None:
    return reserved_namespace_problem(key) or policy.key_problem(key)


def check_claims(ownership: Ownership, desired: DesiredNodeState, policy: ClaimPolicy,
                 vouched: Collection[tuple[str, str]] = frozenset()) -> CheckedClaims:
    """Keep only the entries the agent could have produced, or (taints) held in its previous
    pass on this Node (``vouched``); say why each other one is dropped. While the cluster's
    objects are undetermined (``desired.hold_everything``) what the catalogue can produce is
    not known, so no recorded taint is dropped for it: every one is held until it is."""
    rejected: list[str] = []

    def keep(kind: str, keys: Iterable[str], extra: KeyProblem = lambda _k: None) -> frozenset[str]:
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
    producible = policy.taint_keys() if policy.taint_keys is not None and not desired.hold_everything else None
    taints = set()
    for key, effect in sorted(ownership.taints):
        why = _why_not(key, policy)
        if (not why and producible is not None and key not in producible and key not in wanted_taint_keys
                and (key, effect) not in vouched):
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


def parts_to_rebuild(annotations: Mapping[str, str], recorded: Ownership) -> frozenset[str]:
    """The record annotations to rebuild: each one absent (deleted, or never written because
    the agent owned nothing of its kind) or holding an entry that does not parse."""
    return frozenset(name for name in OWNERSHIP_ANNOTATIONS if name not in annotations) | recorded.damaged


def adopt_matching(claims: CheckedClaims, live: LiveNode, desired: DesiredNodeState, policy: ClaimPolicy,
                   parts: Collection[str] = OWNERSHIP_ANNOTATIONS,
                   vouched: Collection[tuple[str, str]] = frozenset()) -> CheckedClaims:
    """For each record annotation in ``parts``: claim the wanted items of its kind already on
    the Node with exactly the wanted value (what the agent manages now), so the record is
    written back; never what NFD's record lists (NFD wrote it and removes it; a first contact
    with a Node NFD labels has no record either); taints only those the agent held in its
    previous pass on this Node (``vouched``)."""
    owned = claims.ownership
    adopted: list[str] = []
    rebuilt: set[str] = set()

    def adopt(part: str, kind: str, have: frozenset[str], matching: Iterable[str]) -> frozenset[str]:
        if part not in parts:
            return have
        nfd = nfd_owned(live.annotations, kind)
        new = sorted(key for key in matching if key not in have and key not in nfd and not _why_not(key, policy))
        adopted.extend(f"{kind} {key}" for key in new)
        rebuilt.update([part] if new else [])
        return have | frozenset(new)

    labels = adopt(ANNOTATION_OWNED_LABELS, "label", owned.labels,
                   (k for k, v in desired.labels.items() if live.labels.get(k) == v))
    annotations = adopt(ANNOTATION_OWNED_ANNOTATIONS, "annotation", owned.annotations,
                        (k for k, v in desired.annotations.items()
                         if k not in OWNERSHIP_ANNOTATIONS and live.annotations.get(k) == str(v)))
    resources = adopt(ANNOTATION_OWNED_RESOURCES, "extended resource", owned.resources,
                      (k for k, v in desired.extended_resources.items() if _same_count(live, k, str(v))))
    taints = owned.taints
    if ANNOTATION_OWNED_TAINTS in parts:
        new_taints = _taints_to_adopt(live, desired, owned.taints, vouched)
        adopted.extend(f"taint {t.to_string()}" for t in new_taints)
        rebuilt.update([ANNOTATION_OWNED_TAINTS] if new_taints else [])
        taints = owned.taints | {t.identity for t in new_taints}
    ownership = replace(owned, labels=labels, annotations=annotations, resources=resources, taints=taints)
    return CheckedClaims(ownership, claims.rejected, tuple(adopted), frozenset(rebuilt))


def _taints_to_adopt(live: LiveNode, desired: DesiredNodeState, have: frozenset[tuple[str, str]],
                     vouched: Collection[tuple[str, str]]) -> list[Taint]:
    """The wanted taints on the Node with the wanted value that the agent held in its
    previous pass and NFD's record does not list."""
    live_taints = {t.identity: t.value for t in live.taint_objects()}
    nfd_taints = nfd_owned_taints(live.annotations)
    return [t for t in desired.taints
            if t.identity not in have and t.identity in vouched and t.identity not in nfd_taints
            and live_taints.get(t.identity) == (t.value or "")]


def _same_count(live: LiveNode, name: str, quantity: str) -> bool:
    have = (live.capacity or {}).get(name)
    count = canonical_count(str(have)) if have is not None else None
    return count is not None and count == canonical_count(quantity)


#: label namespaces an agent of this kind writes by default; used only to tell an operator what
#: ``clean`` found without a record, never to remove anything
FEATURE_NAMESPACES = ("feature.node.kubernetes.io", "node-feature-agent.io", "accelerators")


def unattributed_labels(live: LiveNode) -> list[str]:
    """Labels in the agent's usual namespaces on a Node whose ownership record is missing."""
    if not record_missing(live.annotations):
        return []
    return sorted(k for k in live.labels if k.split("/", 1)[0] in FEATURE_NAMESPACES and "/" in k)
