"""NFD's objects in the cluster as the agent uses them: NodeFeatureRule rule sets beside the
rule files, and this node's NodeFeature objects beside discovery (``--rules-from-cluster``).

Two watches (``cluster_watch.CollectionWatch``, handlers of ``agent.kube.reflector``): every NodeFeatureRule, and the NodeFeature
objects labelled ``nfd.node.kubernetes.io/node-name=<this node>`` in any namespace. Each
change moves ``generation`` and calls ``on_change`` (the agent queues a pass, as for a rule
file edit).

Each NodeFeatureRule object goes through the rule files' parser (``agent.rules.cluster_rules``)
and the files' reload policy, per object: its first version is used whatever it holds (bad
rules skipped, problems reported); a later version that brings a new problem is refused and
the last good version stays in force, except an item the namespace policy or Kubernetes'
validation refuses (a denied taint key): that item is skipped and the edit applies, as
nfd-master filters it; every problem is reported once per object version
(``on_problem``: a log line and a Warning Event on the Node naming the object and field).

Objects are tenant input (``agent.rules.budget``): an object over the per-object budget is not
parsed (its last good version stays in force); rule sets over the budget for all objects
together leave the last set within it in force; a collection over its bounds is followed only
for the objects known before (``cluster_watch``). When there is no earlier answer to keep (the
first read of this process has not completed, or found a bound passed or an object over
budget), ``undetermined()`` says why and the agent holds every item it owns on the Node, as
for a host file it cannot read. Each bound passed is reported once (``on_bounded``: a Warning
Event and a metric). Taints from objects count only with ``taints=True`` (``--enable-taints``,
as nfd-master's ``-enable-taints``); otherwise each object asking for some is noted once.
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
from agent.rules.budget import (
    MAX_COLLECTION_BYTES,
    MAX_NODE_FEATURE_OBJECTS,
    MAX_OBJECT_BYTES,
    MAX_RULE_OBJECTS,
    Cost,
    object_cost,
    object_problem,
    total_problem,
)
from agent.rules.cluster_rules import ignored_taints, object_origin, parse_rule_object, with_cluster_rules
from agent.rules.model import Catalogue, RuleOptions, RuleSet
from agent.rules.node_features import (
    NODE_NAME_LABEL,
    NodeFeatureObject,
    join_node_features,
    parse_node_feature,
)
from agent.rules.static_checks import static_problems
from agent.runtime.cluster_watch import Changes, CollectionWatch, Key
from agent.runtime.rules_state import problem_key

log = logging.getLogger(__name__)

RULES, FEATURES, BUDGET = "NodeFeatureRule", "NodeFeature", "budget"


def _digest(obj: Mapping[str, Any]) -> str:
    return hashlib.sha1(json.dumps(obj.get("spec"), sort_keys=True, default=str).encode()).hexdigest()


class ClusterObjects:
    def __init__(self, node_name: str, on_change: Callable[[], None],
                 on_problem: Callable[[str], None] | None = None, options: RuleOptions | None = None, *,
                 taints: bool = False, on_bounded: Callable[[str, str | None], None] | None = None) -> None:
        self.node_name = node_name
        self.options = options
        self.taints = taints
        self.on_change = on_change
        self.on_problem = on_problem
        self.on_bounded = on_bounded
        self.generation = 0
        self.notes: list[str] = []  # said once each: taints not applied
        self._lock = threading.Lock()
        #: held by the watches while they work on what they read and by the agent for a pass
        #: (``CollectionWatch``'s ``gate``): a pass waits for at most one page's work
        self.gate = threading.Lock()
        # name -> (digest, the version in force, its problems, its cost)
        self._rules: dict[str, tuple[str, RuleSet | None, tuple[Problem, ...], Cost]] = {}
        self._in_use: tuple[RuleSet, ...] | None = None  # the rule sets evaluated; None: none within budget yet
        self._read: dict[str, bool] = {RULES: False, FEATURES: False}  # a first LIST completed
        self._bounded: dict[str, str] = {}  # bound -> why, while passed
        self._unanswered: set[str] = set()  # over budget at the first read, no version to keep
        self._over: dict[str, str] = {}  # name -> why, objects over the per-object budget
        self._reported: dict[str, str] = {}  # name -> digest whose problems were reported
        self._node_features: dict[Key, NodeFeatureObject] = {}
        self._features_whole = False  # a whole LIST of NodeFeature objects was read
        self._merged: tuple[Catalogue, int, Catalogue] | None = None  # (files, generation, merged)
        self._overrides: set[str] = set()  # names of objects replacing a rule file, logged once
        self.watches: list[CollectionWatch] = []

    # -- lifecycle --------------------------------------------------------------------------
    def _watches(self, core: Any, **watch_options: Any) -> list[CollectionWatch]:
        return [
            CollectionWatch(core, "nodefeaturerules", RULES, self.rules_changed,
                            node_name=self.node_name, max_objects=MAX_RULE_OBJECTS, max_bytes=MAX_COLLECTION_BYTES,
                            max_object_bytes=MAX_OBJECT_BYTES, on_bounded=lambda why: self.bounded(RULES, why),
                            gate=self.gate, **watch_options),
            CollectionWatch(core, "nodefeatures", FEATURES, self.node_features_changed,
                            node_name=self.node_name, label_selector=f"{NODE_NAME_LABEL}={self.node_name}",
                            max_objects=MAX_NODE_FEATURE_OBJECTS, max_bytes=MAX_COLLECTION_BYTES,
                            max_object_bytes=MAX_OBJECT_BYTES, on_bounded=lambda why: self.bounded(FEATURES, why),
                            gate=self.gate, **watch_options),
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
                if exc.status == 404:
                    self._absent(watch.kind)
                notes.append(f"{watch.kind} objects not read: HTTP {exc.status}")
        with self._lock:
            return notes + sorted(self._bounded.values())

    def stop(self, timeout: float = 2.0) -> None:
        for watch in self.watches:
            watch.stop(timeout)

    def alive(self) -> bool:
        return all(w.alive() for w in self.watches)

    # -- what the watches deliver ---------------------------------------------------------------
    def rules_changed(self, changes: Changes, everything: bool) -> None:
        with self._lock:
            changed = self._update_rules({name: obj for (_, name), obj in changes.items()}, everything)
            changed = self._choose() or changed
            if everything:
                changed = changed or not self._read[RULES]
                self._read[RULES] = True
        if changed:
            self._changed()

    def _absent(self, kind: str) -> None:
        """The CRD is not installed: nothing of that kind can exist (a read, not a failure)."""
        with self._lock:
            self._read[kind] = True

    def bounded(self, kind: str, why: str | None) -> None:
        """A watch passed a bound (``why``) or fits again (None): once per episode."""
        with self._lock:
            if why is None:
                self._bounded.pop(kind, None)
            else:
                self._bounded[kind] = why
                self._read[kind] = True  # read as far as the bound: held, not pending
        if self.on_bounded is not None:
            self.on_bounded(kind, why)
        self._changed()

    def _update_rules(self, changes: Mapping[str, Mapping[str, Any] | None], everything: bool) -> bool:
        gone = {n for n, obj in changes.items() if obj is None}
        if everything:
            gone |= set(self._rules) - set(changes)
        changed = gone & set(self._rules)
        self._forget(gone)
        for name, obj in sorted(changes.items()):
            if obj is None:
                continue
            digest = _digest(obj)
            previous = self._rules.get(name)
            if previous is not None and previous[0] == digest:
                continue
            if self._over_budget(name, digest, obj, previous):
                continue
            rule_set, problems = parse_rule_object(obj, self.options, taints=self.taints)
            if previous is not None and previous[1] is not None:
                # an item the policy refuses is skipped and the rest applies, as nfd-master
                # filters it; only a rule or object that cannot be used refuses the edit
                known = {problem_key(p) for p in previous[2]} | self._item_refusals(rule_set)
                new = [p for p in problems if problem_key(p) not in known]
                if new:  # an invalid edit: the last good version stays in force
                    self._report(name, digest, new, "changed but is invalid; keeping its last good version")
                    self._rules[name] = (digest, previous[1], previous[2], previous[3])
                    continue
            self._report(name, digest, problems, "has problems; those rules are skipped")
            self._note_taints(name, obj)
            self._rules[name] = (digest, rule_set, tuple(problems), object_cost(obj))
            changed.add(name)
        return bool(changed)

    def _forget(self, names: set[str]) -> None:
        for name in names:
            self._rules.pop(name, None)
            self._reported.pop(name, None)
            self._unanswered.discard(name)
            self._over.pop(name, None)

    def _over_budget(self, name: str, digest: str, obj: Mapping[str, Any],
                     previous: tuple[str, RuleSet | None, tuple[Problem, ...], Cost] | None) -> bool:
        """An object over the per-object budget is not parsed: its last version stays in force;
        with none, and at the first read, what it gave before is unknown (``undetermined``)."""
        size = int(obj.get("specBytes") or 0)
        why = (f"its spec is {size} bytes (at most {MAX_OBJECT_BYTES})" if obj.get("spec") is None and size
               else object_problem(object_cost(obj)))
        if why is None:
            self._unanswered.discard(name)
            self._over.pop(name, None)
            return False
        self._over[name] = why
        kept = "its last version stays in force" if previous is not None and previous[1] is not None else \
            "not evaluated"
        self._report(name, digest, [Problem(f"{object_origin(name)}:spec", "budget", why)],
                     f"is over the budget for one object; {kept}")
        if previous is None and not self._read[RULES]:
            self._unanswered.add(name)
        self._rules[name] = (digest, *previous[1:]) if previous is not None else (digest, None, (), Cost())
        return True

    def _choose(self) -> bool:
        """The rule sets to evaluate: all in force when together within the budget, else the
        last set that was (``budget`` bounded until they fit again). True if that changed."""
        why = total_problem(entry[3] for entry in self._rules.values())
        if why is not None:
            if self._bounded.get(BUDGET) is None:
                self._bounded[BUDGET] = f"the NodeFeatureRule objects together ask for {why}"
                if self.on_bounded is not None:
                    self.on_bounded(BUDGET, self._bounded[BUDGET])
            return False
        if self._bounded.pop(BUDGET, None) is not None and self.on_bounded is not None:
            self.on_bounded(BUDGET, None)
        chosen = tuple(r for _, r, _, _ in self._rules.values() if r is not None)
        if self._in_use is not None and len(chosen) == len(self._in_use) and all(
                a is b for a, b in zip(chosen, self._in_use, strict=True)):
            return False
        self._in_use = chosen
        return True

    def _note_taints(self, name: str, obj: Mapping[str, Any]) -> None:
        taints = [] if self.taints else ignored_taints(obj)
        if taints:
            note = (f"NodeFeatureRule/{name} asks for taints {', '.join(taints[:5])}"
                    f"{f' and {len(taints) - 5} more' if len(taints) > 5 else ''}; not applied: taints from "
                    "cluster objects need --enable-taints (as nfd-master's -enable-taints)")
            self.notes.append(note)
            log.warning("%s", note, extra={"node": self.node_name, "event": "taints-ignored"})

    def undetermined(self) -> str | None:
        """Why the cluster's output cannot be told, with no earlier answer in this process to
        keep (every owned item is then held), or None."""
        with self._lock:
            reasons = [f"{kind} objects not read yet" for kind, read in self._read.items() if not read]
            reasons += [why for kind, why in sorted(self._bounded.items())
                        if kind != BUDGET and not self._in_use_of(kind)]
            if BUDGET in self._bounded and self._in_use is None:
                reasons.append(self._bounded[BUDGET])
            if self._unanswered:
                names = sorted(self._unanswered)
                reasons.append(f"NodeFeatureRule {', '.join(names[:5])} over the budget for one object at the first read")
        return "; ".join(reasons) or None

    def _in_use_of(self, kind: str) -> bool:
        """Whether this process had a whole read of ``kind`` before its bound was passed."""
        return self._in_use is not None if kind == RULES else self._features_whole
    def _item_refusals(self, rule_set: RuleSet | None) -> set[tuple[str, str, str]]:
        if rule_set is None:
            return set()
        return {problem_key(p) for p in static_problems(Catalogue(rule_sets=(rule_set,)), self.options or RuleOptions())}

    def node_features_changed(self, changes: Changes, everything: bool) -> None:
        with self._lock:
            objects = {} if everything else dict(self._node_features)
            if everything:
                self._read[FEATURES] = self._features_whole = True
        for (namespace, name), obj in sorted(changes.items()):
            if obj is None:
                objects.pop((namespace, name), None)
                continue
            if obj.get("spec") is None and obj.get("specBytes"):
                self._report(f"{namespace}/{name}", _digest(obj), [Problem(f"NodeFeature/{namespace}/{name}:spec", "budget",
                             f"its spec is {obj['specBytes']} bytes (at most {MAX_OBJECT_BYTES})")],
                             "is over the budget for one object; its last version stays in force")
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
        an object replacing a rule file is logged once, when it appears."""
        with self._lock:
            if self._merged is not None and self._merged[0] is files and self._merged[1] == self.generation:
                return self._merged[2]
            generation = self.generation
            rule_sets = list(self._in_use or ())
            problems = [p for _, _, found, _ in self._rules.values() for p in found]
        merged = with_cluster_rules(files, rule_sets, problems)
        overrides = {p.item: p for p in merged.warnings[len(files.warnings):]}
        for name in sorted(set(overrides) - self._overrides):
            log.info("cluster object NodeFeatureRule/%s %s", name, overrides[name].reason,
                     extra={"node": self.node_name, "event": "rules-override"})
        self._overrides = set(overrides)
        with self._lock:
            self._merged = (files, generation, merged)
        return merged

    def join(self, features: Mapping[str, Feature], labels: Mapping[str, str],
             label_origins: Mapping[str, str]) -> tuple[dict[str, Feature], dict[str, str], dict[str, str]]:
        with self._lock:
            objects = list(self._node_features.values())
        return join_node_features(features, labels, label_origins, objects, (self.options or RuleOptions()).nfd_namespace)
