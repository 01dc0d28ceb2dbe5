"""Match one ``matchFeatures`` term against discovered features, keeping a trace for ``explain``.

NFD semantics (``pkg/apis/nfd/nodefeaturerule/expression.go`` ``MatchMulti``,
``MatchNamesMulti``; ``rule.go`` ``evaluateFeatureMatcher``): feature names are looked up
case-insensitively; a missing feature fails the term (even ``DoesNotExist``); over a
feature's flags and attributes together each expression must hold in either (``DoesNotExist``
in both), and the term holds; over its instances all expressions must hold in the *same*
instance; the term holds when either part does, and its matched elements (what templates and
our ``@count`` see) are both parts' in NFD's order.  A feature with zero instances and no
flags or attributes fails every term.  ``matchName`` matches element names.  Pure: no I/O.
``tests/rules/test_nfd_tables.py`` runs NFD's own unit-test tables through this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

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
    def identity(self) -> tuple[object, ...]:
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

    def template_item(self) -> dict[str, str]:
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


def _absent_reason(name: str, feature: Feature, expr: Expression) -> str:
    if expr.key in feature.attributes:
        shown = f"value {feature.attributes[expr.key]!r}"
    elif expr.key in feature.flags:
        shown = "present (flag)"
    else:
        shown = "absent"
    return f"{name}: {expr.describe()} is false ({expr.key} {shown}) [{expr.origin}]"


def _flat(name: str, feature: Feature, term: FeatureTerm) -> tuple[bool, list[MatchedElement], str]:
    """NFD's ``MatchMulti`` over the flag and attribute sets: each expression must hold in
    either (``DoesNotExist`` in both); a ``DoesNotExist`` key is a matched element too."""
    keys = feature.flags if "flags" in feature.kinds else None
    values = feature.attributes if "attributes" in feature.kinds else None
    if keys is None and values is None:
        return False, [], ""
    elements: list[MatchedElement] = []
    for expr in term.expressions:
        found = _flat_elements(name, feature, expr, keys, values)
        if found is None:
            return False, [], _absent_reason(name, feature, expr)
        elements.extend(found)
    elements.sort(key=lambda e: e.name)  # NFD sorts by Name; a flag before the attribute of its name
    return True, elements, ""


def _flat_elements(name: str, feature: Feature, expr: Expression, keys: AbstractSet[str] | None,
                   values: Mapping[str, str] | None) -> list[MatchedElement] | None:
    """What ``expr`` matches among the flags (``keys``) and the attributes (``values``), a set
    being None when the feature has none of that kind: the flag, then the attribute; None when
    it holds in neither (or, for ``DoesNotExist``, not in both)."""
    in_keys = keys is not None and evaluate(expr, expr.key in keys, None)
    in_values = values is not None and evaluate(expr, expr.key in values, values.get(expr.key))
    both_needed = expr.op == "DoesNotExist" and ((keys is not None and not in_keys) or (values is not None and not in_values))
    if both_needed or not (in_keys or in_values):
        return None
    origin = feature.origin_of(expr.key)
    found: list[MatchedElement] = []
    if in_keys:
        found.append(MatchedElement(name, expr.key, None, host_path=origin))
    if in_values and values is not None:
        found.append(MatchedElement(name, expr.key, values.get(expr.key, ""), host_path=origin))
    return found


def _instance_fails(instance: Instance, term: FeatureTerm) -> Expression | None:
    """The first expression ``instance`` fails, or None when all hold (NFD's ``MatchValues``)."""
    attrs = instance.attributes
    for expr in term.expressions:
        if not evaluate(expr, expr.key in attrs, attrs.get(expr.key)):
            return expr
    return None


def _instances(name: str, feature: Feature, term: FeatureTerm) -> tuple[list[MatchedElement], str]:
    """NFD's ``MatchGetInstances``: every instance in which all expressions hold."""
    if "instances" not in feature.kinds:
        return [], ""
    if not feature.instances:
        return [], f"{name}: no instances discovered"
    elements = []
    failures: dict[Expression, int] = {}
    for instance in feature.instances:
        failed = _instance_fails(instance, term)
        if failed is None:
            elements.append(MatchedElement(name, instance=instance, host_path=instance.origin))
        else:
            failures[failed] = failures.get(failed, 0) + 1
    if elements:
        return elements, ""
    # name the condition that rules out the most instances: that is the one to look at
    worst, count = max(failures.items(), key=lambda item: item[1])
    return [], (f"{name}: no instance satisfies all conditions; {worst.describe()} fails for {count} of "
                f"{len(feature.instances)} instance(s) [{worst.origin}]")


def _names(name: str, feature: Feature, expr: Expression) -> list[MatchedElement]:
    """NFD's ``MatchNamesMulti``: flag and attribute names (sorted), then every instance with
    an attribute name that matches."""
    found = [MatchedElement(name, n, None, host_path=feature.origin_of(n)) for n in feature.flags if evaluate(expr, True, n)]
    found += [MatchedElement(name, n, v, host_path=feature.origin_of(n)) for n, v in feature.attributes.items() if evaluate(expr, True, n)]
    found.sort(key=lambda e: e.name)
    found += [MatchedElement(name, instance=i, host_path=i.origin) for i in feature.instances
              if any(evaluate(expr, True, n) for n in i.attributes)]
    return found


def match_term(features: Mapping[str, Feature], term: FeatureTerm) -> TermResult:
    """Evaluate one term as NFD's ``evaluateFeatureMatcher`` does for it: ``matchExpressions``
    (when given) over flags and attributes together, or over instances; then ``matchName``.
    Raises ``RuleEvaluationError`` (bad integer, regex) like NFD."""
    found = lookup(features, term.feature)
    if found is None:
        return TermResult(term, False, reason=f"feature {term.feature} not discovered on this node [{term.origin}]")
    name, feature = found
    elements: list[MatchedElement] = []
    if term.expressions_given:
        flat_ok, flat_elements, flat_reason = _flat(name, feature, term)
        instance_elements, instance_reason = _instances(name, feature, term)
        if not flat_ok and not instance_elements:
            reason = "; ".join(r for r in (flat_reason, instance_reason) if r) or f"{name}: empty feature"
            return TermResult(term, False, reason=reason)
        elements = flat_elements + instance_elements
    if term.match_name is not None:
        hits = _names(name, feature, term.match_name)
        if not hits:
            return TermResult(term, False, reason=f"{name}: no element name satisfies matchName {term.match_name.describe()} [{term.match_name.origin}]")
        elements += hits
    return TermResult(term, True, tuple(elements))


def match_terms(features: Mapping[str, Feature], terms: tuple[FeatureTerm, ...],
                may_raise: bool = True) -> tuple[bool, tuple[TermResult, ...]]:
    """AND over ``terms``; an empty list matches. Every term is evaluated (explain wants them
    all), but as NFD stops at the first term that fails, an evaluation error (bad integer,
    regex) fails the rule only when no earlier term failed and ``may_raise`` (NFD reaches it);
    otherwise it is that term's reason."""
    results: list[TermResult] = []
    matched = True
    for term in terms:
        try:
            result = match_term(features, term)
        except RuleEvaluationError as exc:
            if matched and may_raise:
                raise
            result = TermResult(term, False, reason=f"{term.feature}: {exc} (not reached by NFD) [{term.origin}]")
        matched = matched and result.matched
        results.append(result)
    return matched, tuple(results)


__all__ = ["MatchedElement", "RuleEvaluationError", "TermResult", "lookup", "match_term", "match_terms"]
