"""The seven CoreV1 calls the agent makes, plus a LIST/WATCH of any collection (NFD's custom
resources), on the official client's ``ApiClient``, without importing the generated
``CoreV1Api`` class.

Why: in kubernetes 37.x ``kubernetes.client.api.core_v1_api`` defines ~400 pydantic
``validate_call`` methods; importing it costs about 21 MiB of RSS, a third of the agent's
memory budget (60 MiB), for seven endpoints. This class builds the same requests the
generated methods build (``ApiClient.param_serialize``: same auth, headers, user agent,
query encoding, TLS and proxy settings from the same ``Configuration``) and sends them with
``ApiClient.call_api`` (the same urllib3 pool), and keeps the generated methods' contract for
``_preload_content=False``: the raw urllib3 response on 2xx, ``ApiException`` otherwise.
Method names and keyword arguments match ``CoreV1Api``'s.
"""

from __future__ import annotations

from typing import Any

from kubernetes.client.api_client import ApiClient
from kubernetes.client.exceptions import ApiException

JSON = "application/json"


class LightCoreV1Api:
    def __init__(self, api_client: ApiClient) -> None:
        self.api_client = api_client

    def _call(self, method: str, path: str, path_params: dict[str, str] | None = None,
              query: list[tuple[str, str]] | None = None, body: Any = None, content_type: str | None = None,
              _preload_content: bool = False, _request_timeout: Any = None) -> Any:
        if _preload_content:
            raise ValueError("LightCoreV1Api returns raw responses only (_preload_content=False)")
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type or JSON
        request = self.api_client.param_serialize(
            method=method, resource_path=path, path_params=path_params or {}, query_params=query or [],
            header_params=headers, body=body, post_params=[], files={}, auth_settings=["BearerToken"],
            collection_formats={})
        response = self.api_client.call_api(*request, _request_timeout=_request_timeout)
        if not 200 <= response.status <= 299:
            response.read()  # type: ignore[no-untyped-call]
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    @staticmethod
    def _query(**params: Any) -> list[tuple[str, str]]:
        names = {"field_selector": "fieldSelector", "resource_version": "resourceVersion",
                 "timeout_seconds": "timeoutSeconds", "allow_watch_bookmarks": "allowWatchBookmarks",
                 "watch": "watch", "label_selector": "labelSelector"}
        out = []
        for key, value in params.items():
            if value is None:
                continue
            if isinstance(value, bool):
                value = "true" if value else "false"
            out.append((names[key], str(value)))
        return out

    # -- nodes ------------------------------------------------------------------------------
    def read_node(self, name: str, **kw: Any) -> Any:
        return self._call("GET", "/api/v1/nodes/{name}", {"name": name}, **kw)

    def patch_node(self, name: str, body: Any, _content_type: str | None = None, **kw: Any) -> Any:
        return self._call("PATCH", "/api/v1/nodes/{name}", {"name": name}, body=body, content_type=_content_type, **kw)

    def patch_node_status(self, name: str, body: Any, _content_type: str | None = None, **kw: Any) -> Any:
        return self._call("PATCH", "/api/v1/nodes/{name}/status", {"name": name}, body=body,
                          content_type=_content_type, **kw)

    def list_node(self, field_selector: str | None = None, label_selector: str | None = None,
                  watch: bool | None = None, allow_watch_bookmarks: bool | None = None,
                  resource_version: str | None = None, timeout_seconds: int | None = None, **kw: Any) -> Any:
        query = self._query(field_selector=field_selector, label_selector=label_selector, watch=watch,
                            allow_watch_bookmarks=allow_watch_bookmarks, resource_version=resource_version,
                            timeout_seconds=timeout_seconds)
        return self._call("GET", "/api/v1/nodes", query=query, **kw)

    def list_collection(self, path: str, label_selector: str | None = None, field_selector: str | None = None,
                        watch: bool | None = None,
                        allow_watch_bookmarks: bool | None = None, resource_version: str | None = None,
                        timeout_seconds: int | None = None, limit: int | None = None, continue_: str | None = None,
                        **kw: Any) -> Any:
        """LIST or WATCH any collection by its path (NFD's custom resources,
        ``agent.kube.reflector``), with the query of ``list_node``."""
        query = self._query(label_selector=label_selector, field_selector=field_selector, watch=watch, allow_watch_bookmarks=allow_watch_bookmarks,
                            resource_version=resource_version, timeout_seconds=timeout_seconds)
        query += [(k, str(v)) for k, v in (("limit", limit), ("continue", continue_)) if v]
        return self._call("GET", path, query=query, **kw)

    def read_path(self, path: str, **kw: Any) -> Any:
        """GET one object by its path (a ResourceClaim for the DRA plugin, ``agent.dra.claims``)."""
        return self._call("GET", path, **kw)

    # -- events and pods ----------------------------------------------------------------------
    def create_namespaced_event(self, namespace: str, body: Any, **kw: Any) -> Any:
        return self._call("POST", "/api/v1/namespaces/{namespace}/events", {"namespace": namespace}, body=body, **kw)

    def list_pod_for_all_namespaces(self, field_selector: str | None = None, **kw: Any) -> Any:
        return self._call("GET", "/api/v1/pods", query=self._query(field_selector=field_selector), **kw)

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any, **kw: Any) -> Any:
        return self._call("POST", "/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                          {"namespace": namespace, "name": name}, body=body, **kw)

