"""Which labels and extended resources an undetermined feature decides, so the reconciler keeps
them as they are.

Why: a feature a source could not determine, with no earlier answer to keep (``apply``, a
fresh agent's first pass: ``agent.runtime.discovery_cache``), produces nothing this pass; the
labels and counts the previous agent instance put on the Node must not be removed for that
(fail safe = keep). The label keys it decides: the raw NFD labels the source names for it
(``SourceResult.undetermined``, where ``pci-*`` stands for every key it is a prefix of), the
static labels of every rule that reads the feature (a ``matchFeatures``/``matchAny`` term on
it, or on ``rule.matched`` after such a rule), and every label file that depends on one of
those keys. A rule that reads it and names its labels by template cannot be told in advance:
then every label is held (:data:`ALL`). The extended resources it decides: those of every
rule that reads it, so held the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from agent.features import undetermined_key
from agent.rules.evaluate import RULE_MATCHED
from agent.rules.model import Catalogue, Rule, RuleOptions
from agent.rules.namespaces import autoprefix

ALL = None
"""Returned when the held keys cannot be told: hold every owned label."""


def _reads(rule: Rule, features: Iterable[str]) -> bool:
    """Whether a term of ``rule`` reads one of ``features`` (``pci.*``: any of that source's)."""
    names = set(features)
    sources = tuple(name[:-1] for name in names if name.endswith(".*"))
    terms = list(rule.match_features) + [t for branch in rule.match_any for t in branch.terms]
    return any(term.feature in names or term.feature.startswith(sources) for term in terms)


def _reading_rules(catalogue: Catalogue | None, undetermined: Mapping[str, Iterable[str]]) -> list[Rule]:
    """The rules that read an undetermined feature, or the outcome of a rule that does."""
    read = set(undetermined)
    found = []
    for rule in catalogue.rules() if catalogue is not None else ():
        if _reads(rule, read):
            found.append(rule)
            read.add(RULE_MATCHED)  # later rules that read this one's outcome depend on it too
    return found


def held_label_keys(catalogue: Catalogue | None, options: RuleOptions | None,
                    undetermined: Mapping[str, Iterable[str]]) -> frozenset[str] | None:
    """``undetermined``: "source.feature" -> the raw label keys it decides. Returns the label
    keys whose value depends on one of them (a key ending in ``*``: every key it is a prefix
    of), or :data:`ALL` when that cannot be told."""
    held = {key for keys in undetermined.values() for key in keys}
    if not undetermined:
        return frozenset(held)
    options = options or RuleOptions()
    for rule in _reading_rules(catalogue, undetermined):
        if rule.labels_template is not None:
            return ALL
        held.update(autoprefix(item.key, options) for item in rule.labels)
    label_files = catalogue.label_files if catalogue is not None else ()
    for _ in range(len(label_files) + 1):
        grown = {f"{f.namespace}/{f.name}" for f in label_files
                 if any(undetermined_key(held, d.key) for d in f.dependencies)} - held
        if not grown:
            break
        held |= grown
    return frozenset(held)


def held_resource_names(catalogue: Catalogue | None, options: RuleOptions | None,
                        undetermined: Mapping[str, Iterable[str]]) -> frozenset[str]:
    """The extended resources whose count depends on an undetermined feature: those of every
    rule that reads it (or reads the outcome of one that does)."""
    options = options or RuleOptions()
    return frozenset(autoprefix(item.key, options) for rule in _reading_rules(catalogue, undetermined)
                     for item in rule.extended_resources)
