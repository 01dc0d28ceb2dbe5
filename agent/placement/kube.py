"""The Kubernetes calls the placement controller makes, as JSON in and out.

Built on ``LightCoreV1Api`` (the official client's ``ApiClient``: same auth, TLS, proxies
and connection pool as the generated API classes, without importing them; see
``agent/kube/light_core.py`` for why). Every method returns the decoded JSON object or
raises ``kubernetes.client.exceptions.ApiException`` with the server's status.
"""

from __future__ import annotations

import json
from typing import Any

from agent.kube.light_core import LightCoreV1Api

Json = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def _json(response: Any) -> Json:
    data = json.loads(response.data)
    if not isinstance(data, dict):
        raise TypeError("the API server answered with something other than a JSON object")
    return data


class PlacementApi(LightCoreV1Api):
    """Pods, namespaces, secrets, events and leases."""

    def list_pods(self, label_selector: str = "", limit: int = 0, continue_token: str = "", timeout: float = 60.0,
                  field_selector: str = "") -> Json:
        query = [("labelSelector", label_selector)] if label_selector else []
        if field_selector:
            query.append(("fieldSelector", field_selector))
        if limit:
            query.append(("limit", str(limit)))
        if continue_token:
            query.append(("continue", continue_token))
        return _json(self._call("GET", "/api/v1/pods", query=query, _request_timeout=timeout))

    def get_pod(self, namespace: str, name: str) -> Json:
        return _json(self._call("GET", "/api/v1/namespaces/{namespace}/pods/{name}",
                                {"namespace": namespace, "name": name}))

    def patch_pod(self, namespace: str, name: str, body: Json) -> Json:
        return _json(self._call("PATCH", "/api/v1/namespaces/{namespace}/pods/{name}",
                                {"namespace": namespace, "name": name}, body=body, content_type=MERGE_PATCH))

    def get_namespace(self, name: str, timeout: float | None = None) -> Json:
        """``timeout``: seconds for the whole request (None: the client's default)."""
        return _json(self._call("GET", "/api/v1/namespaces/{name}", {"name": name}, _request_timeout=timeout))

    def get_secret(self, namespace: str, name: str, timeout: float | None = None) -> Json:
        return _json(self._call("GET", "/api/v1/namespaces/{namespace}/secrets/{name}",
                                {"namespace": namespace, "name": name}, _request_timeout=timeout))

    def create_event(self, namespace: str, body: Json) -> Json:
        return _json(self._call("POST", "/api/v1/namespaces/{namespace}/events", {"namespace": namespace}, body=body))

    def get_lease(self, namespace: str, name: str) -> Json:
        return _json(self._call("GET", LEASES + "/{name}", {"namespace": namespace, "name": name}))

    def create_lease(self, namespace: str, body: Json) -> Json:
        return _json(self._call("POST", LEASES, {"namespace": namespace}, body=body))

    def patch_lease(self, namespace: str, name: str, body: Json) -> Json:
        """A merge patch; with ``metadata.resourceVersion`` in it, conditional (409 when stale)."""
        return _json(self._call("PATCH", LEASES + "/{name}", {"namespace": namespace, "name": name}, body=body,
                                content_type=MERGE_PATCH))

