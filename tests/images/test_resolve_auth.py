"""Token (Bearer) auth and TLS against real registries: anonymous pull on ``public/*`` only,
a dockerconfigjson ``auth`` let in, a wrong password refused with the token server's 401,
``identitytoken`` exchanged by the OAuth2 refresh grant, and answers cached per credential
identity (the registry's access log shows the anonymous caller was asked about, not served
from, what alice's secret fetched)."""

from __future__ import annotations

import base64
import json
import ssl
from collections import Counter

import pytest

from agent.images import (
    Keyring,
    Resolver,
    ResolverConfig,
    UnauthorizedError,
    parse_dockerconfigjson,
)
from tests.images.conftest import Layouts, TlsRegistry, TokenRegistry
from tests.images.layouts import EXPECTED
from tests.images.registries import RegistryProcess


def keyring(host: str, **entry: str) -> Keyring:
    return Keyring([parse_dockerconfigjson(json.dumps({"auths": {host: entry}}))])


def alice(host: str, password: str = "secret") -> Keyring:
    return keyring(host, auth=base64.b64encode(f"alice:{password}".encode()).decode())


def resolver_for(token: TokenRegistry) -> Resolver:
    return Resolver(ResolverConfig(insecure_registries=frozenset({token.registry.host})))


def test_anonymous_pull_of_public_images(token_registry: TokenRegistry, layouts: Layouts) -> None:
    host = token_registry.registry.host
    answer = resolver_for(token_registry).resolve(f"{host}/public/multi:1")
    assert answer.platforms == EXPECTED["multi"] and answer.digest == layouts.refs["multi"]["digest"]


def test_private_needs_the_secret(token_registry: TokenRegistry) -> None:
    host = token_registry.registry.host
    with pytest.raises(UnauthorizedError) as caught:
        resolver_for(token_registry).resolve(f"{host}/private/pair:1")
    assert caught.value.host == host and caught.value.status == 401
    assert caught.value.registry_message.startswith("UNAUTHORIZED: authentication required")
    answer = resolver_for(token_registry).resolve(f"{host}/private/pair:1", alice(host))
    assert answer.platforms == EXPECTED["pair"]


@pytest.mark.parametrize("name", ["single", "single-docker", "pair-docker"])
def test_private_manifest_kinds_with_the_secret(token_registry: TokenRegistry, name: str) -> None:
    host = token_registry.registry.host
    answer = resolver_for(token_registry).resolve(f"{host}/private/{name}:1", alice(host))
    assert answer.platforms == EXPECTED[name.split("-")[0]]


def test_wrong_password_gets_the_token_server_s_401(token_registry: TokenRegistry) -> None:
    host = token_registry.registry.host
    with pytest.raises(UnauthorizedError) as caught:
        resolver_for(token_registry).resolve(f"{host}/private/pair:1", alice(host, "wrong"))
    assert caught.value.host == token_registry.tokens.host and caught.value.status == 401
    assert caught.value.registry_message == "UNAUTHORIZED: authentication failed for user alice"


def test_identity_token_is_a_refresh_grant(token_registry: TokenRegistry) -> None:
    host = token_registry.registry.host
    answer = resolver_for(token_registry).resolve(f"{host}/private/levels:1", keyring(host, identitytoken="alice-refresh"))
    assert answer.platforms == EXPECTED["levels"]
    assert any(method == "POST" and status == 200 for method, _, status in token_registry.tokens.seen)


def test_most_specific_key_then_the_next(token_registry: TokenRegistry) -> None:
    """Kubelet order: the host/path key's (wrong) credentials first, then the host key's."""
    host = token_registry.registry.host
    wrong = base64.b64encode(b"alice:wrong").decode()
    right = base64.b64encode(b"alice:secret").decode()
    ring = Keyring([parse_dockerconfigjson(json.dumps({"auths": {f"{host}/private": {"auth": wrong},
                                                                 f"http://{host}/v2/": {"auth": right}}}))])
    assert [c.password for c in ring.lookup(f"{host}/private/pair")] == ["wrong", "secret"]
    assert resolver_for(token_registry).resolve(f"{host}/private/pair:1", ring).platforms == EXPECTED["pair"]


def test_cache_is_per_credential_identity(token_registry: TokenRegistry) -> None:
    host = token_registry.registry.host
    resolver = resolver_for(token_registry)
    registry = token_registry.registry
    since = len(registry.requests())
    assert resolver.resolve(f"{host}/private/multi:1", alice(host)).platforms == EXPECTED["multi"]
    assert resolver.resolve(f"{host}/private/multi:1", alice(host)).cached  # same secret: cached
    with pytest.raises(UnauthorizedError):  # no secret: asked, and refused, never answered from cache
        resolver.resolve(f"{host}/private/multi:1")
    seen = Counter((r.method, r.path, r.status) for r in registry.ours(since))
    head = "/v2/private/multi/manifests/1"
    assert seen[("HEAD", head, 200)] == 1  # alice's one lookup; her second was cached
    # 401s: alice before her token; the anonymous caller before and with its (pull-less) token
    assert seen[("HEAD", head, 401)] == 3
    assert seen[("GET", head, 401)] == 1  # one GET for the registry's own words (a HEAD has no body)
    assert sum(n for (method, _, status), n in seen.items() if method == "GET" and status == 200) == 1


def test_tls_with_a_throwaway_ca(tls_registry: TlsRegistry, layouts: Layouts) -> None:
    host = tls_registry.registry.host
    resolver = Resolver(ResolverConfig(ca_file=str(tls_registry.ca_file)))
    answer = resolver.resolve(f"{host}/test/multi:1")
    assert answer.platforms == EXPECTED["multi"] and answer.digest == layouts.refs["multi"]["digest"]
    context = ssl.create_default_context(cafile=str(tls_registry.ca_file))
    assert [(r.method, r.status) for r in tls_registry.registry.ours(context=context)][-2:] == [("HEAD", 200), ("GET", 200)]


def test_tls_refuses_an_unknown_ca(tls_registry: TlsRegistry) -> None:
    from agent.images import RegistryUnavailableError

    with pytest.raises(RegistryUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        Resolver(ResolverConfig(total_timeout=5)).resolve(f"{tls_registry.registry.host}/test/multi:1")


def test_basic_auth(basic_registry: RegistryProcess) -> None:
    host = basic_registry.host
    resolver = Resolver(ResolverConfig(insecure_registries=frozenset({host})))
    assert resolver.resolve(f"{host}/test/single:1", alice(host)).platforms == EXPECTED["single"]
    with pytest.raises(UnauthorizedError, match="asked without credentials"):
        resolver.resolve(f"{host}/test/pair:1")
    with pytest.raises(UnauthorizedError) as caught:
        resolver.resolve(f"{host}/test/pair:1", alice(host, "wrong"))
    assert caught.value.host == host and caught.value.status == 401
    assert [(r.method, r.status) for r in basic_registry.ours()][:3] == [("HEAD", 401), ("HEAD", 200), ("GET", 200)]
