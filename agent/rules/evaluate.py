"""Run the catalogue's NodeFeatureRules in order over a feature set, keeping a trace per rule.

Order and back-references follow NFD: rule objects by ``metadata.name``, rules in file
order, and the labels and vars of every matched rule become attributes of the ``rule.matched``
feature for the rules after it.  Our additions (documented in ``labels/README.md``):

- ``node.label``: an attribute feature holding the node's labels (foreign labels already on
  the Node plus this pass's raw discovery labels), so rules can build on a device plugin's
  ``kkohtaka.org/edgetpu``;
- ``@count`` as an ``extendedResources`` value: the number of distinct device instances the
  rule matched (``MatchedElement.identity``), 1 when it matched on flags/attributes only.

An ``@rule.matched.<key>`` value of a label, annotation or extended resource is resolved
after every rule has run, against the labels and vars of all matched rules (the same rule and
later ones included), as nfd-master resolves ``@`` values once all NodeFeatureRules have fed
``rule.matched`` (``filterFeatureLabel`` and ``filterExtendedResource`` after
``processNodeFeatureRule``); until then ``rule.matched`` holds the reference as written, as in
NFD.

Evaluation is pure and never raises: a rule whose expression or template fails is reported
in its ``RuleResult.error`` and contributes nothing, as NFD fails that rule.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from agent.features import Feature
from agent.gotemplate import TemplateError, compile_template, parse_key_value_lines
from agent.rules.expressions import RuleEvaluationError
from agent.rules.matcher import MatchedElement, TermResult, match_terms
from agent.rules.model import COUNT_REFERENCE, Catalogue, OutputItem, Rule, TaintSpec, TemplateSpec

RULE_MATCHED = "rule.matched"
NODE_LABEL = "node.label"
LATE_REFERENCE = f"@{RULE_MATCHED}."


@dataclass(frozen=True)
class Output:
    """One key/value a matched rule produced, with where it was written and why."""

    key: str
    value: str
    origin: str  # file:line of the item or template
    elements: tuple[MatchedElement, ...] = ()
    host_path: str = ""  # where an @reference's value was read
    late: bool = False  # an @rule.matched reference, resolved once every rule has run


@dataclass(frozen=True)
class RuleResult:
    rule: Rule
    matched: bool
    terms: tuple[TermResult, ...] = ()
    branches: tuple[tuple[TermResult, ...], ...] = ()  # matchAny, one tuple per branch
    error: str = ""
    labels: tuple[Output, ...] = ()
    vars: tuple[Output, ...] = ()
    annotations: tuple[Output, ...] = ()
    extended_resources: tuple[Output, ...] = ()
    taints: tuple[tuple[TaintSpec, str], ...] = ()  # (spec, resolved value)
    problems: tuple[tuple[str, str, str], ...] = ()  # (origin, item, reason) for values that could not resolve

    @property
    def elements(self) -> tuple[MatchedElement, ...]:
        found = [e for t in self.terms for e in t.elements]
        found += [e for branch in self.branches if all(t.matched for t in branch) for t in branch for e in t.elements]
        return tuple(found)

    def failure(self) -> str:
        """The first condition that kept this rule from matching."""
        if self.error:
            return self.error
        for term in self.terms:
            if not term.matched:
                return term.reason
        if self.branches and not any(all(t.matched for t in b) for b in self.branches):
            reasons = [next(t.reason for t in b if not t.matched) for b in self.branches]
            return "no matchAny branch matched: " + " | ".join(reasons)
        return ""


@dataclass
class EvaluationResult:
    rules: list[RuleResult] = field(default_factory=list)
    matched_vars: dict[str, str] = field(default_factory=dict)


def attribute_feature(values: Mapping[str, str], origin: str = "") -> Feature:
    return Feature(attributes=dict(values), origin=origin)


def _template_data(groups: list[list[MatchedElement]]) -> list[dict[str, dict[str, list[dict[str, str]]]]]:
    """NFD's template data per match set: ``{dom: {feature: [items]}}``."""
    out = []
    for elements in groups:
        data: dict[str, dict[str, list[dict[str, str]]]] = {}
        for element in elements:
            dom, _, feat = element.feature.partition(".")
            data.setdefault(dom, {}).setdefault(feat, []).append(element.template_item())
        out.append(data)
    return out


def _render(template: TemplateSpec, origin: str, groups: list[list[MatchedElement]]) -> list[Output]:
    outputs: dict[str, Output] = {}
    compiled = compile_template(template.text)
    for data in _template_data(groups):
        rendered = compiled.render(data, max_steps=template.max_steps, max_output=template.max_output)
        for key, value in parse_key_value_lines(rendered).items():
            outputs[key] = Output(key, value, origin)
    return list(outputs.values())


def _resolve(value: str, features: Mapping[str, Feature], count: int) -> tuple[str | None, str, str]:
    """``@dom.feature.element`` / ``@count`` -> (value, host path, why-not)."""
    if not value.startswith("@"):
        return value, "", ""
    if value == COUNT_REFERENCE:
        return str(count), "", ""
    parts = value[1:].split(".", 2)
    if len(parts) != 3:
        return None, "", f"reference {value!r} must be @<domain>.<feature>.<element>"
    from agent.rules.matcher import lookup

    found = lookup(features, f"{parts[0]}.{parts[1]}")
    if found is None or parts[2] not in found[1].attributes:
        return None, "", f"reference {value!r}: attribute not discovered on this node"
    return found[1].attributes[parts[2]], found[1].origin_of(parts[2]), ""


