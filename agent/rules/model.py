"""The loaded catalogue as typed, immutable data: NodeFeatureRules, label files, options.

Every element remembers where it was written (``origin`` = ``file:line``) so problems,
``plan`` provenance and ``explain`` can point a person at the exact line to edit.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from agent.desired import Problem
from agent.device_claims import DeviceDeclaration
from agent.gotemplate import MAX_OUTPUT_CHARS, MAX_STEPS

#: The 13 operators of the NodeFeatureRule CRD: ``MatchOp`` in NFD's ``api/nfd/v1alpha1/types.go``
#: (node-feature-discovery 76e6cc8c), the enum of ``deployment/base/nfd-crds/nfd-api-crds.yaml``.
OPERATORS = (
    "In", "NotIn", "InRegexp", "Exists", "DoesNotExist",
    "Gt", "Ge", "Lt", "Le", "GtLt", "GeLe", "IsTrue", "IsFalse",
)
VALUE_TYPES = ("", "version")
COUNT_REFERENCE = "@count"
"""Our extension: an ``extendedResources`` value meaning "number of distinct matched devices"."""


@dataclass(frozen=True)
class RuleOptions:
    """Label-namespace policy, as nfd-master's ``-deny-label-ns`` / ``-extra-label-ns``.

    ``deny_label_ns`` entries are exact namespaces, or ``*suffix`` wildcards (``*.vendor.com``);
    ``extra_label_ns`` re-allows exact namespaces that are denied (never
    ``node-restriction.kubernetes.io``)."""

    deny_label_ns: tuple[str, ...] = ()
    extra_label_ns: tuple[str, ...] = ()
    autoprefix: bool = True
    nfd_namespace: str = "node-feature-discovery"  # NodeFeature objects here merge first (nfd-master's own)

    def __post_init__(self) -> None:
        object.__setattr__(self, "deny_label_ns", tuple(self.deny_label_ns))
        object.__setattr__(self, "extra_label_ns", tuple(self.extra_label_ns))


@dataclass(frozen=True)
class Expression:
    """One ``key: {op, value, type}`` (or a ``matchName``, where ``key`` is empty)."""

    key: str
    op: str
    values: tuple[str, ...] = ()
    value_type: str = ""
    origin: str = ""

    def describe(self) -> str:
        subject = self.key or "<name>"
        text = f"{subject} {self.op}"
        if self.values:
            text += " [" + ", ".join(self.values) + "]"
        if self.value_type:
            text += f" ({self.value_type})"
        return text


@dataclass(frozen=True)
class FeatureTerm:
    """One ``matchFeatures`` entry: all its expressions must hold (in one instance).

    ``expressions_given`` tells ``matchExpressions: {}`` (given, empty: NFD runs it, and on an
    instance feature it needs an instance) from no ``matchExpressions`` at all (not run)."""

    feature: str
    expressions: tuple[Expression, ...] = ()
    match_name: Expression | None = None
    origin: str = ""
    expressions_given: bool = True

    def describe(self) -> str:
        parts = [e.describe() for e in self.expressions]
        if self.match_name is not None:
            parts.append("matchName " + self.match_name.describe().replace("<name> ", "", 1))
        return f"{self.feature}: " + (", ".join(parts) if parts else "(any)")


@dataclass(frozen=True)
class AnyBranch:
    """One ``matchAny`` element: its own AND of feature terms."""

    terms: tuple[FeatureTerm, ...]
    origin: str = ""


@dataclass(frozen=True)
class OutputItem:
    """A key/value a rule emits (label, annotation, extended resource, var)."""

    key: str
    value: str
    origin: str = ""


@dataclass(frozen=True)
class TaintSpec:
    key: str
    effect: str
    value: str = ""
    origin: str = ""


@dataclass(frozen=True)
class TemplateSpec:
    """A ``labelsTemplate``/``varsTemplate``; ``max_steps``/``max_output`` bound one render
    (the engine's own budget for a rule file, less for a cluster object: ``rules.budget``)."""

    text: str
    origin: str = ""
    max_steps: int = MAX_STEPS
    max_output: int = MAX_OUTPUT_CHARS


@dataclass(frozen=True)
class Rule:
    """One entry of ``spec.rules``; ``rule_set`` is the owning object's ``metadata.name``."""

    name: str
    rule_set: str
    origin: str
    labels: tuple[OutputItem, ...] = ()
    labels_template: TemplateSpec | None = None
    annotations: tuple[OutputItem, ...] = ()
    extended_resources: tuple[OutputItem, ...] = ()
    taints: tuple[TaintSpec, ...] = ()
    vars: tuple[OutputItem, ...] = ()
    vars_template: TemplateSpec | None = None
    match_features: tuple[FeatureTerm, ...] = ()
    match_any: tuple[AnyBranch, ...] = ()
    devices: tuple[DeviceDeclaration, ...] = ()  # our extension (device plugin)

    @property
    def qualified_name(self) -> str:
        return f"{self.rule_set}/{self.name}"

    @property
    def path(self) -> str:
        return self.origin.rsplit(":", 1)[0]


@dataclass(frozen=True)
class RuleSet:
    """One NodeFeatureRule object (one YAML document)."""

    name: str
    origin: str
    rules: tuple[Rule, ...]


@dataclass(frozen=True)
class Dependency:
    """One line of a label file: a label key, optionally ``=value`` to require that value."""

    key: str
    value: str | None = None
    origin: str = ""

    def describe(self) -> str:
        return self.key if self.value is None else f"{self.key}={self.value}"


@dataclass(frozen=True)
class LabelFile:
    """``labels/<namespace>/<name>`` (k8s-auto-labeller): any dependency present -> label=true."""

    namespace: str
    name: str
    path: str
    dependencies: tuple[Dependency, ...]

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Catalogue:
    """Everything loaded from the rules directories, in evaluation order.

    ``problems`` are errors (a line, rule or file that was skipped); ``warnings`` are things
    worth knowing that did not change what is evaluated (a stray file, a duplicate name)."""

    dirs: tuple[str, ...] = ()
    rule_sets: tuple[RuleSet, ...] = ()
    label_files: tuple[LabelFile, ...] = ()
    problems: tuple[Problem, ...] = ()
    warnings: tuple[Problem, ...] = ()
    files: tuple[str, ...] = field(default=())

    def rules(self) -> Iterator[Rule]:
        """Rules in NFD order: objects by ``metadata.name``, then rule order in the object."""
        for rule_set in self.rule_sets:
            yield from rule_set.rules

    def taint_keys(self) -> frozenset[str]:
        """Every taint key a rule of this catalogue can set (what the agent may claim)."""
        return frozenset(t.key for rule in self.rules() for t in rule.taints)
