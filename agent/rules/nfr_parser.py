"""Parse NodeFeatureRule YAML (``nfd.k8s-sigs.io/v1alpha1``) into ``RuleSet`` objects.

Strict where a typo would change meaning: an unknown field (``matchFeature``) would
otherwise leave a rule with no conditions, which NFD treats as "always matches".  A bad
rule is skipped with a ``Problem`` naming its file:line; the rest of the file still loads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import yaml

from agent.desired import Problem
from agent.gotemplate import TemplateError, compile_template
from agent.rules.device_specs import DeviceSpecError, parse_devices
from agent.rules.expressions import check_expression
from agent.rules.model import (
    VALUE_TYPES,
    AnyBranch,
    Expression,
    FeatureTerm,
    OutputItem,
    Rule,
    RuleSet,
    TaintSpec,
    TemplateSpec,
)
from agent.rules.yaml_lines import LineList, LineMap, YamlShapeError, load_documents

API_VERSION = "nfd.k8s-sigs.io/v1alpha1"
KIND = "NodeFeatureRule"
RULE_FIELDS = {
    "name", "labels", "labelsTemplate", "annotations", "extendedResources", "taints",
    "vars", "varsTemplate", "matchFeatures", "matchAny",
    "devices",  # our extension: what the device plugin passes (agent/rules/device_specs.py)
}
MAX_ANNOTATION_VALUE = 1024


class RuleShapeError(ValueError):
    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.line = line


def _scalar_text(value: Any, what: str, line: int) -> str:
    """CRD fields are strings; YAML ``true``/``1`` become Go's ``%v`` text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (str, int, float)):
        return str(value)
    raise RuleShapeError(f"{what} must be a string, not {type(value).__name__}", line)


def _mapping(value: Any, what: str, line: int) -> LineMap:
    if not isinstance(value, LineMap):
        raise RuleShapeError(f"{what} must be a mapping", getattr(value, "line", line))
    return value


def _list(value: Any, what: str, line: int) -> LineList:
    if not isinstance(value, LineList):
        raise RuleShapeError(f"{what} must be a list", getattr(value, "line", line))
    return value


