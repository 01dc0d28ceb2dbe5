"""Registry authentication: the ``WWW-Authenticate`` challenge answered with Bearer or Basic.

Token auth follows distribution's ``docs/spec/auth/token.md``: a ``401`` carries
``Bearer realm="...",service="...",scope="..."``; the client GETs the realm with ``service``
and ``scope`` (Basic auth when it has a username) and gets ``{"token"|"access_token",
"expires_in"}``; with an ``identitytoken`` it POSTs ``grant_type=refresh_token`` instead
(``docs/spec/auth/oauth.md``). Basic registries get ``Authorization: Basic``.

Every cached header is keyed by the credential's identity (``anonymous`` for none), host and
repository, so an answer fetched with one namespace's secret is never sent for another's.
Tokens are kept until ``expires_in`` (60 s when absent, as the spec says) minus a margin.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Callable, Mapping
from urllib.parse import urlencode, urlsplit

from agent.images.credentials import Credential
from agent.images.errors import RegistryError, UnauthorizedError
from agent.images.transport import Answer, Call, Transport, registry_message

TOKEN_BODY_LIMIT = 1024 * 1024
DEFAULT_EXPIRES_IN = 60.0
EXPIRY_MARGIN = 5.0
_PARAM = re.compile(r'(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))')

CacheKey = tuple[str, str, str]


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="r",service="s"`` -> ``("bearer", {"realm": "r", "service": "s"})``."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): (m.group(2) if m.group(2) is not None else m.group(3)) for m in _PARAM.finditer(rest)}
    return scheme.lower(), params


def identity_of(credential: Credential | None) -> str:
    return credential.identity if credential else "anonymous"


class Authenticator:
    """Thread-safe header cache plus the token exchange."""

    def __init__(self, transport: Transport, clock: Callable[[], float]) -> None:
        self._transport, self._clock = transport, clock
        self._lock = threading.Lock()
        self._headers: dict[CacheKey, tuple[str, float]] = {}

    def cached(self, credential: Credential | None, host: str, repository: str) -> str | None:
        key = (identity_of(credential), host, repository)
        with self._lock:
            entry = self._headers.get(key)
            if entry is None or entry[1] <= self._clock():
                self._headers.pop(key, None)
                return None
            return entry[0]

    def answer(self, call: Call, credential: Credential | None, host: str, repository: str, challenge: str) -> str:
        """The ``Authorization`` value answering ``challenge``; raises
        :class:`UnauthorizedError` when there is nothing to answer with or the token server
        refuses."""
        scheme, params = parse_challenge(challenge)
        if scheme == "bearer" and params.get("realm"):
            value, lifetime = self._token(call, credential, repository, params)
        elif scheme == "basic" and credential and credential.username:
            value, lifetime = _basic(credential), float("inf")
        else:
            said = f"challenge {challenge!r}" if challenge else "no WWW-Authenticate challenge"
            how = "without credentials" if not credential else "with credentials it cannot use"
            raise UnauthorizedError(call.reference, host, 401, f"{said}; asked {how}")
        with self._lock:
            self._headers[(identity_of(credential), host, repository)] = (value, self._clock() + lifetime)
        return value

    def _token(self, call: Call, credential: Credential | None, repository: str,
               params: Mapping[str, str]) -> tuple[str, float]:
        realm = params["realm"]
        scope = params.get("scope") or f"repository:{repository}:pull"
        query = {k: v for k, v in (("service", params.get("service", "")), ("scope", scope)) if v}
        headers: dict[str, str] = {"Accept": "application/json"}
        if credential and credential.identity_token:
            form = {**query, "grant_type": "refresh_token", "refresh_token": credential.identity_token,
                    "client_id": "node-feature-agent"}
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            answer = self._transport.send(call, "POST", realm, headers, TOKEN_BODY_LIMIT, urlencode(form).encode())
        else:
            if credential and credential.username:
                headers["Authorization"] = _basic(credential)
            separator = "&" if "?" in realm else "?"
            answer = self._transport.send(call, "GET", realm + separator + urlencode(query), headers, TOKEN_BODY_LIMIT)
        return _bearer(call, urlsplit(realm).netloc, answer)


def _bearer(call: Call, token_host: str, answer: Answer) -> tuple[str, float]:
    """The token server's answer as (``Authorization`` value, seconds it may be reused)."""
    if answer.status in (401, 403):
        raise UnauthorizedError(call.reference, token_host, answer.status, registry_message(answer.body))
    if answer.status != 200:
        raise RegistryError(call.reference, token_host, answer.status, registry_message(answer.body))
    try:
        document = json.loads(answer.body)
        token = document.get("token") or document.get("access_token")
        expires_in = float(document.get("expires_in") or DEFAULT_EXPIRES_IN)
    except (ValueError, AttributeError, TypeError):
        token, expires_in = None, 0.0
    if not isinstance(token, str) or not token:
        raise RegistryError(call.reference, token_host, answer.status, "token server answer has no token")
    return f"Bearer {token}", max(0.0, expires_in - EXPIRY_MARGIN)


def _basic(credential: Credential) -> str:
    raw = f"{credential.username}:{credential.password}".encode()
    return "Basic " + base64.b64encode(raw).decode()
