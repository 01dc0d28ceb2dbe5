"""The desired-state function one discovery and one catalogue give the Reconciler.

Stage two of features -> **desired state** -> changes -> writes, as the run loop holds it:
``DesiredFromDiscovery(node_labels)`` is the desired state of the Node given its foreign labels (the
rules may read them): the catalogue evaluated on this pass's features, with two adjustments
the run loop owns:

* labels and extended resources an undetermined feature decides, with no earlier answer to
  keep (``DiscoveryCache.unanswered_labels``), are held as the Node has them
  (``agent.rules.held``); when a templated rule reads such a feature, every label is;
* while the cluster's NFD objects cannot be told (``ClusterObjects.undetermined``: not read
  yet, a bound passed with no earlier read to keep), every owned item is held
  (``hold_everything``);
* with ``--device-plugin=on`` the resources the device plugin serves are handed to kubelet
  (``device_service.hand_to_kubelet``).

One is built once per (discovery generation, rules generation, undetermined features) and
compared by identity: the Reconciler recomputes the desired state only for a new function or
new foreign labels.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from agent import rules
from agent.desired import DesiredNodeState
from agent.discovery import Discovery
from agent.features import Feature
from agent.rules.held import held_label_keys, held_resource_names
from agent.runtime.device_service import hand_to_kubelet


@dataclass(frozen=True, eq=False)
class DesiredFromDiscovery:
    features: Mapping[str, Feature]
    raw_labels: Mapping[str, str]
    label_origins: Mapping[str, str]
    catalogue: rules.Catalogue
    options: rules.RuleOptions | None
    holding: bool  # some feature is undetermined with no earlier answer
    held: frozenset[str] | None  # the label keys it decides; None: every label
    held_resources: frozenset[str]  # the extended resources it decides
    handing_over: bool  # --device-plugin=on
    hold_everything: bool = False  # the cluster's objects are undetermined

    @classmethod
    def build(cls, found: Discovery, catalogue: rules.Catalogue, options: rules.RuleOptions | None,
              unanswered: Mapping[str, tuple[str, ...]], *, handing_over: bool) -> DesiredFromDiscovery:
        held = held_label_keys(catalogue, options, unanswered) if unanswered else frozenset()
        resources = held_resource_names(catalogue, options, unanswered) if unanswered else frozenset()
        return cls(found.features, found.labels, found.label_origins, catalogue, options, bool(unanswered), held,
                   resources, handing_over)

    def __call__(self, node_labels: Mapping[str, str]) -> DesiredNodeState:
        state = rules.desired_state(self.features, self.raw_labels, node_labels, self.catalogue, self.options,
                                self.label_origins)
        if self.holding:
            state = dataclasses.replace(state, held_labels=self.held or frozenset(), hold_every_label=self.held is None,
                                        held_resources=self.held_resources)
        if self.hold_everything:
            state = dataclasses.replace(state, hold_everything=True)
        if self.handing_over:
            state = hand_to_kubelet(state)
        return state
