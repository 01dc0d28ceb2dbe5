"""Registries that redirect or misbehave: a blob answered with a redirect to another host (as
registries on object storage do) is followed; a body larger than the manifest cap is refused
whether it declares its length or streams without one, after reading at most the cap; a
registry that sends no ``Docker-Content-Digest`` is answered by the digest of the body."""

from __future__ import annotations

import pytest

from agent.images import InvalidManifestError, Resolver, ResolverConfig
from tests.images.conftest import Layouts
from tests.images.layouts import EXPECTED
from tests.images.registries import BlobRedirect, Endless, RegistryProcess, Throttle

MiB = 1024 * 1024


def test_blob_redirect_to_another_host_is_followed(plain_registry: RegistryProcess) -> None:
    port = plain_registry.host.split(":")[1]
    proxy = BlobRedirect(plain_registry.host, target=f"localhost:{port}")
    try:
        since = len(plain_registry.requests())
        resolver = Resolver(ResolverConfig(insecure_registries=frozenset({proxy.host, f"localhost:{port}"})))
        assert resolver.resolve(f"{proxy.host}/test/single:1").platforms == EXPECTED["single"]
        assert [status for method, path, status in proxy.seen if "/blobs/" in path] == [307]
        assert [r.method for r in plain_registry.ours(since) if "/blobs/" in r.path] == ["GET"]
    finally:
        proxy.stop()


@pytest.mark.parametrize("declare", [True, False], ids=["declared", "streamed"])
def test_a_body_over_the_cap_is_refused(declare: bool) -> None:
    server = Endless(size=5 * MiB, declare=declare)
    try:
        resolver = Resolver(ResolverConfig(insecure_registries=frozenset({server.host})))
        with pytest.raises(InvalidManifestError, match=f"over the {4 * MiB}-byte cap"):
            resolver.resolve(f"{server.host}/hostile/index:1")
    finally:
        server.stop()


def test_without_docker_content_digest_the_digest_is_the_body_s(plain_registry: RegistryProcess, layouts: Layouts) -> None:
    """The header is optional (OCI distribution-spec); the tag's manifest body then names it."""
    proxy = Throttle(plain_registry.host)
    proxy.keep = ("content-type",)
    try:
        answer = Resolver(ResolverConfig(insecure_registries=frozenset({proxy.host}))).resolve(f"{proxy.host}/test/multi:1")
        assert answer.digest == layouts.refs["multi"]["digest"] and answer.platforms == EXPECTED["multi"]
        assert [(m, p.rsplit("/", 1)[1][:7]) for m, p, _ in proxy.seen] == [("HEAD", "1"), ("GET", "1"), ("GET", "sha256:")]
    finally:
        proxy.stop()