def resolve_reference(value: str, features: Mapping[str, Feature]) -> tuple[str | None, str, str]:
    """An ``@dom.feature.element`` value outside a rule -> (value, host path, why-not)."""
    if value == COUNT_REFERENCE:
        return None, "", f"{COUNT_REFERENCE} counts a rule's matched devices; a label outside a rule has none"
    return _resolve(value, features, 0)


def _count(elements: tuple[MatchedElement, ...]) -> int:
    devices = {e.identity for e in elements if e.instance is not None}
    return len(devices) if devices else 1


def _match(rule: Rule, features: Mapping[str, Feature]) -> tuple[bool, tuple[TermResult, ...], tuple[tuple[TermResult, ...], ...]]:
    """NFD's ``Execute`` order: ``matchAny`` branches first (an error counts while no branch
    has matched yet, or always when the rule has a template, as NFD then runs every branch),
    then ``matchFeatures`` only when ``matchAny`` held. Every branch and term is still
    evaluated for explain and ``@count``."""
    templates = rule.labels_template is not None or rule.vars_template is not None
    branches = []
    any_hit = False
    for branch in rule.match_any:
        hit, results = match_terms(features, branch.terms, may_raise=templates or not any_hit)
        any_hit = any_hit or hit
        branches.append(results)
    reached = any_hit or not rule.match_any
    matched, terms = match_terms(features, rule.match_features, may_raise=reached)
    return matched and reached, terms, tuple(branches)


def run_rule(rule: Rule, features: Mapping[str, Feature]) -> RuleResult:
    try:
        matched, terms, branches = _match(rule, features)
    except RuleEvaluationError as exc:
        return RuleResult(rule, False, error=f"rule failed: {exc}")
    branch_hits = [b for b in branches if all(t.matched for t in b)]
    result = RuleResult(rule, matched, terms, branches)
    if not matched:
        return result
    # NFD runs a template once per matching matchAny branch over that branch's elements, and
    # once over matchFeatures' elements; a rule with neither runs no template
    groups = [[e for t in b for e in t.elements] for b in branch_hits]
    if rule.match_features:
        groups.append([e for t in terms for e in t.elements])
    elements = result.elements
    count = _count(elements)
    problems: list[tuple[str, str, str]] = []

    def items(specs: tuple[OutputItem, ...], template: TemplateSpec | None = None, late: bool = True) -> tuple[Output, ...]:
        out: dict[str, Output] = {}
        if template is not None:
            for o in _render(template, template.origin, groups):
                out[o.key] = o
        for spec in specs:  # static items override the template (NFD)
            if late and spec.value.startswith(LATE_REFERENCE):
                out[spec.key] = Output(spec.key, spec.value, spec.origin, elements, late=True)
                continue
            value, host, why = _resolve(spec.value, features, count)
            if value is None:
                problems.append((spec.origin, spec.key, why))
                continue
            out[spec.key] = Output(spec.key, value, spec.origin, elements, host)
        return tuple(Output(o.key, o.value, o.origin, o.elements or elements, o.host_path, o.late) for o in out.values())

    try:
        labels = items(rule.labels, rule.labels_template)
        variables = items(rule.vars, rule.vars_template, late=False)
    except TemplateError as exc:
        return RuleResult(rule, False, terms, branches, error=f"template failed: {exc}")
    taints = tuple((t, t.value) for t in rule.taints)
    return RuleResult(
        rule, True, terms, branches, labels=labels, vars=variables,
        annotations=items(rule.annotations), extended_resources=items(rule.extended_resources),
        taints=taints, problems=tuple(problems),
    )


def _reads_matched(rule: Rule) -> bool:
    terms = (*rule.match_features, *(term for branch in rule.match_any for term in branch.terms))
    return any(term.feature == RULE_MATCHED for term in terms)


def evaluate_rules(catalogue: Catalogue, features: Mapping[str, Feature], node_labels: Mapping[str, str]) -> EvaluationResult:
    """Run every rule in order; ``features`` are not modified."""
    working = dict(features)
    working[NODE_LABEL] = attribute_feature(node_labels, "node labels")
    result = EvaluationResult()
    for rule in catalogue.rules():
        if _reads_matched(rule):  # built only for the rules that read it: a copy of every earlier output
            working[RULE_MATCHED] = attribute_feature(result.matched_vars, "earlier rules")
        outcome = run_rule(rule, working)
        result.rules.append(outcome)
        if outcome.matched:
            for output in outcome.labels + outcome.vars:
                result.matched_vars[output.key] = output.value
    final = {RULE_MATCHED: attribute_feature(result.matched_vars, "matched rules")}
    result.rules = [_resolve_late(outcome, final) for outcome in result.rules]
    return result


def _resolve_late(outcome: RuleResult, final: Mapping[str, Feature]) -> RuleResult:
    """``outcome`` with its ``@rule.matched`` references resolved against every matched rule."""
    if not any(o.late for o in (*outcome.labels, *outcome.annotations, *outcome.extended_resources)):
        return outcome
    problems = list(outcome.problems)

    def resolved(outputs: tuple[Output, ...]) -> tuple[Output, ...]:
        kept = []
        for output in outputs:
            if output.late:
                value, _host, why = _resolve(output.value, final, 1)
                if value is None:
                    problems.append((output.origin, output.key, why.replace("discovered on this node",
                                                                            "produced by any matched rule")))
                    continue
                output = Output(output.key, value, output.origin, output.elements)
            kept.append(output)
        return tuple(kept)

    return dataclasses.replace(outcome, labels=resolved(outcome.labels), annotations=resolved(outcome.annotations),
                               extended_resources=resolved(outcome.extended_resources), problems=tuple(problems))
