"""Stage two of the data flow, features -> **desired state** -> changes -> writes.

``desired_state`` turns discovery's features and labels, the Node's foreign labels and the rule
catalogue into the ``DesiredNodeState`` (pure); ``derive`` returns it with the ``Derivation``
that ``explain`` reads (which rule, label file or raw label produced each item, or refused it).

Precedence, first to last: raw NFD labels from discovery, NodeFeatureRule outputs (later
rules override earlier ones, as in NFD), then label files (which never override a value a
rule chose).  This is the one place desired items are validated: every key, value, resource
name, quantity and taint is checked against the namespace policy and Kubernetes' own
validation; a refused item becomes a ``Problem`` (file:line, why) and is left out, so the
state holds only items the API server accepts and the diff checks none of them again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from agent.desired import DesiredNodeState, Problem, Provenance, Taint, annotation_bytes
from agent.device_claims import DeviceClaim, MatchedDevice
from agent.features import Feature
from agent.k8s_validation import (
    ANNOTATIONS_TOTAL_MAX,
    annotation_key_errors,
    extended_resource_count,
    extended_resource_name_errors,
    extended_resource_quantity_errors,
    label_value_errors,
    qualified_name_errors,
    taint_errors,
)
from agent.rules.evaluate import (
    RULE_MATCHED,
    EvaluationResult,
    Output,
    RuleResult,
    attribute_feature,
    evaluate_rules,
    resolve_reference,
)
from agent.rules.model import Catalogue, Dependency, LabelFile, RuleOptions
from agent.rules.namespaces import annotation_problem, autoprefix, namespace_problem, resource_problem, taint_problem

MAX_ANNOTATION_VALUE = 1024


@dataclass(frozen=True)
class LabelFileResult:
    label_file: LabelFile
    matched: bool
    dependency: Dependency | None = None
    source: str = ""  # "discovery", "node", "rule"
    value: str = ""


@dataclass(frozen=True)
class Derivation:
    """The desired state plus everything needed to explain it."""

    state: DesiredNodeState
    evaluation: EvaluationResult
    label_files: tuple[LabelFileResult, ...]
    raw_labels: Mapping[str, str]
    node_labels: Mapping[str, str]
    features: Mapping[str, Feature] = dataclasses.field(default_factory=dict)  # what the rules matched against


def _element_provenance(origin: str, result: RuleResult, output: Output, host_path: str = "") -> Provenance:
    matched_terms = [t for t in result.terms if t.matched]
    matched_terms += [t for b in result.branches if all(x.matched for x in b) for t in b]
    expression = "; ".join(t.term.describe() for t in matched_terms) or "(no conditions: always matches)"
    elements = output.elements
    instance = ", ".join(e.describe() for e in elements[:4]) + (f" (+{len(elements) - 4} more)" if len(elements) > 4 else "")
    hosts = host_path or output.host_path or ", ".join(dict.fromkeys(e.host_path for e in elements if e.host_path))
    return Provenance(origin, result.rule.qualified_name, expression, instance, hosts)


class _Builder:
    def __init__(self, options: RuleOptions):
        self.options = options
        self.labels: dict[str, str] = {}
        self.resources: dict[str, str] = {}
        self.annotations: dict[str, str] = {}
        self.taints: dict[tuple[str, str], Taint] = {}
        self.provenance: dict[str, Provenance] = {}
        self.problems: list[Problem] = []
        self.device_claims: dict[str, DeviceClaim] = {}

    def refuse(self, origin: str, item: str, reasons: list[str] | str | None) -> bool:
        if not reasons:
            return False
        text = reasons if isinstance(reasons, str) else "; ".join(reasons)
        self.problems.append(Problem(origin, item, f"skipped: {text}"))
        return True

    def label(self, key: str, value: str, provenance: Provenance) -> None:
        key = autoprefix(key, self.options)
        item = f"label {key}={value}"
        if self.refuse(provenance.origin, item, qualified_name_errors(key) + [f"value: {e}" for e in label_value_errors(value)]):
            return
        if self.refuse(provenance.origin, item, namespace_problem(key, self.options)):
            return
        self.labels[key] = value
        self.provenance[key] = provenance

    def resource(self, name: str, value: str, provenance: Provenance) -> None:
        name = autoprefix(name, self.options)
        item = f"extended resource {name}={value}"
        if self.refuse(provenance.origin, item, extended_resource_name_errors(name) + extended_resource_quantity_errors(value)):
            return
        if self.refuse(provenance.origin, item, resource_problem(name, self.options)):
            return
        self.resources[name] = extended_resource_count(value)
        self.provenance[name] = provenance

    def annotation(self, key: str, value: str, provenance: Provenance) -> None:
        key = autoprefix(key, self.options)
        item = f"annotation {key}"
        errors = annotation_key_errors(key)
        if len(value) > MAX_ANNOTATION_VALUE:
            errors.append(f"value longer than {MAX_ANNOTATION_VALUE} characters")
        if self.refuse(provenance.origin, item, errors) or self.refuse(provenance.origin, item, annotation_problem(key, self.options)):
            return
        self.annotations[key] = value
        self.provenance[key] = provenance

    def taint(self, key: str, value: str, effect: str, provenance: Provenance) -> None:
        item = f"taint {key}={value}:{effect}"
        if self.refuse(provenance.origin, item, taint_errors(key, value, effect)):
            return
        if self.refuse(provenance.origin, item, taint_problem(key, self.options)):
            return
        self.taints[(key, effect)] = Taint(key, effect, value)
        self.provenance[f"taint:{key}:{effect}"] = provenance


def _apply_rules(builder: _Builder, evaluation: EvaluationResult) -> None:
    for result in evaluation.rules:
        rule = result.rule
        if result.error:
            builder.problems.append(Problem(rule.origin, f"rule {rule.qualified_name}", result.error))
            continue
        if not result.matched:
            continue
        for origin, item, reason in result.problems:
            builder.problems.append(Problem(origin, f"{rule.qualified_name}: {item}", f"skipped: {reason}"))
        for output in result.labels:
            builder.label(output.key, output.value, _element_provenance(output.origin, result, output))
        for output in result.annotations:
            builder.annotation(output.key, output.value, _element_provenance(output.origin, result, output))
        for output in result.extended_resources:
            builder.resource(output.key, output.value, _element_provenance(output.origin, result, output))
        for spec, value in result.taints:
            out = Output(spec.key, value, spec.origin, result.elements)
            builder.taint(spec.key, value, spec.effect, _element_provenance(spec.origin, result, out))
        _claim_devices(builder, result)


def _claim_devices(builder: _Builder, result: RuleResult) -> None:
    """The matched device instances of each resource the rule declares ``devices:`` for, if
    the resource itself was accepted (a later rule's claim replaces an earlier one, as its
    count does)."""
    for declaration in result.rule.devices:
        name = autoprefix(declaration.resource, builder.options)
        if name not in builder.resources:
            continue
        seen: dict[tuple[object, ...], MatchedDevice] = {}
        for element in result.elements:
            if element.instance is not None and element.identity not in seen:
                seen[element.identity] = MatchedDevice(element.feature, element.instance.attributes,
                                                       element.instance.origin)
        declared = dataclasses.replace(declaration, resource=name)
        builder.device_claims[name] = DeviceClaim(declared, tuple(seen.values()))


def _declared_without_devices(builder: _Builder, catalogue: Catalogue) -> None:
    """A declared resource no rule matched this pass still has a claim, with no devices: its
    plugin keeps serving (the devices that left turn Unhealthy) and kubelet keeps owning it."""
    for rule in catalogue.rules():
        for declaration in rule.devices:
            name = autoprefix(declaration.resource, builder.options)
            if name in builder.device_claims or extended_resource_name_errors(name) or \
                    resource_problem(name, builder.options):
                continue
            builder.device_claims[name] = DeviceClaim(dataclasses.replace(declaration, resource=name), (), matched=False)


def _dependency_hit(dep: Dependency, layers: list[tuple[str, Mapping[str, str]]]) -> tuple[str, str] | None:
    for source, labels in layers:
        if dep.key in labels and (dep.value is None or labels[dep.key] == dep.value):
            return source, labels[dep.key]
    return None


def _apply_label_files(builder: _Builder, catalogue: Catalogue, raw: Mapping[str, str], node: Mapping[str, str],
                       label_origins: Mapping[str, str]) -> list[LabelFileResult]:
    """Any dependency present -> ``<ns>/<name>=true``; repeated to a fixpoint so a label file
    may depend on another label file's output (as the auto-labeller converges over passes)."""
    results: dict[str, LabelFileResult] = {}
    for _ in range(len(catalogue.label_files) + 1):
        layers = [("discovery", raw), ("node", node), ("rules and label files", builder.labels)]
        changed = False
        for label_file in catalogue.label_files:
            if label_file.key in results and results[label_file.key].matched:
                continue
            hit = None
            for dep in label_file.dependencies:
                found = _dependency_hit(dep, layers)
                if found:
                    hit = (dep, found)
                    break
            if hit is None:
                results[label_file.key] = LabelFileResult(label_file, False)
                continue
            dep, (source, value) = hit
            results[label_file.key] = LabelFileResult(label_file, True, dep, source, value)
            changed = True
            existing = builder.labels.get(label_file.key)
            if existing is not None:
                if existing != "true":
                    builder.problems.append(Problem(dep.origin, f"label {label_file.key}", f"not set to 'true': a rule already set it to {existing!r} ({builder.provenance[label_file.key].origin})"))
                continue
            host = label_origins.get(dep.key, "") if source == "discovery" else ""
            where = f"label {dep.key}={value} ({'on the Node' if source == 'node' else 'from ' + source})"
            builder.label(label_file.key, "true", Provenance(dep.origin, f"label file {label_file.path}", f"dependency {dep.describe()} present", where, host))
        if not changed:
            break
    return [results[k] for k in sorted(results)]


