"""Count every Kubernetes API request the agent sends, by Kubernetes verb and HTTP code.

The hook sits on the client's urllib3 pool (``api_client.rest_client.pool_manager.request``),
the one place every call passes through: node reads and patches (``NodeApi``), Events, the
Node watch, the pod guard's list and evictions. No change to ``NodeApi`` is needed, and
requests that never got an answer are counted with code ``error``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

Observer = Callable[[str, str], None]
_VERBS = {"POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete", "HEAD": "get", "OPTIONS": "options"}


def k8s_verb(method: str, url: str) -> str:
    """HTTP method + URL -> Kubernetes verb (get, list, watch, create, patch, update, delete)."""
    method = method.upper()
    if method != "GET":
        return _VERBS.get(method, "other")
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    segments = [s for s in parts.path.split("/") if s]
    if query.get("watch", [""])[0] in ("true", "1") or "watch" in segments[:4]:
        return "watch"
    if segments[:1] == ["api"]:
        rest = segments[2:]
    elif segments[:1] == ["apis"]:
        rest = segments[3:]
    else:
        return "get"
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    return "list" if len(rest) == 1 else "get"


def instrument(api_client: Any, observe: Observer) -> None:
    """Make ``observe(verb, code)`` see every request ``api_client`` sends (idempotent)."""
    pool = api_client.rest_client.pool_manager
    if getattr(pool.request, "_nfa_instrumented", False):
        return
    original = pool.request

    @functools.wraps(original)
    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        verb = k8s_verb(method, url)
        try:
            response = original(method, url, *args, **kwargs)
        except Exception:
            observe(verb, "error")
            raise
        observe(verb, str(getattr(response, "status", "error")))
        return response

    request._nfa_instrumented = True  # type: ignore[attr-defined]
    pool.request = request
