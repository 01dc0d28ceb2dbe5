"""The chart's placement templates against the plain manifests (no Helm engine here: the
templates are read as YAML with their actions blanked, as tests/test_manifests.py does for the
rest of the chart): the same CEL, selectors, webhook settings, RBAC and controller flags."""

from __future__ import annotations

import re
from typing import Any

import yaml

from agent.cli import build_parser
from tests.conftest import REPO

CHART = REPO / "deploy/helm/node-feature-agent"
PLAIN = {d["kind"]: d for f in ("placement.yaml", "placement-policy.yaml", "placement-webhook.yaml")
         for d in yaml.safe_load_all((REPO / "deploy" / f).read_text()) if d}


def template_docs(name: str) -> list[dict[str, Any]]:
    text = re.sub(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", "", (CHART / "templates" / name).read_text(), flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not re.fullmatch(r"\s*\{\{-?[^}]*-?\}\}\s*", line))
    text = re.sub(r"\{\{-?[^}]*?-?\}\}", "X", text)
    return [d for d in yaml.safe_load_all(text) if isinstance(d, dict)]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def test_the_chart_gates_with_the_plain_policy_s_cel() -> None:
    docs = template_docs("placement-admission.yaml")
    (policy,) = by_kind(docs, "MutatingAdmissionPolicy")
    (webhook,) = by_kind(docs, "MutatingWebhookConfiguration")
    plain = PLAIN["MutatingAdmissionPolicy"]["spec"]
    assert policy["spec"]["matchConditions"] == plain["matchConditions"]
    assert policy["spec"]["mutations"] == plain["mutations"]
    assert policy["spec"]["failurePolicy"] == "Ignore"
    (hook,) = webhook["webhooks"]
    (plain_hook,) = PLAIN["MutatingWebhookConfiguration"]["webhooks"]
    assert hook["matchConditions"] == plain["matchConditions"]
    for key in ("admissionReviewVersions", "sideEffects", "failurePolicy", "timeoutSeconds", "reinvocationPolicy",
                "rules", "objectSelector"):
        assert hook[key] == plain_hook[key], key


def test_the_chart_grants_what_the_plain_manifest_grants() -> None:
    docs = template_docs("placement.yaml")

    def rules(kind: str, documents: list[dict[str, Any]]) -> list[Any]:
        return sorted(str(r) for d in by_kind(documents, kind) for r in d["rules"])

    plain = [d for d in yaml.safe_load_all((REPO / "deploy/placement.yaml").read_text()) if d]
    assert rules("ClusterRole", docs) == rules("ClusterRole", plain)
    assert rules("Role", docs) == rules("Role", plain)


def test_the_chart_s_controller_runs_the_plain_manifest_s_flags() -> None:
    (deployment,) = by_kind(template_docs("placement.yaml"), "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (plain,) = PLAIN["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert set(plain["args"]) <= set(container["args"])
    args = build_parser().parse_args(list(plain["args"]))
    assert (args.webhook_port, args.metrics_port) == (8443, 8080)
    assert deployment["spec"]["template"]["spec"]["securityContext"] == PLAIN["Deployment"]["spec"]["template"]["spec"]["securityContext"]
    assert container["securityContext"] == plain["securityContext"]
