"""Which DRA API the cluster serves, and so which mode ``run --dra`` takes.

``--dra=auto``: ``resource.k8s.io/v1`` when discovery lists it (Kubernetes 1.34+), else
``v1beta1`` (1.32-1.33), else no DRA (the device plugin when ``--device-plugin=on``, else the
counts the agent patches). ``on``: the same choice, but a cluster serving neither is an error.
``off``: no DRA. Device taints (``DRADeviceTaints``, beta 1.36, GA 1.37) are used when the group
lists ``devicetaintrules``, the resource that comes with the same feature: without it the
server drops a device's ``taints`` and an unready device would be allocatable, so the writer
leaves such devices out instead.

A discovery read that fails is undetermined: ``Undetermined`` is raised and the caller decides
nothing on it (``run`` retries before it starts, see ``agent.commands.run``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

GROUP = "resource.k8s.io"
VERSIONS = ("v1", "v1beta1")  # the versions the slice writer speaks, preferred first


class Undetermined(Exception):
    """Discovery could not be read: which API the cluster serves is not known."""


@dataclass(frozen=True)
class DraApi:
    version: str  # "v1", "v1beta1", or "" (no DRA)
    device_taints: bool = False


def _get(api_client: Any, path: str, timeout: float) -> Any:
    request = api_client.param_serialize(method="GET", resource_path=path, path_params={}, query_params=[],
                                         header_params={"Accept": "application/json"}, body=None, post_params=[],
                                         files={}, auth_settings=["BearerToken"], collection_formats={})
    response = api_client.call_api(*request, _request_timeout=timeout)
    data = response.read()
    if not 200 <= response.status <= 299:
        raise ApiException(status=response.status, reason=response.reason, body=data)
    return json.loads(data)


def _document(api_client: Any, path: str, field: str, kind: str, timeout: float) -> list[dict[str, Any]]:
    """The ``field`` list of the discovery document at ``path``; ``Undetermined`` on any failure."""
    try:
        document = _get(api_client, path, timeout)
    except Exception as exc:  # unreachable, refused, garbage: undetermined either way
        raise Undetermined(f"discovery of {path} failed: {exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get(field), list):
        raise Undetermined(f"discovery of {path} answered something that is not an {kind}")
    return [item for item in document[field] if isinstance(item, dict)]


def discover(api_client: Any, timeout: float = 10.0) -> DraApi:
    """The DRA API this client's server serves (``version`` "" when none it can use)."""
    try:
        versions = _document(api_client, f"/apis/{GROUP}", "versions", "APIGroup", timeout)
    except Undetermined as exc:
        if isinstance(exc.__cause__, ApiException) and exc.__cause__.status == 404:
            return DraApi("")  # the group is not served at all
        raise
    served = [v.get("version") for v in versions]
    version = next((v for v in VERSIONS if v in served), "")
    if not version:
        return DraApi("")
    listed = _document(api_client, f"/apis/{GROUP}/{version}", "resources", "APIResourceList", timeout)
    names = {r.get("name") for r in listed}
    if "resourceslices" not in names:
        return DraApi("")
    return DraApi(version, "devicetaintrules" in names)


def decide(wanted: str, api: DraApi) -> DraApi:
    """``--dra`` (auto, on, off) and what the server serves -> the mode; ``on`` with nothing
    served is a ``ValueError`` (the agent must not silently serve devices another way)."""
    if wanted == "off":
        return DraApi("")
    if wanted == "on" and not api.version:
        raise ValueError(f"--dra=on, but the API server serves neither {GROUP}/v1 nor v1beta1 ResourceSlices")
    return api
