"""Match one ``matchFeatures`` term against discovered features, keeping a trace for ``explain``.

NFD semantics (``pkg/apis/nfd/nodefeaturerule``): feature names are looked up
case-insensitively; a missing feature fails the term (even ``DoesNotExist``); for flag and
attribute features each expression looks at one key; for instance features all expressions
must hold in the *same* instance and every matching instance is kept (that list feeds
templates and our ``@count``).  ``matchName`` matches element names.  Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from agent.features import Feature, Instance
from agent.rules.expressions import RuleEvaluationError, evaluate
from agent.rules.model import Expression, FeatureTerm

#: attributes that identify one device instance, in order of preference (for ``@count``)
IDENTITY_ATTRIBUTES = ("address", "sysfs_name", "name")


@dataclass(frozen=True)
class MatchedElement:
    """One flag, attribute or instance that satisfied a term."""

    feature: str
    name: str = ""  # flag/attribute name ("" for an instance)
    value: str | None = None
    instance: Instance | None = None
    host_path: str = ""

    @property
    def identity(self) -> tuple:
        """What makes two matches the same physical device (USB interfaces collapse)."""
        if self.instance is None:
            return (self.feature, self.name)
        attrs = self.instance.attributes
        for key in IDENTITY_ATTRIBUTES:
            if attrs.get(key):
                return (self.feature, key, attrs[key])
        return (self.feature, self.instance.origin or tuple(sorted(attrs.items())))

    def describe(self) -> str:
        if self.instance is None:
            return f"{self.feature}.{self.name}" + (f"={self.value}" if self.value is not None else "")
        attrs = self.instance.attributes
        ident = next((f"{k}={attrs[k]}" for k in IDENTITY_ATTRIBUTES if attrs.get(k)), "")
        shown = ", ".join(f"{k}={attrs[k]}" for k in ("class", "vendor", "device") if k in attrs)
        inner = ", ".join(p for p in (ident, shown) if p)
        return f"{self.feature}[{inner}]"

    def template_item(self) -> dict:
        if self.instance is not None:
            return dict(self.instance.attributes)
        if self.value is None:
            return {"Name": self.name}
        return {"Name": self.name, "Value": self.value}


@dataclass(frozen=True)
class TermResult:
    term: FeatureTerm
    matched: bool
    elements: tuple[MatchedElement, ...] = ()
    reason: str = ""  # why it failed (or "" when matched)


def lookup(features: Mapping[str, Feature], name: str) -> tuple[str, Feature] | None:
    if name in features:
        return name, features[name]
    lower = name.lower()
    for key, feature in features.items():
        if key.lower() == lower:
            return key, feature
    return None


def _key_state(feature: Feature, key: str) -> tuple[bool, str | None]:
    if key in feature.attributes:
        return True, feature.attributes[key]
    return key in feature.flags, None


def _flat_term(name: str, feature: Feature, term: FeatureTerm) -> TermResult:
    elements: list[MatchedElement] = []
    for expr in term.expressions:
        present, value = _key_state(feature, expr.key)
        if not evaluate(expr, present, value):
            shown = "absent" if not present else ("present (flag)" if value is None else f"value {value!r}")
            return TermResult(term, False, reason=f"{name}: {expr.describe()} is false ({expr.key} {shown}) [{expr.origin}]")
        if present:
            elements.append(MatchedElement(name, expr.key, value, host_path=feature.origin_of(expr.key)))
    if term.match_name is not None:
        names = sorted(set(feature.flags) | set(feature.attributes))
        hits = [n for n in names if evaluate(term.match_name, True, n)]
        if not hits:
            return TermResult(term, False, reason=f"{name}: no element name satisfies matchName {term.match_name.describe()} [{term.match_name.origin}]")
        elements += [MatchedElement(name, n, feature.attributes.get(n), host_path=feature.origin_of(n)) for n in hits]
    return TermResult(term, True, tuple(elements))


def _instance_matches(instance: Instance, term: FeatureTerm) -> Expression | None:
    """The first expression ``instance`` fails, or None when all hold."""
    attrs = instance.attributes
    for expr in term.expressions:
        if not evaluate(expr, expr.key in attrs, attrs.get(expr.key)):
            return expr
    if term.match_name is not None and not any(evaluate(term.match_name, True, n) for n in attrs):
        return term.match_name
    return None


def _instance_term(name: str, feature: Feature, term: FeatureTerm) -> TermResult:
    elements = []
    failures: dict[Expression, int] = {}
    for instance in feature.instances:
        failed = _instance_matches(instance, term)
        if failed is None:
            elements.append(MatchedElement(name, instance=instance, host_path=instance.origin))
        else:
            failures[failed] = failures.get(failed, 0) + 1
    if elements:
        return TermResult(term, True, tuple(elements))
    if not feature.instances:
        return TermResult(term, False, reason=f"{name}: no instances discovered")
    # name the condition that rules out the most instances: that is the one to look at
    worst, count = max(failures.items(), key=lambda item: item[1])
    return TermResult(term, False, reason=(
        f"{name}: no instance satisfies all conditions; {worst.describe()} fails for {count} of "
        f"{len(feature.instances)} instance(s) [{worst.origin}]"))


def match_term(features: Mapping[str, Feature], term: FeatureTerm) -> TermResult:
    """Evaluate one term; raises ``RuleEvaluationError`` (bad integer, regex) like NFD."""
    found = lookup(features, term.feature)
    if found is None:
        return TermResult(term, False, reason=f"feature {term.feature} not discovered on this node [{term.origin}]")
    name, feature = found
    if feature.instances and not feature.flags and not feature.attributes:
        return _instance_term(name, feature, term)
    return _flat_term(name, feature, term)


def match_terms(features: Mapping[str, Feature], terms: tuple[FeatureTerm, ...]) -> tuple[bool, tuple[TermResult, ...]]:
    """AND over ``terms``; every term is evaluated (explain wants them all).  An empty list
    matches.  A ``RuleEvaluationError`` propagates to fail the whole rule."""
    results = tuple(match_term(features, term) for term in terms)
    return all(r.matched for r in results), results


__all__ = ["MatchedElement", "RuleEvaluationError", "TermResult", "lookup", "match_term", "match_terms"]
