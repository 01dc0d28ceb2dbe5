"""ResourceClaims as the DRA plugin reads them: one GET by namespace and name, as the
kubelet plugin helper of ``k8s.io/dynamic-resource-allocation`` does in NodePrepareResources.

The claim is read in the ``resource.k8s.io`` version the agent's DRA mode chose (``v1`` or
``v1beta1``, ``agent.dra.mode``): the plugin reads only ``metadata.uid`` and
``status.allocation.devices.results[]`` (``request``, ``driver``, ``pool``, ``device``), which
both versions spell the same (``AllocationResult`` / ``DeviceRequestAllocationResult`` in
``k8s.io/api`` ``resource/v1/types.go`` and ``resource/v1beta1/types.go``).

A read that fails is never "no claim": only a 404 is ``ClaimGone``; anything else (a refused
connection, a 5xx, a body that is not a ResourceClaim, one larger than ``MAX_CLAIM_BYTES``) is
``ClaimUnreadable`` and the claim's answer is an error kubelet retries.
"""

from __future__ import annotations

import json
from typing import Any, Protocol
from urllib.parse import quote

from agent.kube.light_core import LightCoreV1Api

MAX_CLAIM_BYTES = 2 * 1024 * 1024
"""A ResourceClaim is one etcd value (at most 1.5 MiB, etcd's ``--max-request-bytes``); a body
larger than this is not one and is not read further."""
PATH = "/apis/resource.k8s.io/{version}/namespaces/{namespace}/resourceclaims/{name}"


class ClaimGone(Exception):
    """The API server answered 404: the claim is deleted."""


class ClaimUnreadable(Exception):
    """The claim could not be read now; ``str()`` says why."""


class ClaimTooLarge(ClaimUnreadable):
    """The answer passed ``MAX_CLAIM_BYTES`` and was not read further (a bound: the plugin
    reports it with a metric and a Warning)."""


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any]: ...


class ApiClaims:
    """ResourceClaims through the agent's light client (the official client's auth and TLS)."""

    def __init__(self, api: LightCoreV1Api, version: str = "v1", timeout: float = 10.0) -> None:
        self.api = api
        self.version = version
        self.timeout = timeout

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        path = PATH.format(version=quote(self.version, safe=""), namespace=quote(namespace, safe=""), name=quote(name, safe=""))
        try:
            response = self.api.read_path(path, _request_timeout=self.timeout)
            try:
                body = response.read(MAX_CLAIM_BYTES + 1)
            finally:
                response.release_conn()
        except ApiException as err:
            if err.status == 404:
                raise ClaimGone(f"ResourceClaim {namespace}/{name} not found") from err
            raise ClaimUnreadable(f"reading ResourceClaim {namespace}/{name}: HTTP {err.status} {err.reason}") from err
        except Exception as err:  # urllib3 and socket errors: the read failed, the claim is undetermined
            raise ClaimUnreadable(f"reading ResourceClaim {namespace}/{name}: {type(err).__name__}: {err}") from err
        return parse_claim(body, f"{namespace}/{name}")


def parse_claim(body: bytes, where: str) -> dict[str, Any]:
    if len(body) > MAX_CLAIM_BYTES:
        raise ClaimTooLarge(f"ResourceClaim {where}: the answer is larger than {MAX_CLAIM_BYTES} bytes")
    try:
        claim = json.loads(body)
    except ValueError as err:
        raise ClaimUnreadable(f"ResourceClaim {where}: the answer is not JSON ({err})") from err
    if not isinstance(claim, dict) or claim.get("kind") != "ResourceClaim" or not isinstance(claim.get("metadata"), dict):
        raise ClaimUnreadable(f"ResourceClaim {where}: the answer is not a ResourceClaim")
    return claim
