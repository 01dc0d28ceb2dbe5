"""The desired state of this node, as rules compute it and the reconciler applies it.

The agent's data flow has four stages, each with one name in the code:

1. **features**: what discovery found (``agent.features.Feature``, ``agent.discovery``);
2. **desired state**: ``DesiredNodeState``, built and validated in one place
   (``agent.rules.desired_state``; the run loop's ``agent.runtime.desired_state``);
3. **changes**: ``agent.reconcile.diff.diff_node`` -> ``NodeChanges``, the minimal patches;
4. **writes**: the Reconciler sends them (``agent.reconcile.node_api``).

``DesiredNodeState`` is the contract between the pure rule evaluation (``agent.rules``) and
the reconciler (``agent.reconcile``): labels, extended resources, taints and annotations the
agent wants on its own Node, plus provenance so ``explain`` can say where each came from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agent.device_claims import DeviceClaim

OWNER_DOMAIN = "node-feature-agent.io"
"""Our own annotation domain: ownership records live here, never in someone else's."""

ANNOTATION_OWNED_LABELS = f"{OWNER_DOMAIN}/owned-labels"
ANNOTATION_OWNED_RESOURCES = f"{OWNER_DOMAIN}/owned-extended-resources"
ANNOTATION_OWNED_TAINTS = f"{OWNER_DOMAIN}/owned-taints"
ANNOTATION_OWNED_ANNOTATIONS = f"{OWNER_DOMAIN}/owned-annotations"
OWNERSHIP_ANNOTATIONS = (
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    ANNOTATION_OWNED_ANNOTATIONS,
)


@dataclass(frozen=True, order=True)
class Taint:
    """A node taint; identity is the (key, effect) pair, as the API server enforces."""

    key: str
    effect: str
    value: str = ""

    @property
    def identity(self) -> tuple[str, str]:
        return (self.key, self.effect)

    def to_string(self) -> str:
        """``key=value:Effect`` or ``key:Effect`` (Kubernetes ``Taint.ToString``)."""
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    @classmethod
    def parse(cls, text: str) -> Taint:
        """Inverse of :meth:`to_string`; raises ``ValueError`` on a malformed string."""
        body, sep, effect = text.rpartition(":")
        if not sep or not body or not effect:
            raise ValueError(f"not a taint string (key[=value]:Effect): {text!r}")
        key, _, value = body.partition("=")
        return cls(key=key, value=value, effect=effect)

    def to_json(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out


@dataclass(frozen=True)
class Provenance:
    """Why a label/resource/taint is desired: which file and line, which expression matched,
    which feature instance and which host file supplied the value."""

    origin: str  # "labels/accelerators/edgetpu:3", "labels/rules/x.yaml:12", "discovery:pci"
    rule: str = ""
    expression: str = ""
    feature_instance: str = ""
    host_path: str = ""

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if v}


@dataclass(frozen=True)
class Problem:
    """An item that was produced but refused (invalid name/value, denied namespace)."""

    origin: str  # file:line or source name
    item: str
    reason: str

    def __str__(self) -> str:
        return f"{self.origin}: {self.item}: {self.reason}"

    def to_json(self) -> dict[str, str]:
        return {"origin": self.origin, "item": self.item, "reason": self.reason}


@dataclass(frozen=True)
class DesiredNodeState:
    """Everything the agent wants on its Node. Every item is valid by construction: the builder
    (``agent.rules.desired_state``) refuses what Kubernetes or the namespace policy would reject
    and gives extended resources as the plain count sent, so the diff checks none again."""

    labels: Mapping[str, str] = field(default_factory=dict)
    extended_resources: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    #: keyed by label key, resource name, annotation key, or ``taint:<key>:<effect>``
    provenance: Mapping[str, Provenance] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()
    #: resource -> the devices a rule's ``devices:`` declaration matched (for the device plugin;
    #: the reconciler does not look at it)
    device_claims: Mapping[str, DeviceClaim] = field(default_factory=dict)
    #: label keys an undetermined feature with no earlier answer decides (``agent.rules.held``;
    #: a key ending in ``*`` stands for every key it is a prefix of): an owned label with such a
    #: key is neither removed nor changed (fail safe = keep what the Node has) and stays in the
    #: ownership record; ``hold_every_label``: all owned labels so (a templated rule reads the
    #: feature, so its keys cannot be told); ``held_resources``: the same for extended resources
    held_labels: frozenset[str] = frozenset()
    hold_every_label: bool = False
    held_resources: frozenset[str] = frozenset()
    #: every owned item (labels, annotations, extended resources, taints) is neither removed nor
    #: changed: the cluster's NFD objects, which may have produced any of them, could not be
    #: read (``agent.runtime.cluster_objects.ClusterObjects.undetermined``); new items are added
    hold_everything: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        object.__setattr__(self, "device_claims", MappingProxyType(dict(self.device_claims)))
        object.__setattr__(self, "extended_resources", MappingProxyType(dict(self.extended_resources)))
        object.__setattr__(self, "taints", tuple(sorted(set(self.taints))))
        object.__setattr__(self, "annotations", MappingProxyType(dict(self.annotations)))
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))
        object.__setattr__(self, "problems", tuple(self.problems))
        object.__setattr__(self, "held_labels", frozenset(self.held_labels))
        object.__setattr__(self, "held_resources", frozenset(self.held_resources))

    def to_json(self) -> dict[str, Any]:
        """The ``plan`` output shape."""
        return {
            "labels": dict(sorted(self.labels.items())),
            "extended_resources": dict(sorted(self.extended_resources.items())),
            "taints": [t.to_json() for t in self.taints],
            "annotations": dict(sorted(self.annotations.items())),
        }


def annotation_bytes(state: DesiredNodeState) -> int:
    """Bytes the desired annotations plus the ownership record would take on the Node, counted
    as the API server counts its 256 KiB budget (key and value lengths in bytes). The record
    lists every owned key, so a catalogue producing thousands of long labels can exceed it
    alone."""
    records = {
        ANNOTATION_OWNED_LABELS: ",".join(sorted(state.labels)),
        ANNOTATION_OWNED_RESOURCES: ",".join(sorted(state.extended_resources)),
        ANNOTATION_OWNED_TAINTS: ",".join(sorted(t.to_string() for t in state.taints)),
        ANNOTATION_OWNED_ANNOTATIONS: ",".join(sorted(state.annotations)),
    }
    pairs = [*records.items(), *((k, str(v)) for k, v in state.annotations.items())]
    return sum(len(k.encode()) + len(v.encode()) for k, v in pairs if v)
