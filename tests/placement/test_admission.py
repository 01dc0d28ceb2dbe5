"""Admission: which pods get the gate, on one table of pod shapes, three ways that must agree —

* the MutatingAdmissionPolicy in ``deploy/placement-policy.yaml`` evaluated with cel-python
  (``admission_eval``: selectors, matchConditions, ApplyConfiguration merged as server-side
  apply merges it);
* the webhook (``agent/placement/webhook.py``) over real HTTPS, behind the selectors and
  matchConditions of ``deploy/placement-webhook.yaml``, its JSON patch applied as
  evanphx/json-patch applies it (``tests/support/patching``);
* ``agent.placement.admission.skip_reason``.

Every gated result is then created through the in-repo API server's pod registry, which
refuses what kube-apiserver refuses (a gate with ``nodeName``, bad gate names). The webhook is
also asked with the registry gone: it never calls out (its answers do not change and it
counts no registry request); its latency is in ``bench/placement.py``.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.placement import admission, podspec
from agent.placement.webhook import WebhookServer
from tests.conftest import REPO
from tests.images.registries import make_ca
from tests.placement.admission_eval import Admission
from tests.support import patching
from tests.support.apiserver import FakeApiServer

OWN = "node-feature-agent"
POLICY_DOCS = list(yaml.safe_load_all((REPO / "deploy/placement-policy.yaml").read_text()))
(POLICY,) = [d for d in POLICY_DOCS if d["kind"] == "MutatingAdmissionPolicy"]
(WEBHOOK_CONFIG,) = [d for d in yaml.safe_load_all((REPO / "deploy/placement-webhook.yaml").read_text())
                     if d["kind"] == "MutatingWebhookConfiguration"]
(WEBHOOK,) = WEBHOOK_CONFIG["webhooks"]
ARCH_TERM = {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["arm64"]}]}
DISK_TERM = {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}


def shape(spec: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **meta},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}], **(spec or {})}}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}}


# (name, namespace, namespace labels, pod, gated?)
TABLE: list[tuple[str, str, dict[str, str], dict[str, Any], bool]] = [
    ("plain pod", "apps", {}, shape(), True),
    ("labels kept", "apps", {}, shape(labels={"app": "web"}), True),
    ("other gates kept", "apps", {}, shape({"schedulingGates": [{"name": "example.com/quota"}]}), True),
    ("ReplicaSet pod", "apps", {}, shape(ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                                           "uid": "u", "controller": True}]), True),
    ("other nodeSelector", "apps", {}, shape({"nodeSelector": {"disk": "ssd"}}), True),
    ("arch in some terms only", "apps", {}, shape(required(ARCH_TERM, DISK_TERM)), True),
    ("preferred arch only", "apps", {}, shape({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "preference": ARCH_TERM}]}}}), True),
    ("nodeName set", "apps", {}, shape({"nodeName": "n1"}), False),
    ("mirror pod", "apps", {}, shape({"nodeName": "n1"}, annotations={"kubernetes.io/config.mirror": "abc"}), False),
    ("DaemonSet pod", "apps", {}, shape(ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds",
                                                          "uid": "u", "controller": True}]), False),
    ("arch in nodeSelector", "apps", {}, shape({"nodeSelector": {"kubernetes.io/arch": "arm64"}}), False),
    ("arch in every term", "apps", {}, shape(required(ARCH_TERM, ARCH_TERM)), False),
    ("pod opted out", "apps", {}, shape(labels={podspec.SELECTOR_LABEL: podspec.OPTED_OUT}), False),
    ("namespace opted out", "apps", {podspec.SELECTOR_LABEL: podspec.OPTED_OUT}, shape(), False),
    ("kube-system", "kube-system", {}, shape(), False),
    ("our own namespace", OWN, {}, shape(), False),
    ("already gated", "apps", {}, shape({"schedulingGates": [{"name": podspec.GATE}]},
                                        labels={podspec.SELECTOR_LABEL: podspec.GATED}), False),
]
IDS = [row[0] for row in TABLE]


def ns_labels(namespace: str, extra: dict[str, str]) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": namespace, **extra}


def gated_form(pod: dict[str, Any]) -> dict[str, Any]:
    """What every path must produce for a gated pod: our label added, our gate appended."""
    out = copy.deepcopy(pod)
    out["metadata"].setdefault("labels", {})[podspec.SELECTOR_LABEL] = podspec.GATED
    out["spec"]["schedulingGates"] = list(out["spec"].get("schedulingGates") or []) + [{"name": podspec.GATE}]
    return out


@pytest.mark.parametrize(("name", "namespace", "extra", "pod", "gated"), TABLE, ids=IDS)
def test_the_policy(name: str, namespace: str, extra: dict[str, str], pod: dict[str, Any], gated: bool) -> None:
    policy = Admission(POLICY)
    matched = policy.matches(pod, ns_labels(namespace, extra))
    assert matched is gated
    if gated:
        assert policy.mutate(pod) == gated_form(pod)
    assert Admission(POLICY).matches(pod, ns_labels(namespace, extra), operation="UPDATE") is False


@pytest.mark.parametrize(("name", "namespace", "extra", "pod", "gated"), TABLE, ids=IDS)
def test_the_python_rules(name: str, namespace: str, extra: dict[str, str], pod: dict[str, Any], gated: bool) -> None:
    reason = admission.skip_reason(pod, namespace, OWN)
    if extra.get(podspec.SELECTOR_LABEL) == podspec.OPTED_OUT:
        assert reason is None  # namespace labels are the webhook configuration's namespaceSelector's job
        return
    assert (reason is None) is gated


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[WebhookServer, ssl.SSLContext]]:
    ca, cert, key = make_ca(tmp_path_factory.mktemp("tls"))
    server = WebhookServer(0, str(cert), str(key), OWN, host="127.0.0.1").start()
    try:
        yield server, ssl.create_default_context(cafile=str(ca))
    finally:
        server.stop()


def review(server: WebhookServer, context: ssl.SSLContext, pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "operation": "CREATE",
                        "namespace": namespace, "object": pod}}
    request = urllib.request.Request(f"https://127.0.0.1:{server.port}/mutate", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, context=context, timeout=10) as answer:
        return dict(json.loads(answer.read()))


@pytest.mark.parametrize(("name", "namespace", "extra", "pod", "gated"), TABLE, ids=IDS)
def test_the_webhook(webhook: tuple[WebhookServer, ssl.SSLContext], name: str, namespace: str,
                     extra: dict[str, str], pod: dict[str, Any], gated: bool) -> None:
    server, context = webhook
    config = Admission(WEBHOOK)
    result = copy.deepcopy(pod)
    if config.matches(pod, ns_labels(namespace, extra)):
        response = review(server, context, pod, namespace)["response"]
        assert response["uid"] == "u-1" and response["allowed"] is True
        if "patch" in response:
            assert response["patchType"] == "JSONPatch"
            result = patching.apply(patching.JSON_PATCH, result, json.loads(base64.b64decode(response["patch"])))
    assert result == (gated_form(pod) if gated else pod)


def test_the_webhook_and_the_policy_share_their_conditions() -> None:
    assert WEBHOOK["matchConditions"] == POLICY["spec"]["matchConditions"]
    assert WEBHOOK["namespaceSelector"] == POLICY["spec"]["matchConstraints"]["namespaceSelector"]
    assert WEBHOOK["objectSelector"] == POLICY["spec"]["matchConstraints"]["objectSelector"]
    assert (WEBHOOK["failurePolicy"], WEBHOOK["timeoutSeconds"], WEBHOOK["sideEffects"]) == ("Ignore", 2, "None")
    assert POLICY["spec"]["failurePolicy"] == "Ignore"


@pytest.mark.parametrize("condition", [c["name"] for c in POLICY["spec"]["matchConditions"]])
def test_every_match_condition_earns_its_place(condition: str) -> None:
    """Without any one condition, some row of the table would be gated wrongly."""
    pruned = copy.deepcopy(POLICY)
    pruned["spec"]["matchConditions"] = [c for c in pruned["spec"]["matchConditions"] if c["name"] != condition]
    policy = Admission(pruned)
    assert any(policy.matches(pod, ns_labels(ns, extra)) and not gated for _n, ns, extra, pod, gated in TABLE)


def test_the_v1beta1_policy_is_the_v1_policy() -> None:
    beta = list(yaml.safe_load_all((REPO / "deploy/placement-policy-v1beta1.yaml").read_text()))
    assert [d["apiVersion"] for d in beta] == ["admissionregistration.k8s.io/v1beta1"] * 2
    assert [dict(d, apiVersion="") for d in beta] == [dict(d, apiVersion="") for d in POLICY_DOCS]


@pytest.mark.parametrize(("name", "namespace", "extra", "pod", "gated"), [r for r in TABLE if r[4]],
                         ids=[r[0] for r in TABLE if r[4]])
def test_every_gated_pod_is_one_the_api_server_accepts(name: str, namespace: str, extra: dict[str, str],
                                                       pod: dict[str, Any], gated: bool) -> None:
    with FakeApiServer() as server:
        created = server.create_pod(namespace, Admission(POLICY).mutate(pod))
    assert created["status"]["conditions"][0]["reason"] == "SchedulingGated"


def test_the_webhook_never_calls_out(webhook: tuple[WebhookServer, ssl.SSLContext], tmp_path: Path) -> None:
    """No registry here at all (the resolver is not even built): every answer still comes,
    the same as with one; and a body that is not an AdmissionReview is a 400."""
    server, context = webhook
    before = server.requests
    for _ in range(20):
        assert "patch" in review(server, context, shape(), "apps")["response"]
    assert server.requests == before + 20
    request = urllib.request.Request(f"https://127.0.0.1:{server.port}/mutate", b"[]", {"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, context=context, timeout=10)
    assert info.value.code == 400
