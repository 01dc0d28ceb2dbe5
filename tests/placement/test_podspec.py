"""The pod side of placement (``podspec``, ``decide``): which images, whose intent, and the one
PATCH — each PATCH applied as the API server would (RFC 7386 merge patch through
``tests/support/patching``) and judged by Kubernetes' pod update validation
(``tests/support/pod_validation``, from ``ValidatePodUpdate`` at 000f2605): legal while gated."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.images import Platform
from agent.placement import decide, podspec
from agent.placement.nodeclasses import ARM32_LABEL, allowed_classes, clauses
from tests.support import patching, pod_validation

GATE = {"name": podspec.GATE}


def pod(spec: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    base: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.example/app:1"}],
                            "schedulingGates": [{"name": "example.com/other"}, GATE]}
    base.update(spec or {})
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "42",
                         "labels": {podspec.SELECTOR_LABEL: podspec.GATED, **(labels or {})}},
            "spec": base}


def applied(old: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    new = patching.apply(patching.MERGE, copy.deepcopy(old), patch)
    assert pod_validation.validate_update(new, old) == [], "the API server would refuse this patch"
    return new


def p(text: str) -> Platform:
    os, arch, *variant = text.split("/")
    return Platform(os, arch, variant[0] if variant else "")


def answers(*images: str) -> list[decide.ImageAnswer]:
    return [decide.ImageAnswer(f"img{i}", "sha256:" + "0" * 64, tuple(p(t) for t in text.split()))
            for i, text in enumerate(images)]


def test_images_cover_containers_and_init_containers_once_and_ignore_ephemeral_ones() -> None:
    spec = {"initContainers": [{"name": "init", "image": "init:1"}, {"name": "proxy", "image": "proxy:1",
                                                                      "restartPolicy": "Always"}],
            "containers": [{"name": "a", "image": "app:1"}, {"name": "b", "image": "app:1", "imagePullPolicy": "Always"}],
            "ephemeralContainers": [{"name": "debug", "image": "busybox"}]}
    assert podspec.images(pod(spec)) == (podspec.ImageUse("init:1", False), podspec.ImageUse("proxy:1", False),
                                         podspec.ImageUse("app:1", True))


@pytest.mark.parametrize(("spec", "choice"), [
    ({}, None),
    ({"nodeSelector": {"kubernetes.io/arch": "arm64"}}, {"arm64"}),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "s390x"]}]},
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "NotIn", "values": ["amd64"]}]}]}}}},
     {"amd64", "arm64"}),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]},
        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]}}}}, None),  # not every term: we add ours
])
def test_the_pod_s_own_architecture_choice(spec: dict[str, Any], choice: set[str] | None) -> None:
    assert podspec.user_arch_choice(pod(spec), {"amd64", "arm64"}) == choice


def test_a_pod_without_affinity_gets_one_term_per_clause_and_loses_only_our_gate() -> None:
    old = pod()
    decision = decide.decide(old, answers("linux/amd64 linux/arm/v7"))
    new = applied(old, decision.patch or {})
    terms = new["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [[e["key"] for e in t["matchExpressions"]] for t in terms] == [
        ["kubernetes.io/os", "kubernetes.io/arch"], ["kubernetes.io/os", "kubernetes.io/arch", ARM32_LABEL]]
    assert new["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    assert podspec.SELECTOR_LABEL not in new["metadata"]["labels"]
    assert decision.action == decide.PLACE and decision.reason == "ArchResolved"
    assert new["metadata"]["annotations"][podspec.RESOLVED_ANNOTATION] == "linux/amd64, linux/arm (v7+), linux/arm64 (with AArch32)"


def test_existing_terms_are_only_appended_to_and_an_empty_term_stays_empty() -> None:
    user_terms = [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
                  {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}, {}]
    old = pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": user_terms}},
                            "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}})
    new = applied(old, decide.decide(old, answers("linux/amd64 linux/arm64")).patch or {})
    terms = new["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0] == user_terms[0]["matchExpressions"][0]
    assert terms[0]["matchExpressions"][-1] == {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64", "arm64"]}
    assert terms[1]["matchFields"] == user_terms[1]["matchFields"] and len(terms[1]["matchExpressions"]) == 2
    assert terms[2] == {}
    assert "podAntiAffinity" in new["spec"]["affinity"]


def test_when_terms_exist_and_two_clauses_are_needed_the_first_is_kept_and_said() -> None:
    old = pod({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}]}}}})
    decision = decide.decide(old, answers("linux/amd64 linux/arm/v7"))
    new = applied(old, decision.patch or {})
    (term,) = new["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"][-1]["values"] == ["amd64"]
    assert "can only be narrowed" in decision.message


def test_taint_mode_adds_one_toleration_per_allowed_architecture() -> None:
    old = pod({"tolerations": [{"key": "dedicated", "operator": "Exists"}]})
    new = applied(old, decide.decide(old, answers("linux/amd64 linux/arm64"), taint_mode=True).patch or {})
    assert new["spec"]["tolerations"] == [
        {"key": "dedicated", "operator": "Exists"},
        {"key": podspec.TAINT_KEY, "operator": "Equal", "value": "amd64", "effect": "NoSchedule"},
        {"key": podspec.TAINT_KEY, "operator": "Equal", "value": "arm64", "effect": "NoSchedule"}]


def test_no_common_platform_keeps_the_gate() -> None:
    decision = decide.decide(pod(), answers("linux/amd64 linux/arm64", "linux/amd64", "linux/arm64"))
    assert decision.action == decide.NO_COMMON and decision.patch is None and decision.event_type == "Warning"


def test_the_pod_s_own_choice_is_kept_with_a_warning_when_it_excludes_every_image_platform() -> None:
    old = pod({"nodeSelector": {"kubernetes.io/arch": "s390x"}})
    decision = decide.decide(old, answers("linux/amd64 linux/arm64"))
    assert (decision.action, decision.reason, decision.event_type) == (decide.CONFLICT, "ArchConflict", "Warning")
    new = applied(old, decision.patch or {})
    assert "affinity" not in new["spec"] and new["spec"]["nodeSelector"] == {"kubernetes.io/arch": "s390x"}
    assert decide.decide(pod({"nodeSelector": {"kubernetes.io/arch": "arm64"}}),
                       answers("linux/amd64 linux/arm64")).action == decide.RESPECT


def test_a_stale_patch_is_refused_by_its_resource_version() -> None:
    old = pod()
    patch = decide.decide(old, answers("linux/amd64")).patch or {}
    assert patch["metadata"]["resourceVersion"] == "42"


def test_fallback_requires_linux_and_the_named_architecture() -> None:
    old = pod()
    new = applied(old, decide.fallback_patch(old, "arm64"))
    (term,) = new["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]},
                                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]


def test_clauses_are_deterministic() -> None:
    classes = allowed_classes([[p("linux/arm64"), p("linux/amd64/v2"), p("linux/arm/v6")]])
    assert clauses(classes) == clauses(frozenset(sorted(classes)))
