"""Rules checked against the features this agent can produce, so a misspelt name fails ``validate``.

NFD evaluates a term on a feature that does not exist as "no match", silently: ``feature:
usb.devic`` or ``matchExpressions: {Vendor: ...}`` on ``pci.device`` is a rule that can never
match. Each source declares the features it produces and, where the set is closed, their
element names (``FEATURES`` in ``agent/sources/<name>.py``); the rule engine adds its own
``rule.matched`` and ``node.label``. Against that vocabulary:

- a feature in a domain we produce (``usb``, ``rule``, ...) that no source produces is an
  **error**, with the closest known name;
- an element (``matchExpressions`` key, or the element of an ``@domain.feature.element``
  reference) that a feature with a closed set cannot carry is an **error**, with the closest;
- a feature in any other domain is a **warning**: it can only come from a third-party
  ``NodeFeature`` object, which ``validate`` cannot see.

Feature names compare case-insensitively (NFD looks features up that way), element names
exactly. ``difflib`` (standard library) picks the closest name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from agent.desired import Problem
from agent.features import ElementNames
from agent.rules.evaluate import NODE_LABEL, RULE_MATCHED
from agent.rules.model import COUNT_REFERENCE, Catalogue, FeatureTerm, Rule


def engine_vocabulary() -> dict[str, ElementNames]:
    """Every source's features plus the engine's own (both open)."""
    from agent.sources import feature_vocabulary

    return {**feature_vocabulary(), RULE_MATCHED: None, NODE_LABEL: None}


def vocabulary_problems(catalogue: Catalogue,
                        vocabulary: Mapping[str, ElementNames]) -> tuple[list[Problem], list[Problem]]:
    """``(errors, warnings)`` for every feature and element name the catalogue's rules use."""
    check = _Checker(vocabulary)
    for rule in catalogue.rules():
        for term in _terms(rule):
            check.term(term)
        for item in (*rule.labels, *rule.extended_resources):
            if item.value.startswith("@") and item.value != COUNT_REFERENCE:
                check.reference(item.value, item.origin)
    return check.errors, check.warnings


def _terms(rule: Rule) -> Iterator[FeatureTerm]:
    yield from rule.match_features
    for branch in rule.match_any:
        yield from branch.terms


def _closest(name: str, known: list[str]) -> str:
    import difflib  # here: only a wrong name needs it, so `run` does not load it

    found = difflib.get_close_matches(name, known, n=1)
    return f"; did you mean {found[0]!r}?" if found else ""


class _Checker:
    def __init__(self, vocabulary: Mapping[str, ElementNames]) -> None:
        self.features = {name.lower(): (name, elements) for name, elements in vocabulary.items()}
        self.domains = {name.split(".", 1)[0] for name in self.features}
        self.errors: list[Problem] = []
        self.warnings: list[Problem] = []

    def _feature(self, feature: str, origin: str) -> tuple[str, ElementNames] | None:
        """The known feature, or ``None`` after reporting the unknown one."""
        found = self.features.get(feature.lower())
        if found is not None:
            return found
        domain = feature.split(".", 1)[0].lower()
        if domain in self.domains:
            known = sorted(name for name, _ in self.features.values())
            self.errors.append(Problem(origin, f"feature {feature}",
                                       "no source produces this feature, so the rule can never match"
                                       + _closest(feature.lower(), [k.lower() for k in known])))
        else:
            self.warnings.append(Problem(origin, f"feature {feature}",
                                         f"domain {domain!r} is not one this agent discovers: the term "
                                         "matches only if a NodeFeature object provides it"))
        return None

    def _element(self, feature: str, elements: ElementNames, element: str, origin: str) -> None:
        if elements is None or element in elements:
            return
        self.errors.append(Problem(origin, f"{feature} element {element}",
                                   f"{feature} never has an element named {element!r}, so this can never match"
                                   + _closest(element, sorted(elements))))

    def term(self, term: FeatureTerm) -> None:
        found = self._feature(term.feature, term.origin)
        if found is None:
            return
        name, elements = found
        for expression in term.expressions:
            self._element(name, elements, expression.key, expression.origin or term.origin)

    def reference(self, value: str, origin: str) -> None:
        """``@domain.feature.element`` (shape already checked by the parser and static checks)."""
        domain, _, rest = value[1:].partition(".")
        feature, _, element = rest.partition(".")
        if not feature or not element:
            return
        found = self._feature(f"{domain}.{feature}", origin)
        if found is not None:
            self._element(found[0], found[1], element, origin)
