"""Which label keys an undetermined feature decides, so the reconciler keeps them as they are.

Why: a feature a source could not determine, with no earlier answer to keep (a fresh agent's
first pass, ``agent.runtime.discovery_cache``), produces no label this pass; the label the
previous agent instance put on the Node must not be removed for that (fail safe = keep). The
keys it decides: the raw NFD labels the source names for it (``SourceResult.undetermined``),
the static labels of every rule that reads the feature (a ``matchFeatures``/``matchAny`` term
on it, or on ``rule.matched`` after such a rule), and every label file that depends on one of
those keys. A rule that reads it and names its labels by template cannot be told in advance:
then every label is held (:data:`ALL`).
"""

from __future__ import annotations

from typing import Iterable, Mapping

from agent.rules.evaluate import RULE_MATCHED
from agent.rules.model import Catalogue, Rule, RuleOptions
from agent.rules.namespaces import autoprefix

ALL = None
"""Returned when the held keys cannot be told: hold every owned label."""


def _reads(rule: Rule, features: Iterable[str]) -> bool:
    names = set(features)
    terms = list(rule.match_features) + [t for branch in rule.match_any for t in branch.terms]
    return any(term.feature in names for term in terms)


def held_label_keys(catalogue: Catalogue | None, options: RuleOptions | None,
                    undetermined: Mapping[str, Iterable[str]]) -> frozenset[str] | None:
    """``undetermined``: "source.feature" -> the raw label keys it decides. Returns the label
    keys whose value depends on one of them, or :data:`ALL` when that cannot be told."""
    held = {key for keys in undetermined.values() for key in keys}
    if not undetermined:
        return frozenset(held)
    options = options or RuleOptions()
    read = set(undetermined)
    for rule in catalogue.rules() if catalogue is not None else ():
        if not _reads(rule, read):
            continue
        if rule.labels_template is not None:
            return ALL
        held.update(autoprefix(item.key, options) for item in rule.labels)
        read.add(RULE_MATCHED)  # later rules that read this one's outcome depend on it too
    for _ in range(len(catalogue.label_files) + 1 if catalogue is not None else 0):
        grown = {f"{f.namespace}/{f.name}" for f in catalogue.label_files
                 if any(d.key in held for d in f.dependencies)} - held
        if not grown:
            break
        held |= grown
    return frozenset(held)
