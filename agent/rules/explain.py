"""Explain a label, extended resource, annotation or taint key from a ``Derivation`` (pure text).

For a produced item: which rule or label file wrote it (file:line), which expression
matched, which feature instance and which host file supplied the value, and any other
producers it overrode.  For a missing one: every rule and label file that could produce
it and the first condition that failed (or the reason the value was refused).
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.desired import Provenance
from agent.rules.desired_state import Derivation
from agent.rules.evaluate import RuleResult
from agent.rules.model import RuleOptions
from agent.rules.namespaces import autoprefix


@dataclass(frozen=True)
class Explanation:
    target: str
    present: bool
    known: bool  # something produces or could produce it
    lines: tuple[str, ...]

    def text(self) -> str:
        return "\n".join(self.lines)


def _provenance_lines(prov: Provenance) -> list[str]:
    out = [f"  from:       {prov.origin}"]
    if prov.rule:
        out.append(f"  rule:       {prov.rule}")
    if prov.expression:
        out.append(f"  matched:    {prov.expression}")
    if prov.feature_instance:
        out.append(f"  feature:    {prov.feature_instance}")
    if prov.host_path:
        out.append(f"  host file:  {prov.host_path}")
    return out


def _rule_keys(result: RuleResult, options: RuleOptions) -> dict[str, str]:
    """Static keys a rule can write -> kind."""
    rule = result.rule
    keys: dict[str, str] = {}
    for kind, items in (("label", rule.labels), ("annotation", rule.annotations), ("extended resource", rule.extended_resources)):
        for item in items:
            keys[autoprefix(item.key, options)] = kind
            keys[item.key] = kind
    for taint in rule.taints:
        keys[taint.key] = "taint"
    if result.matched:
        for output in result.labels:
            keys[autoprefix(output.key, options)] = "label"
    return keys


def _mentions(text: str, target: str) -> bool:
    """A template that could print ``target``: it names the key, or its prefix and name part."""
    prefix, _, name = target.rpartition("/")
    return target in text or bool(prefix and prefix in text and name.split(".")[0] in text)


def _candidates(derivation: Derivation, target: str, options: RuleOptions) -> list[str]:
    """The rules and label files that produce ``target`` or could, and the refusals that name it."""
    lines = _rule_candidates(derivation, target, options) + _label_file_candidates(derivation, target)
    for problem in derivation.state.problems:
        if target in problem.item:
            lines.append(f"  refused: {problem}")
    return lines


def _rule_candidates(derivation: Derivation, target: str, options: RuleOptions) -> list[str]:
    lines = []
    for result in derivation.evaluation.rules:
        rule = result.rule
        kind = _rule_keys(result, options).get(target)
        templated = rule.labels_template is not None and not result.matched and _mentions(rule.labels_template.text, target)
        if not kind and not templated:
            continue
        state = "matched" if result.matched else "did not match"
        lines.append(f"  rule {rule.qualified_name} ({rule.origin}) {state}" + (" [template may produce it]" if templated and not kind else ""))
        if not result.matched:
            lines.append(f"    failed: {result.failure()}")
    return lines


def _label_file_candidates(derivation: Derivation, target: str) -> list[str]:
    lines = []
    for file_result in derivation.label_files:
        if file_result.label_file.key != target:
            continue
        lf = file_result.label_file
        if file_result.dependency is not None:  # set exactly when it matched
            lines.append(f"  label file {lf.path} matched on {file_result.dependency.describe()} ({file_result.source})")
        else:
            deps = ", ".join(d.describe() for d in lf.dependencies) or "(none)"
            lines.append(f"  label file {lf.path}: none of its dependencies is on the node: {deps}")
    return lines


def explain(derivation: Derivation, target: str, options: RuleOptions | None = None, hidden: str | None = None) -> Explanation:
    """``hidden``: why discovery found the raw label ``target`` stands for but its label filter
    hides it (a source setting), for a label nothing else produces."""
    options = options or RuleOptions()
    state = derivation.state
    key = target
    kind = None
    value = None
    if target in state.labels:
        kind, value = "label", state.labels[target]
    elif target in state.extended_resources:
        kind, value = "extended resource", state.extended_resources[target]
    elif target in state.annotations:
        kind, value = "annotation", state.annotations[target]
    else:
        taint = next((t for t in state.taints if t.key == target), None)
        if taint is not None:
            kind, value, key = "taint", taint.to_string(), f"taint:{taint.key}:{taint.effect}"
    if kind is not None:
        lines = [f"{target}: {kind} = {value}"] + _provenance_lines(state.provenance[key])
        others = [line for line in _candidates(derivation, target, options) if "refused" not in line]
        if len(others) > 1:
            lines.append("  all producers:")
            lines += ["  " + line for line in others]
        return Explanation(target, True, True, tuple(lines))
    candidates = _candidates(derivation, target, options)
    if hidden:
        return Explanation(target, False, True, (f"{target}: not produced: discovered, and hidden by {hidden}", *candidates))
    if not candidates:
        return Explanation(target, False, False, (f"{target}: not produced, and no rule or label file in the catalogue can produce it",))
    return Explanation(target, False, True, (f"{target}: not produced", *candidates))
