"""``node-feature-agent explain-image`` on every fixture image, on the three real registries
(plain with ``--insecure-registry``, token auth with ``--pull-secret``, TLS with ``--ca-file``).
Expected values are the fixture writer's platforms and digests."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from agent.cli import main
from tests.images.conftest import Layouts, TlsRegistry, TokenRegistry
from tests.images.layouts import EXPECTED
from tests.images.registries import RegistryProcess

IMAGES = ["multi", "pair", "single", "levels", "pair-docker", "single-docker"]


def explain(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["explain-image", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def platforms_of(document: dict[str, object]) -> list[dict[str, str]]:
    return document["platforms"]  # type: ignore[return-value]


def expected_json(name: str) -> list[dict[str, str]]:
    return [p.to_json() for p in EXPECTED[name.split("-")[0]]]


@pytest.mark.parametrize("name", IMAGES)
def test_plain(plain_registry: RegistryProcess, layouts: Layouts, capsys: pytest.CaptureFixture[str], name: str) -> None:
    ref = f"{plain_registry.host}/test/{name}:1"
    code, out, err = explain(capsys, ref, "--insecure-registry", plain_registry.host, "--format", "json")
    assert code == 0, err
    document = json.loads(out)
    assert document["reference"] == ref and platforms_of(document) == expected_json(name)
    if name in layouts.refs:
        assert document["digest"] == layouts.refs[name]["digest"]


def test_text_names_platforms_skipped_digest_and_source(plain_registry: RegistryProcess, layouts: Layouts,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = explain(capsys, f"{plain_registry.host}/test/multi:1", "--insecure-registry", plain_registry.host)
    assert code == 0
    lines = out.splitlines()
    assert [line.split(None, 1)[1] for line in lines if line.startswith("platform ")] == [
        "linux/amd64", "linux/arm64", "linux/arm/v7", "windows/amd64 (os.version 10.0.17763.5576)"]
    assert any(line.startswith("skipped ") and "attestation-manifest" in line for line in lines)
    assert f"digest     {layouts.refs['multi']['digest']} (application/vnd.oci.image.index.v1+json)" in lines
    assert any(line.startswith(f"source     registry {plain_registry.host}: OCI image index") for line in lines)


@pytest.mark.parametrize("name", IMAGES)
def test_token_auth_with_a_pull_secret(token_registry: TokenRegistry, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str], name: str) -> None:
    host = token_registry.registry.host
    secret = tmp_path / "dockerconfigjson"
    secret.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(b"alice:secret").decode()}}}))
    code, out, err = explain(capsys, f"{host}/private/{name}:1", "--insecure-registry", host,
                             "--pull-secret", str(secret), "--format", "json")
    assert code == 0, err
    assert platforms_of(json.loads(out)) == expected_json(name)


@pytest.mark.parametrize("name", IMAGES)
def test_tls(tls_registry: TlsRegistry, capsys: pytest.CaptureFixture[str], name: str) -> None:
    code, out, err = explain(capsys, f"{tls_registry.registry.host}/test/{name}:1", "--ca-file", str(tls_registry.ca_file),
                             "--format", "json")
    assert code == 0, err
    assert platforms_of(json.loads(out)) == expected_json(name)


def test_errors_are_one_line_quoting_the_registry(token_registry: TokenRegistry, plain_registry: RegistryProcess,
                                                  tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    host = token_registry.registry.host
    code, out, err = explain(capsys, f"{host}/private/multi:1", "--insecure-registry", host)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"error: explain-image: {host}/private/multi:1: registry {host} answered HTTP 401: UNAUTHORIZED")
    code, _, err = explain(capsys, f"{plain_registry.host}/test/nothing:1", "--insecure-registry", plain_registry.host)
    assert code == 2 and err.rstrip().endswith("HTTP 404: MANIFEST_UNKNOWN: manifest unknown")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    code, _, err = explain(capsys, "nginx", "--pull-secret", str(bad))
    assert code == 2 and err.startswith("error: explain-image: pull secret is not JSON")
    code, _, err = explain(capsys, "Not/A/Reference:")
    assert code == 2 and "invalid reference format" in err


def _explain_process(*argv: str) -> tuple[int, list[str]]:
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    done = subprocess.run([sys.executable, "-m", "agent", "explain-image", *argv], cwd=REPO, capture_output=True,
                          text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert "Traceback" not in done.stderr
    return done.returncode, [line for line in done.stderr.splitlines() if line.strip()]


def test_a_plain_http_registry_without_the_flag_says_which_flag(plain_registry: RegistryProcess) -> None:
    """The bare OpenSSL error (``WRONG_VERSION_NUMBER``) told a new user nothing: the one line
    now says the registry speaks plain HTTP and names the flag with the registry's host:port."""
    host = plain_registry.host
    code, lines = _explain_process(f"{host}/test/multi:1", "--timeout", "10")
    assert code == 2 and len(lines) == 1, lines
    assert f"{host} speaks plain HTTP, not TLS: if that is intended, pass --insecure-registry {host}" in lines[0]


def test_insecure_registry_without_the_port_is_named_as_the_miss(plain_registry: RegistryProcess) -> None:
    """``--insecure-registry HOST`` matches HOST on the default port only, as Docker's
    insecure-registries (an entry is the reference's host[:port], matched whole: moby
    registry/config.go isSecureIndex); against HOST:PORT the error now says so."""
    host = plain_registry.host
    bare = host.rsplit(":", 1)[0]
    code, lines = _explain_process(f"{host}/test/multi:1", "--insecure-registry", bare, "--timeout", "10")
    assert code == 2 and len(lines) == 1, lines
    assert f"--insecure-registry {bare} names no port" in lines[0]
    assert lines[0].endswith(f"so pass --insecure-registry {host}")
    code, _ = _explain_process(f"{host}/test/multi:1", "--insecure-registry", host, "--timeout", "10")
    assert code == 0
