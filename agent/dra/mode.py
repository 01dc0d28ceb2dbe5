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


def discover(api_client: Any, timeout: float = 10.0) -> DraApi:
    """The DRA API this client's server serves (``version`` "" when none it can use)."""
    try:
        group = _get(api_client, f"/apis/{GROUP}", timeout)
    except ApiException as exc:
        if exc.status == 404:
            return DraApi("")
        raise Undetermined(f"discovery of {GROUP} failed: HTTP {exc.status}") from exc
    except Exception as exc:  # noqa: BLE001 - unreachable, garbage: undetermined either way
        raise Undetermined(f"discovery of {GROUP} failed: {exc}") from exc
    if not isinstance(group, dict) or not isinstance(group.get("versions"), list):
        raise Undetermined(f"discovery of {GROUP} answered something that is not an APIGroup")
    served = [v.get("version") for v in group["versions"] if isinstance(v, dict)]
    version = next((v for v in VERSIONS if v in served), "")
    if not version:
        return DraApi("")
    try:
        listed = _get(api_client, f"/apis/{GROUP}/{version}", timeout)
    except Exception as exc:  # noqa: BLE001
        raise Undetermined(f"discovery of {GROUP}/{version} failed: {exc}") from exc
    if not isinstance(listed, dict) or not isinstance(listed.get("resources"), list):
        raise Undetermined(f"discovery of {GROUP}/{version} answered something that is not an APIResourceList")
    names = {r.get("name") for r in listed["resources"] if isinstance(r, dict)}
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