class _Parser:
    def __init__(self, path: str, locate: Callable[[int], str] | None = None):
        self.path = path
        self.locate = locate

    def at(self, line: int) -> str:
        return f"{self.path}:{self.locate(line) if self.locate else line}"

    def expression(self, key: str, spec: Any, line: int) -> Expression:
        spec = _mapping(spec, f"expression {key!r}", line)
        unknown = set(spec) - {"op", "value", "type"}
        if unknown:
            raise RuleShapeError(f"expression {key!r}: unknown field(s) {sorted(unknown)}", spec.line)
        if "op" not in spec:
            raise RuleShapeError(f"expression {key!r}: op is required", spec.line)
        values = spec.get("value", LineList())
        if values is None:
            values = LineList()
        values = _list(values, f"expression {key!r} value", spec.line_of("value"))
        texts = tuple(_scalar_text(v, f"expression {key!r} value", spec.line_of("value")) for v in values)
        value_type = spec.get("type") or ""
        if value_type not in VALUE_TYPES:
            raise RuleShapeError(f"expression {key!r}: unknown type {value_type!r} (only 'version')", spec.line_of("type"))
        expr = Expression(key, _scalar_text(spec["op"], "op", spec.line_of("op")), texts, value_type, self.at(line))
        errors = check_expression(expr)
        if errors:
            raise RuleShapeError(f"expression {expr.describe()}: {'; '.join(errors)}", line)
        return expr

    def term(self, spec: Any, line: int) -> FeatureTerm:
        spec = _mapping(spec, "matchFeatures entry", line)
        unknown = set(spec) - {"feature", "matchExpressions", "matchName"}
        if unknown:
            raise RuleShapeError(f"matchFeatures entry: unknown field(s) {sorted(unknown)}", spec.line)
        feature = spec.get("feature")
        if not isinstance(feature, str) or feature.count(".") < 1:
            raise RuleShapeError("matchFeatures entry: feature must be '<domain>.<feature>'", spec.line_of("feature"))
        expressions = []
        raw = spec.get("matchExpressions") or LineMap()
        for key, body in _mapping(raw, "matchExpressions", spec.line_of("matchExpressions")).items():
            expressions.append(self.expression(key, body, raw.line_of(key)))
        match_name = None
        if spec.get("matchName") is not None:
            match_name = self.expression("", spec["matchName"], spec.line_of("matchName"))
        given = spec.get("matchExpressions") is not None
        return FeatureTerm(feature, tuple(expressions), match_name, self.at(spec.line), given)

    def terms(self, spec: Any, line: int) -> tuple[FeatureTerm, ...]:
        items = _list(spec, "matchFeatures", line)
        return tuple(self.term(item, items.line_of(i)) for i, item in enumerate(items))

    def items(self, spec: Any, what: str, line: int) -> tuple[OutputItem, ...]:
        if spec is None:
            return ()
        spec = _mapping(spec, what, line)
        return tuple(
            OutputItem(key, _scalar_text(value, f"{what} {key!r}", spec.line_of(key)), self.at(spec.line_of(key)))
            for key, value in spec.items()
        )

    def taints(self, spec: Any, line: int) -> tuple[TaintSpec, ...]:
        if spec is None:
            return ()
        out = []
        items = _list(spec, "taints", line)
        for index, item in enumerate(items):
            item = _mapping(item, "taint", items.line_of(index))
            unknown = set(item) - {"key", "value", "effect", "timeAdded"}
            if unknown:
                raise RuleShapeError(f"taint: unknown field(s) {sorted(unknown)}", item.line)
            if not item.get("key") or not item.get("effect"):
                raise RuleShapeError("taint: key and effect are required", item.line)
            out.append(TaintSpec(
                _scalar_text(item["key"], "taint key", item.line), _scalar_text(item["effect"], "taint effect", item.line),
                _scalar_text(item.get("value") or "", "taint value", item.line), self.at(item.line),
            ))
        return tuple(out)

    def template(self, spec: Any, what: str, line: int) -> TemplateSpec | None:
        if spec is None or spec == "":
            return None
        if not isinstance(spec, str):
            raise RuleShapeError(f"{what} must be a string", line)
        try:
            compile_template(spec)  # syntax errors surface at load (validate), not per node
        except TemplateError as exc:
            raise RuleShapeError(f"{what}: {exc}", line) from None
        return TemplateSpec(spec, self.at(line))

    def rule(self, spec: Any, rule_set: str, line: int) -> Rule:
        spec = _mapping(spec, "rule", line)
        unknown = set(spec) - RULE_FIELDS
        if unknown:
            raise RuleShapeError(f"rule: unknown field(s) {sorted(unknown)}", spec.line)
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise RuleShapeError("rule: name is required", spec.line)
        branches = []
        if spec.get("matchAny") is not None:
            raw_any = _list(spec["matchAny"], "matchAny", spec.line_of("matchAny"))
            for index, branch in enumerate(raw_any):
                branch = _mapping(branch, "matchAny entry", raw_any.line_of(index))
                if set(branch) != {"matchFeatures"}:
                    raise RuleShapeError("matchAny entry must hold exactly 'matchFeatures'", branch.line)
                branches.append(AnyBranch(self.terms(branch["matchFeatures"], branch.line_of("matchFeatures")), self.at(branch.line)))
        annotations = self.items(spec.get("annotations"), "annotations", spec.line_of("annotations"))
        for item in annotations:
            if len(item.value) > MAX_ANNOTATION_VALUE:
                raise RuleShapeError(f"annotation {item.key!r}: value longer than {MAX_ANNOTATION_VALUE} characters", int(item.origin.rsplit(":", 1)[1]))
        resources = self.items(spec.get("extendedResources"), "extendedResources", spec.line_of("extendedResources"))
        try:
            devices = parse_devices(spec.get("devices"), spec.line_of("devices"), self.path, resources)
        except DeviceSpecError as exc:
            raise RuleShapeError(str(exc), exc.line) from None
        return Rule(
            name=name, rule_set=rule_set, origin=self.at(spec.line), devices=devices,
            labels=self.items(spec.get("labels"), "labels", spec.line_of("labels")),
            labels_template=self.template(spec.get("labelsTemplate"), "labelsTemplate", spec.line_of("labelsTemplate")),
            annotations=annotations,
            extended_resources=resources,
            taints=self.taints(spec.get("taints"), spec.line_of("taints")),
            vars=self.items(spec.get("vars"), "vars", spec.line_of("vars")),
            vars_template=self.template(spec.get("varsTemplate"), "varsTemplate", spec.line_of("varsTemplate")),
            match_features=self.terms(spec["matchFeatures"], spec.line_of("matchFeatures")) if spec.get("matchFeatures") is not None else (),
            match_any=tuple(branches),
        )

    def document(self, data: Any, line: int, problems: list[Problem]) -> RuleSet | None:
        if not isinstance(data, LineMap):
            problems.append(Problem(self.at(line), "document", "not a mapping (expected a NodeFeatureRule)"))
            return None
        if data.get("apiVersion") != API_VERSION or data.get("kind") != KIND:
            problems.append(Problem(self.at(data.line), "document", f"not a NodeFeatureRule (apiVersion {data.get('apiVersion')!r}, kind {data.get('kind')!r}; expected {API_VERSION} {KIND})"))
            return None
        metadata = data.get("metadata")
        name = metadata.get("name") if isinstance(metadata, LineMap) else None
        if not isinstance(name, str) or not name:
            problems.append(Problem(self.at(data.line), "metadata.name", "required"))
            return None
        spec = data.get("spec")
        raw_rules = spec.get("rules") if isinstance(spec, LineMap) else None
        if not isinstance(raw_rules, LineList):
            problems.append(Problem(self.at(data.line_of("spec")), f"NodeFeatureRule {name}", "spec.rules must be a list"))
            return None
        rules = []
        for index, raw in enumerate(raw_rules):
            rule_line = raw_rules.line_of(index)
            try:
                rules.append(self.rule(raw, name, rule_line))
            except RuleShapeError as exc:
                label = raw.get("name") if isinstance(raw, LineMap) and isinstance(raw.get("name"), str) else f"rules[{index}]"
                problems.append(Problem(self.at(exc.line), f"{name}/{label}", f"rule skipped: {exc}"))
        return RuleSet(name, self.at(data.line), tuple(rules))


def parse_rule_file(path: str, text: str, locate: Callable[[int], str] | None = None) -> tuple[list[RuleSet], list[Problem]]:
    """All NodeFeatureRule documents in one file, plus problems (each with file:line).
    ``locate`` turns a line into the place shown after ``path:`` (a cluster object's field path)."""
    parser = _Parser(path, locate)
    rule_sets: list[RuleSet] = []
    problems: list[Problem] = []
    try:
        for line, data in load_documents(text):
            rule_set = parser.document(data, line, problems)
            if rule_set is not None:
                rule_sets.append(rule_set)
    except YamlShapeError as exc:
        problems.append(Problem(parser.at(exc.line), "yaml", str(exc)))
    except RecursionError:
        problems.append(Problem(parser.at(1), "yaml", "nesting too deep to read; file skipped"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problems.append(Problem(parser.at(line), "yaml", f"invalid YAML: {getattr(exc, 'problem', None) or exc}"))
    return rule_sets, problems
