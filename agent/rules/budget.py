"""What NFD's objects in the cluster may cost the agent, checked on the raw objects before any
is parsed or evaluated.

Why: anyone allowed to create a NodeFeatureRule writes input every agent of the fleet
evaluates. The API server accepts an object up to etcd's request limit (1.5 MiB,
``DefaultMaxRequestBytes`` in etcd's ``server/embed/config.go``) and any number of them; unbounded,
one object of 10,000 rules takes every agent past its memory limit and a pass past 30 s, and
its labels push the ownership record past the Node's 256 KiB annotation budget. The caps below
are sized so the worst input they admit keeps ``run`` under 100 MiB and a pass under 1 s
(``bench/hostile_objects.py``), far above what real rule sets use (NFD's examples: one to ten
rules, a few KiB).

A bound is a state, not a filter: what a cap stops is *unknown*, never *absent*. The caller
(``agent.runtime.cluster_objects``) keeps the output it last had from the cluster, or holds every
owned item when it has none, says so once (a Warning Event, a metric) and documents the cap
(deploy/metrics.md "Bounds on cluster objects"). Which objects are read never depends on their
names: a collection over a bound is held as a whole. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: per kind, objects kept (a collection with more is held as a whole)
MAX_RULE_OBJECTS = 1000
MAX_NODE_FEATURE_OBJECTS = 100
#: bytes of one object's ``spec`` as compact JSON; a larger object is not kept (held)
MAX_OBJECT_BYTES = 256 * 1024
#: bytes of the ``spec``s kept per kind, all objects together
MAX_COLLECTION_BYTES = 4 * 1024 * 1024
#: bytes of one LIST page read; a larger page is asked again with fewer objects. Any one object
#: the API server accepts (1.5 MiB) fits with its envelope; a page is parsed in one go, which a
#: pass may wait for (``cluster_watch``), so no larger
MAX_PAGE_BYTES = 2 * 1024 * 1024

#: one NodeFeatureRule object
MAX_RULES_PER_OBJECT = 100
#: all NodeFeatureRule objects together: output items (labels, annotations, extended
#: resources, taints, vars) and their bytes (keys and values: what the ownership record and
#: the Node's annotations grow by), matchers (feature terms, expressions and their values: the
#: work of a pass), template renders (a templated rule renders once for ``matchFeatures`` and
#: once per ``matchAny`` branch)
MAX_OUTPUTS = 1000
MAX_OUTPUT_BYTES = 64 * 1024
MAX_MATCHERS = 20_000
MAX_TEMPLATE_RENDERS = 32
#: one render of a cluster object's template: work units and output characters (a rule file's
#: templates keep the engine's own, larger budget)
TEMPLATE_STEPS = 5_000
TEMPLATE_OUTPUT_CHARS = 16 * 1024

_OUTPUT_FIELDS = ("labels", "annotations", "extendedResources", "vars")


@dataclass(frozen=True)
class Cost:
    """What one NodeFeatureRule object asks for, counted on its raw ``spec``."""

    rules: int = 0
    outputs: int = 0
    output_bytes: int = 0
    matchers: int = 0
    template_renders: int = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.rules + other.rules, self.outputs + other.outputs, self.output_bytes + other.output_bytes,
                    self.matchers + other.matchers, self.template_renders + other.template_renders)


def _size(value: Any) -> int:
    return len(str(value).encode())


def _matchers(terms: Any) -> int:
    if not isinstance(terms, list):
        return 0
    count = 0
    for term in terms:
        count += 1
        expressions = term.get("matchExpressions") if isinstance(term, Mapping) else None
        if isinstance(expressions, Mapping):
            for body in expressions.values():
                values = body.get("value") if isinstance(body, Mapping) else None
                count += 1 + (len(values) if isinstance(values, list) else 0)
    return count


def _rule_cost(rule: Any) -> Cost:
    if not isinstance(rule, Mapping):
        return Cost(rules=1)
    outputs = output_bytes = 0
    for name in _OUTPUT_FIELDS:
        items = rule.get(name)
        if isinstance(items, Mapping):
            outputs += len(items)
            output_bytes += sum(_size(k) + _size(v) for k, v in items.items())
    taints = rule.get("taints")
    if isinstance(taints, list):
        outputs += len(taints)
        output_bytes += sum(_size(t.get("key", "")) + _size(t.get("value", "")) + _size(t.get("effect", ""))
                            for t in taints if isinstance(t, Mapping))
    raw_any = rule.get("matchAny")
    branches: list[Any] = raw_any if isinstance(raw_any, list) else []
    matchers = _matchers(rule.get("matchFeatures"))
    for branch in branches:
        matchers += _matchers(branch.get("matchFeatures")) if isinstance(branch, Mapping) else 0
    templates = sum(1 for name in ("labelsTemplate", "varsTemplate") if rule.get(name))
    return Cost(1, outputs, output_bytes, matchers, templates * (1 + len(branches)))


def object_cost(obj: Mapping[str, Any]) -> Cost:
    """The cost of one NodeFeatureRule object, from its raw ``spec`` (any shape)."""
    spec = obj.get("spec")
    rules = spec.get("rules") if isinstance(spec, Mapping) else None
    if not isinstance(rules, list):
        return Cost()
    total = Cost()
    for rule in rules:
        total = total + _rule_cost(rule)
    return total


def object_problem(cost: Cost) -> str | None:
    """Why one object alone is over the budget (it is then not evaluated), or None."""
    limits = over(cost)
    if cost.rules > MAX_RULES_PER_OBJECT:
        limits.insert(0, f"{cost.rules} rules (at most {MAX_RULES_PER_OBJECT} per object)")
    return "; ".join(limits) or None


def over(cost: Cost) -> list[str]:
    """The budgets for all objects together that ``cost`` exceeds."""
    checks = ((cost.outputs, MAX_OUTPUTS, "output items (labels, annotations, extended resources, taints, vars)"),
              (cost.output_bytes, MAX_OUTPUT_BYTES, "bytes of output keys and values"),
              (cost.matchers, MAX_MATCHERS, "matchers (feature terms, expressions, values)"),
              (cost.template_renders, MAX_TEMPLATE_RENDERS, "template renders"))
    return [f"{have} {what} (at most {limit})" for have, limit, what in checks if have > limit]


def total_problem(costs: Iterable[Cost]) -> str | None:
    """Why the objects together are over the budget, or None."""
    total = Cost()
    for cost in costs:
        total = total + cost
    return "; ".join(over(total)) or None
