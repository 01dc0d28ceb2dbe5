"""NFD's objects in the cluster as the agent uses them: NodeFeatureRule rule sets beside the
rule files, and this node's NodeFeature objects beside discovery (``--rules-from-cluster``).

Two watches (``cluster_watch.CollectionWatch``): every NodeFeatureRule, and the NodeFeature
objects labelled ``nfd.node.kubernetes.io/node-name=<this node>`` in any namespace. Each
change moves ``generation`` and calls ``on_change`` (the agent queues a pass, as for a rule
file edit).

Each NodeFeatureRule object goes through the rule files' parser (``agent.rules.cluster_rules``)
and the files' reload policy, per object: its first version is used whatever it holds (bad
rules skipped, problems reported); a later version that brings a new problem is refused and
the last good version stays in force; every problem is reported once per object version
(``on_problem``: a log line and a Warning Event on the Node naming the object and field).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from agent.desired import Problem
from agent.features import Feature
from agent.kube.reflector import Absent
from agent.rules.cluster_rules import parse_rule_object, with_cluster_rules
from agent.rules.model import Catalogue, RuleOptions, RuleSet
from agent.rules.node_features import (
    NODE_NAME_LABEL,
    NodeFeatureObject,
    join_node_features,
    parse_node_feature,
)
from agent.runtime.cluster_watch import Changes, CollectionWatch, Key
from agent.runtime.rules_state import problem_key

log = logging.getLogger(__name__)

MAX_RULE_OBJECTS = 1000
MAX_NODE_FEATURE_OBJECTS = 100


def _digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(obj.get("spec"), sort_keys=True, default=str).encode()).hexdigest()


class ClusterObjects:
    def __init__(self, node_name: str, on_change: Callable[[], None],
                 on_problem: Callable[[str], None] | None = None, options: RuleOptions | None = None) -> None:
        self.node_name = node_name
        self.options = options
        self.on_change = on_change
        self.on_problem = on_problem
        self.generation = 0
        self._lock = threading.Lock()
        self._rules: dict[str, tuple[str, RuleSet | None, tuple[Problem, ...]]] = {}  # name -> (digest, in use, problems)
        self._reported: dict[str, str] = {}  # name -> digest whose problems were reported
        self._node_features: dict[Key, NodeFeatureObject] = {}
        self._merged: tuple[Catalogue, int, Catalogue] | None = None  # (files, generation, merged)
        self._clashes: set[str] = set()
        self.watches: list[CollectionWatch] = []

    # -- lifecycle --------------------------------------------------------------------------
    def _watches(self, core: Any, **watch_options: Any) -> list[CollectionWatch]:
        return [
            CollectionWatch(core, "nodefeaturerules", "NodeFeatureRule", self.rules_changed,
                            node_name=self.node_name, max_objects=MAX_RULE_OBJECTS, **watch_options),
            CollectionWatch(core, "nodefeatures", "NodeFeature", self.node_features_changed,
                            node_name=self.node_name, label_selector=f"{NODE_NAME_LABEL}={self.node_name}",
                            max_objects=MAX_NODE_FEATURE_OBJECTS, **watch_options),
        ]

    def start(self, core: Any, **watch_options: Any) -> ClusterObjects:
        self.watches = [w.start() for w in self._watches(core, **watch_options)]
        return self

    def read_once(self, core: Any) -> list[str]:
        """Read both kinds once (``plan``/``explain`` with a kubeconfig); returns a note per
        kind that could not be read (CRD not installed, not allowed)."""
        notes = []
        for watch in self._watches(core):
            try:
                watch.list_once()
            except Absent as exc:
                notes.append(f"{watch.kind} objects not read: HTTP {exc.status}")
        return notes

    def stop(self, timeout: float = 2.0) -> None:
        for watch in self.watches:
            watch.stop(timeout)

    def alive(self) -> bool:
        return all(w.alive() for w in self.watches)

    # -- what the watches deliver ---------------------------------------------------------------
    def rules_changed(self, changes: Changes, everything: bool) -> None:
        with self._lock:
            changed = self._update_rules({name: obj for (_, name), obj in changes.items()}, everything)
        if changed:
            self._changed()

    def _update_rules(self, changes: Mapping[str, Mapping[str, Any] | None], everything: bool) -> bool:
        gone = {n for n, obj in changes.items() if obj is None}
        if everything:
            gone |= set(self._rules) - set(changes)
        changed = gone & set(self._rules)
        for name in gone:
            self._rules.pop(name, None)
            self._reported.pop(name, None)
        for name, obj in sorted(changes.items()):
            if obj is None:
                continue
            digest = _digest(obj)
            previous = self._rules.get(name)
            if previous is not None and previous[0] == digest:
                continue
            rule_set, problems = parse_rule_object(obj, self.options)
            if previous is not None and previous[1] is not None:
                known = {problem_key(p) for p in previous[2]}
                new = [p for p in problems if problem_key(p) not in known]
                if new:  # an invalid edit: the last good version stays in force
                    self._report(name, digest, new, "changed but is invalid; keeping its last good version")
                    self._rules[name] = (digest, previous[1], previous[2])
                    continue
            self._report(name, digest, problems, "has problems; those rules are skipped")
            self._rules[name] = (digest, rule_set, tuple(problems))
            changed.add(name)
        return bool(changed)

    def node_features_changed(self, changes: Changes, everything: bool) -> None:
        with self._lock:
            objects = {} if everything else dict(self._node_features)
        for (namespace, name), obj in sorted(changes.items()):
            if obj is None:
                objects.pop((namespace, name), None)
                continue
            found, problems = parse_node_feature(obj)
            self._report(f"{namespace}/{name}", _digest(obj), problems, "has parts that are not NFD's shape; skipped")
            objects[(namespace, name)] = found
        with self._lock:
            self._node_features = objects
        self._changed()

    def _changed(self) -> None:
        with self._lock:
            self.generation += 1
        self.on_change()

    def _report(self, name: str, digest: str, problems: list[Problem], what: str) -> None:
        if not problems or self._reported.get(name) == digest:
            return
        self._reported[name] = digest
        shown = "; ".join(str(p) for p in problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        text = f"{name} {what}: {shown}"
        log.error("cluster object %s", text, extra={"node": self.node_name, "event": "rules-problem"})
        if self.on_problem is not None:
            self.on_problem(text)

    # -- what the agent reads ---------------------------------------------------------------------
    def catalogue(self, files: Catalogue) -> Catalogue:
        """The files' catalogue with the cluster's rule sets (remembered until either changes);
        a name clash is reported once, when it appears."""
        with self._lock:
            if self._merged is not None and self._merged[0] is files and self._merged[1] == self.generation:
                return self._merged[2]
            generation = self.generation
            rule_sets = [r for _, r, _ in self._rules.values() if r is not None]
            problems = [p for _, _, found in self._rules.values() for p in found]
        merged = with_cluster_rules(files, rule_sets, problems)
        clashes = {p.item: p for p in merged.problems[len(files.problems) + len(problems):]}
        for name in sorted(set(clashes) - self._clashes):
            self._report(f"NodeFeatureRule/{name}", "clash", [clashes[name]], "is also a rule file")
        self._clashes = set(clashes)
        with self._lock:
            self._merged = (files, generation, merged)
        return merged

    def join(self, features: Mapping[str, Feature], labels: Mapping[str, str],
             label_origins: Mapping[str, str]) -> tuple[dict[str, Feature], dict[str, str], dict[str, str]]:
        with self._lock:
            objects = list(self._node_features.values())
        return join_node_features(features, labels, label_origins, objects)
