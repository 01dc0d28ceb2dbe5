"""The registry API calls the resolver makes (distribution ``docs/spec/api.md``, OCI
distribution-spec ``spec.md``): ``HEAD`` a manifest for its digest, ``GET`` a manifest or a
blob, each with the credential's ``Authorization`` and the status mapped to an error.

401/403/404 are answers, not failures: a 401 is answered once with the challenge (token or
Basic) and the request sent again; a second 401, a 403 or a 404 is raised at once, never
retried.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent.images.auth import Authenticator
from agent.images.credentials import Credential
from agent.images.errors import (
    NotFoundError,
    PlainHttpRegistryError,
    RegistryError,
    RegistryUnavailableError,
    UnauthorizedError,
)
from agent.images.platforms import ALL_TYPES
from agent.images.reference import ImageReference
from agent.images.transport import Answer, Call, Transport, registry_message

ACCEPT = ", ".join(ALL_TYPES)
#: OpenSSL's words when a TLS client gets plain HTTP back (1.1/3.0: the first bytes read as a
#: record version; 3.2+: as a record too long or malformed)
PLAIN_HTTP_SIGNS = ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST")


def insecure_hint(host: str, insecure: frozenset[str]) -> str:
    """What to do when ``host`` (``host[:port]``, as in the reference) answers HTTPS in plain
    HTTP. An entry is matched whole, port included, as Docker matches its insecure-registries
    (moby ``registry/config.go`` ``isSecureIndex``: ``config.IndexConfigs[indexName]``, the
    index name being the reference's ``host:port``), so ``HOST`` alone never matches ``HOST:5000``:
    say so when that is the miss."""
    bare = re.fullmatch(r"(.+):(\d+)", host)
    if bare is not None and bare.group(1) in insecure:
        return (f"{host} speaks plain HTTP, not TLS, and --insecure-registry {bare.group(1)} names no port: an "
                f"entry matches host and port whole (as Docker's insecure-registries), so pass "
                f"--insecure-registry {host}")
    return f"{host} speaks plain HTTP, not TLS: if that is intended, pass --insecure-registry {host}"


class RegistryClient:
    """Thread-safe; one per resolver."""

    def __init__(self, transport: Transport, auth: Authenticator, insecure: frozenset[str]) -> None:
        self._transport, self._auth, self._insecure = transport, auth, insecure

    def head_manifest(self, call: Call, image: ImageReference, credential: Credential | None, ref: str,
                      max_bytes: int) -> Answer:
        """The manifest's headers; its declared ``Content-Length`` is held to ``max_bytes``."""
        return self._get(call, image, credential, "HEAD", f"manifests/{ref}", ACCEPT, max_bytes)

    def get_manifest(self, call: Call, image: ImageReference, credential: Credential | None, ref: str,
                     max_bytes: int, *, authenticate: bool = True) -> Answer:
        """``authenticate=False``: a 401 is raised as is, not answered (for a second look at
        an error the registry already gave)."""
        return self._get(call, image, credential, "GET", f"manifests/{ref}", ACCEPT, max_bytes, authenticate)

    def get_blob(self, call: Call, image: ImageReference, credential: Credential | None, digest: str,
                 max_bytes: int) -> Answer:
        return self._get(call, image, credential, "GET", f"blobs/{digest}", "*/*", max_bytes)

    def _get(self, call: Call, image: ImageReference, credential: Credential | None, method: str, path: str,
             accept: str, max_bytes: int, authenticate: bool = True) -> Answer:
        host = image.api_host
        scheme = "http" if image.domain in self._insecure or host in self._insecure else "https"
        url = f"{scheme}://{host}/v2/{image.repository}/{path}"
        authorization = self._auth.cached(credential, host, image.repository)
        answer = self._send(call, method, url, _headers(accept, authorization), max_bytes, host)
        if answer.status == 401 and authenticate:
            challenge = answer.headers.get("WWW-Authenticate", "")
            authorization = self._auth.answer(call, credential, host, image.repository, challenge)
            answer = self._send(call, method, url, _headers(accept, authorization), max_bytes, host)
        if answer.status in (401, 403):
            raise UnauthorizedError(call.reference, host, answer.status, _said(answer))
        if answer.status == 404:
            raise NotFoundError(call.reference, host, 404, _said(answer))
        if answer.status != 200:
            raise RegistryError(call.reference, host, answer.status, _said(answer))
        return answer


    def _send(self, call: Call, method: str, url: str, headers: Mapping[str, str], max_bytes: int,
              host: str) -> Answer:
        try:
            return self._transport.send(call, method, url, headers, max_bytes)
        except RegistryUnavailableError as exc:
            if url.startswith("https:") and any(sign in exc.reason for sign in PLAIN_HTTP_SIGNS):
                raise PlainHttpRegistryError(call.reference,
                                             f"{exc.reason}: {insecure_hint(host, self._insecure)}") from None
            raise


def _headers(accept: str, authorization: str | None) -> Mapping[str, str]:
    headers = {"Accept": accept, "User-Agent": "node-feature-agent"}
    if authorization:
        headers["Authorization"] = authorization
    return headers


def _said(answer: Answer) -> str:
    """The registry's own words (empty for a HEAD, which has no body)."""
    return registry_message(answer.body)
