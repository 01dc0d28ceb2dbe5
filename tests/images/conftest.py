"""Session fixtures: the fixture layouts written once, and three real registries (plain HTTP,
Bearer token auth behind the test token server, TLS with a throwaway CA) each started on a
free loopback port, filled with skopeo, and stopped by PID at the end of the session."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import pytest

from tests.images.layouts import Layout
from tests.images.registries import RegistryProcess, TokenServer, make_ca, push

pytestmark = pytest.mark.slow

for tool in ("docker-registry", "skopeo"):
    if shutil.which(tool) is None:  # .ci/run installs both; a missing one must fail, not skip
        raise RuntimeError(f"{tool} is not installed (apt-get install docker-registry skopeo)")


@dataclass
class Layouts:
    root: Path
    refs: dict[str, dict[str, Any]]
    salted: Path
    salted_refs: dict[str, dict[str, Any]]


@pytest.fixture(scope="session")
def layouts(tmp_path_factory: pytest.TempPathFactory) -> Layouts:
    root = tmp_path_factory.mktemp("oci")
    main, salted = root / "main", root / "salted"
    return Layouts(main, Layout(main).write(), salted, Layout(salted, salt="corrupt-me").write())


def fill(layouts: Layouts, host: str, prefix: str, creds: str | None = None) -> None:
    """The fixture images under ``<prefix>/``: OCI as written, plus Docker-typed copies."""
    for ref in ("multi", "pair", "single", "levels", "noarch"):
        push(layouts.root, ref, f"{host}/{prefix}/{ref}:1", creds=creds)
    push(layouts.root, "pair", f"{host}/{prefix}/pair-docker:1", docker_format=True, creds=creds)
    push(layouts.root, "single", f"{host}/{prefix}/single-docker:1", docker_format=True, creds=creds)


@pytest.fixture(scope="session")
def plain_registry(tmp_path_factory: pytest.TempPathFactory, layouts: Layouts) -> Iterator[RegistryProcess]:
    with RegistryProcess(tmp_path_factory.mktemp("registries"), "plain").running() as registry:
        fill(layouts, registry.host, "test")
        for ref in ("pair", "single"):
            push(layouts.salted, ref, f"{registry.host}/corrupt/{ref}:1")
        yield registry


@dataclass
class TokenRegistry:
    registry: RegistryProcess
    tokens: TokenServer


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory, layouts: Layouts) -> Iterator[TokenRegistry]:
    root = tmp_path_factory.mktemp("token")
    tokens = TokenServer(root)
    try:
        with RegistryProcess(root, "token", {"auth": tokens.registry_auth()}).running() as registry:
            fill(layouts, registry.host, "public", creds="alice:secret")
            fill(layouts, registry.host, "private", creds="alice:secret")
            yield TokenRegistry(registry, tokens)
    finally:
        tokens.stop()


@pytest.fixture(scope="session")
def basic_registry(tmp_path_factory: pytest.TempPathFactory, layouts: Layouts) -> Iterator[RegistryProcess]:
    """Basic auth (distribution's htpasswd: bcrypt entries only), user alice, password secret."""
    root = tmp_path_factory.mktemp("basic")
    htpasswd = root / "htpasswd"
    htpasswd.write_bytes(b"alice:" + bcrypt.hashpw(b"secret", bcrypt.gensalt(rounds=5)) + b"\n")
    auth = {"htpasswd": {"realm": "basic-realm", "path": str(htpasswd)}}
    with RegistryProcess(root, "basic", {"auth": auth}).running() as registry:
        for ref in ("pair", "single"):
            push(layouts.root, ref, f"{registry.host}/test/{ref}:1", creds="alice:secret")
        yield registry


@dataclass
class TlsRegistry:
    registry: RegistryProcess
    ca_file: Path


@pytest.fixture(scope="session")
def tls_registry(tmp_path_factory: pytest.TempPathFactory, layouts: Layouts) -> Iterator[TlsRegistry]:
    root = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_ca(root)
    tls = {"http": {"tls": {"certificate": str(cert), "key": str(key)}}}
    with RegistryProcess(root, "tls", tls, scheme="https").running(ca_file=str(ca)) as registry:
        fill(layouts, registry.host, "test")
        yield TlsRegistry(registry, ca)
