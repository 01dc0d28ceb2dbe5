"""Pull-secret parsing and kubelet's keyring matching. Expected values: kubelet's
keyring_test.go tables (data/kubelet_keyring_cases.json names the file and commit) and its
config.go auth decoding."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from agent.images import (
    Credential,
    Keyring,
    PullSecretError,
    parse_dockercfg,
    parse_dockerconfigjson,
)
from agent.images.credentials import is_default_registry_match, urls_match

CASES = json.loads((Path(__file__).parent / "data" / "kubelet_keyring_cases.json").read_text())
FOO = Credential("foo", "bar")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def keyring_of(key: str) -> Keyring:
    # kubelet's tests build the config from {key: {"email", "auth": base64("foo:bar")}}
    return Keyring([parse_dockercfg(json.dumps({key: {"email": "foo@bar.baz", "auth": b64("foo:bar")}}))])


@pytest.mark.parametrize("glob,target,expected", CASES["UrlsMatch"])
def test_urls_match(glob: str, target: str, expected: bool) -> None:
    assert urls_match(glob, target) is expected


@pytest.mark.parametrize("key,target", CASES["DockerKeyringForGlob"])
def test_glob_keys_hit(key: str, target: str) -> None:
    assert keyring_of(key).lookup(target + "/foo/bar")[0] == FOO


@pytest.mark.parametrize("key,target", CASES["KeyringMiss"])
def test_glob_keys_miss(key: str, target: str) -> None:
    assert keyring_of(key).lookup(target + "/foo/bar") == ()


def test_docker_hub_key() -> None:
    keyring = keyring_of(CASES["DockerHubKey"])
    for image, at_most in CASES["DockerHubHits"]:
        found = keyring.lookup(image)
        assert found and found[0] == FOO and len(found) <= at_most, image
    for image in CASES["DockerHubMisses"]:
        assert keyring.lookup(image) == ()


@pytest.mark.parametrize("image,expected", CASES["IsDefaultRegistryMatch"])
def test_is_default_registry_match(image: str, expected: bool) -> None:
    assert is_default_registry_match(image) is expected


@pytest.mark.parametrize("table", ["DockerKeyringLookup", "Issue3797"])
def test_most_specific_first(table: str) -> None:
    people = {"ada": Credential("ada", "smash"), "grace": Credential("grace", "squash"), "rex": Credential("rex", "tiny arms")}
    config = {key: {"username": people[who].username, "password": people[who].password, "email": f"{who}@example.com"}
              for key, who in CASES[table]["config"].items()}
    keyring = Keyring([parse_dockercfg(json.dumps(config))])
    for image, expected in CASES[table]["cases"]:
        assert keyring.lookup(image) == tuple(people[who] for who in expected), image


def test_dockerconfigjson_forms() -> None:
    secret = {"auths": {
        "a.example": {"auth": b64("alice:s:e:c")},                    # password may hold ':'
        "b.example": {"auth": b64("bob:pw").rstrip("=")},            # unpadded, as kubelet accepts
        "c.example": {"username": "carol", "password": "pw"},
        "d.example": {"identitytoken": "refresh-me"},
    }}
    parsed = parse_dockerconfigjson(json.dumps(secret).encode())
    assert parsed["a.example"] == Credential("alice", "s:e:c")
    assert parsed["b.example"] == Credential("bob", "pw")
    assert parsed["c.example"] == Credential("carol", "pw")
    assert parsed["d.example"] == Credential("", "", "refresh-me")
    assert parse_dockerconfigjson(b"{}") == {}
    assert "pw" not in repr(parsed["c.example"])


def test_secrets_in_pod_order_and_identity() -> None:
    first = parse_dockerconfigjson(json.dumps({"auths": {"r.example": {"auth": b64("one:1")}}}))
    second = parse_dockerconfigjson(json.dumps({"auths": {"r.example": {"auth": b64("two:2")}}}))
    found = Keyring([first, second]).lookup("r.example/app")
    assert [c.username for c in found] == ["one", "two"]
    assert found[0].identity != found[1].identity and Credential("one", "1").identity == found[0].identity


@pytest.mark.parametrize("data", [b"not json", b"[]", b'{"auths": []}', b'{"auths": {"x": {"auth": "%%%"}}}',
                                  b'{"auths": {"x": {"auth": "' + b64("nocolon").encode() + b'"}}}',
                                  b'{"auths": {"x": "string"}}', b'{"auths": {"x": {"username": 5}}}'])
def test_bad_secret_contents_are_one_line_errors(data: bytes) -> None:
    with pytest.raises(PullSecretError) as caught:
        parse_dockerconfigjson(data)
    assert "\n" not in str(caught.value)