def _raw_labels(builder: _Builder, raw_labels: Mapping[str, str], label_origins: Mapping[str, str],
                features: Mapping[str, Feature], evaluation: EvaluationResult) -> None:
    """Discovery's and NodeFeature objects' labels; an ``@dom.feature.element`` value is
    resolved against the features and every matched rule's ``rule.matched``, as nfd-master's
    ``filterFeatureLabel`` resolves the NodeFeature labels once all rules have run."""
    final = {**features, RULE_MATCHED: attribute_feature(evaluation.matched_vars, "matched rules")}
    for key, value in sorted(raw_labels.items()):
        origin = label_origins.get(key, "")
        text = str(value)
        if text.startswith("@"):
            resolved, host, why = resolve_reference(text, final)
            if resolved is None:
                builder.problems.append(Problem(origin or "discovery", f"label {key}={text}", f"skipped: {why}"))
                continue
            text, origin = resolved, host or origin
        builder.label(key, text, Provenance("discovery", "", "raw NFD feature label", "", origin))


def derive(features: Mapping[str, Feature], raw_labels: Mapping[str, str], node_labels: Mapping[str, str],
           catalogue: Catalogue, options: RuleOptions | None = None, label_origins: Mapping[str, str] | None = None
           ) -> Derivation:
    """Pure: the desired node state and its trace.  ``state.problems`` are this pass's refused
    items and failed rules; load-time problems stay in ``catalogue.problems`` (logged once)."""
    options = options or RuleOptions()
    label_origins = label_origins or {}
    raw_labels = dict(raw_labels or {})
    node_labels = dict(node_labels or {})
    builder = _Builder(options)
    visible = {**node_labels, **raw_labels}
    evaluation = evaluate_rules(catalogue, features, visible)
    _raw_labels(builder, raw_labels, label_origins, features, evaluation)
    _apply_rules(builder, evaluation)
    _declared_without_devices(builder, catalogue)
    files = _apply_label_files(builder, catalogue, raw_labels, node_labels, label_origins)
    state = DesiredNodeState(
        labels=builder.labels, extended_resources=builder.resources, taints=tuple(builder.taints.values()),
        annotations=builder.annotations, provenance=builder.provenance, problems=tuple(builder.problems),
        device_claims=builder.device_claims,
    )
    size = annotation_bytes(state)
    if size > ANNOTATIONS_TOTAL_MAX:
        problem = Problem("plan", "annotations", (
            f"the desired annotations and the ownership record need {size} bytes, over the API server's "
            f"{ANNOTATIONS_TOTAL_MAX}-byte budget for all of a Node's annotations; the metadata write would be "
            "rejected: produce fewer labels (deny a namespace, disable a source) or shorter keys"))
        state = dataclasses.replace(state, problems=state.problems + (problem,))
    return Derivation(state, evaluation, tuple(files), raw_labels, node_labels, features)


def desired_state(features: Mapping[str, Feature], raw_labels: Mapping[str, str], node_labels: Mapping[str, str],
                  catalogue: Catalogue, options: RuleOptions | None = None,
                  label_origins: Mapping[str, str] | None = None) -> DesiredNodeState:
    """The contract used by ``apply`` and ``run``: only the desired state."""
    return derive(features, raw_labels, node_labels, catalogue, options, label_origins).state
