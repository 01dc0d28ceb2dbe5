"""Load-time checks of what a rule would write, so ``validate`` catches a bad key before any node.

Static label keys and values, annotation keys, extended resource names and constant
quantities, and taints go through the same policy and Kubernetes validation the desired state
is built with at evaluation time (``desired_state._Builder``); ``@`` references and template output can
only be checked when evaluated.
"""

from __future__ import annotations

from agent.desired import Problem, Provenance
from agent.rules.model import COUNT_REFERENCE, Catalogue, RuleOptions


def static_problems(catalogue: Catalogue, options: RuleOptions) -> list[Problem]:
    from agent.rules.desired_state import _Builder

    builder = _Builder(options)
    for rule in catalogue.rules():
        for item in rule.labels:
            value = "true" if item.value.startswith("@") else item.value
            builder.label(item.key, value, Provenance(item.origin))
        for item in rule.annotations:
            builder.annotation(item.key, item.value, Provenance(item.origin))
        for item in rule.extended_resources:
            value = "0" if item.value.startswith("@") else item.value
            if item.value.startswith("@") and item.value != COUNT_REFERENCE and item.value[1:].count(".") < 2:
                builder.problems.append(Problem(item.origin, f"extended resource {item.key}", f"reference {item.value!r} must be @<domain>.<feature>.<element> or {COUNT_REFERENCE}"))
                continue
            builder.resource(item.key, value, Provenance(item.origin))
        for taint in rule.taints:
            builder.taint(taint.key, taint.value, taint.effect, Provenance(taint.origin))
    for label_file in catalogue.label_files:
        builder.label(label_file.key, "true", Provenance(f"{label_file.path}:1"))
    return builder.problems
