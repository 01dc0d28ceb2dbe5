"""The resolver against a real registry over plain HTTP: every manifest media type, platform
semantics, digest checks, caps, and the registry's own access log counting our requests.

Expected platforms and digests are the fixture writer's (tests/images/layouts.py); for the
Docker-typed copies skopeo converted, the digest is the sha256 of what ``skopeo inspect --raw``
(an independent client) reads back.
"""

from __future__ import annotations

import hashlib
import subprocess
import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest

from agent.images import InvalidManifestError, NotFoundError, Resolver, ResolverConfig
from tests.images.conftest import Layouts
from tests.images.layouts import EXPECTED
from tests.images.registries import RegistryProcess

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def resolver_for(registry: RegistryProcess, **knobs: object) -> Resolver:
    return Resolver(ResolverConfig(insecure_registries=frozenset({registry.host}), **knobs))  # type: ignore[arg-type]


def raw_digest(reference: str) -> str:
    raw = subprocess.run(["skopeo", "inspect", "--raw", "--tls-verify=false", f"docker://{reference}"],
                         check=True, capture_output=True, timeout=60).stdout
    return "sha256:" + hashlib.sha256(raw).hexdigest()


@pytest.mark.parametrize("name,media_type,expected", [
    ("multi", OCI_INDEX, "multi"), ("pair", OCI_INDEX, "pair"), ("levels", OCI_INDEX, "levels"),
    ("single", OCI_MANIFEST, "single"), ("pair-docker", DOCKER_LIST, "pair"), ("single-docker", DOCKER_MANIFEST, "single"),
])
def test_platform_sets(plain_registry: RegistryProcess, layouts: Layouts, name: str, media_type: str, expected: str) -> None:
    ref = f"{plain_registry.host}/test/{name}:1"
    answer = resolver_for(plain_registry).resolve(ref)
    assert answer.platforms == EXPECTED[expected]
    assert answer.media_type == media_type
    want = layouts.refs[name]["digest"] if name in layouts.refs else raw_digest(ref)
    assert answer.digest == want


def test_platforms_kept_whole_and_attestation_skipped(plain_registry: RegistryProcess, layouts: Layouts) -> None:
    answer = resolver_for(plain_registry).resolve(f"{plain_registry.host}/test/multi:1")
    assert [str(p) for p in answer.platforms] == ["linux/amd64", "linux/arm64", "linux/arm/v7", "windows/amd64"]
    assert answer.platforms[3].os_version == "10.0.17763.5576"
    (skipped,) = answer.skipped
    attestation = layouts.refs["multi"]  # the fifth entry of the index written offline
    assert skipped.reason == "attestation-manifest (annotation vnd.docker.reference.type)"
    assert skipped.digest != attestation["digest"] and skipped.media_type == OCI_MANIFEST


def test_by_digest_without_head(plain_registry: RegistryProcess, layouts: Layouts) -> None:
    digest = layouts.refs["pair"]["digest"]
    since = len(plain_registry.requests())
    answer = resolver_for(plain_registry).resolve(f"{plain_registry.host}/test/pair:ignored@{digest}")
    assert answer.platforms == EXPECTED["pair"] and answer.digest == digest
    assert [(r.method, r.path) for r in plain_registry.ours(since)] == [("GET", f"/v2/test/pair/manifests/{digest}")]


def test_missing_architecture_is_an_error(plain_registry: RegistryProcess) -> None:
    with pytest.raises(InvalidManifestError, match="states no architecture"):
        resolver_for(plain_registry).resolve(f"{plain_registry.host}/test/noarch:1")


def test_unknown_tag_quotes_the_registry(plain_registry: RegistryProcess) -> None:
    with pytest.raises(NotFoundError) as caught:
        resolver_for(plain_registry).resolve(f"{plain_registry.host}/test/multi:nope")
    assert caught.value.registry_message == "MANIFEST_UNKNOWN: manifest unknown" and not caught.value.transient


def test_registry_needs_the_accept_header(plain_registry: RegistryProcess) -> None:
    """Why every request sends all four types: without Accept, distribution 2.8 answers 404."""
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(f"http://{plain_registry.host}/v2/test/multi/manifests/1", timeout=10)
    assert caught.value.code == 404


@pytest.mark.parametrize("knob,value,needle", [("max_manifest_bytes", 1000, "over the 1000-byte cap"),
                                               ("max_index_entries", 4, "5 entries, over the cap of 4")])
def test_caps(plain_registry: RegistryProcess, knob: str, value: int, needle: str) -> None:
    with pytest.raises(InvalidManifestError, match=needle):
        resolver_for(plain_registry, **{knob: value}).resolve(f"{plain_registry.host}/test/multi:1")


@pytest.mark.parametrize("name,what", [("pair", "manifest"), ("single", "config blob")])
def test_a_body_that_does_not_match_its_digest_is_refused(plain_registry: RegistryProcess, layouts: Layouts,
                                                          name: str, what: str) -> None:
    """The registry serves a stored blob as is: one byte changed in its storage (same length)
    is what a corrupted disk or a lying mirror would send."""
    descriptor = layouts.salted_refs[name]
    digest = descriptor["digest"] if what == "manifest" else _config_digest(layouts, name)
    blob = plain_registry.blob_file(digest)
    original = blob.read_bytes()
    tampered = original.replace(b'"linux"', b'"LINUX"', 1)  # still JSON, same length
    assert tampered != original
    blob.write_bytes(tampered)
    try:
        with pytest.raises(InvalidManifestError, match=f"{what} from .* does not match its digest {digest}"):
            resolver_for(plain_registry).resolve(f"{plain_registry.host}/corrupt/{name}:1")
    finally:
        blob.write_bytes(original)


def _config_digest(layouts: Layouts, name: str) -> str:
    import json

    manifest = json.loads((layouts.salted / "blobs" / "sha256" / layouts.salted_refs[name]["digest"][7:]).read_bytes())
    return str(manifest["config"]["digest"])


def test_100_lookups_cost_one_manifest_get(plain_registry: RegistryProcess, layouts: Layouts) -> None:
    resolver = resolver_for(plain_registry)
    since = len(plain_registry.requests())
    answers = {resolver.resolve(f"{plain_registry.host}/test/multi:1").digest for _ in range(100)}
    assert answers == {layouts.refs["multi"]["digest"]}
    seen = Counter((r.method, r.path) for r in plain_registry.ours(since))
    digest = layouts.refs["multi"]["digest"]
    assert seen == {("HEAD", "/v2/test/multi/manifests/1"): 1, ("GET", f"/v2/test/multi/manifests/{digest}"): 1}
    counts = resolver.counters()
    assert counts.cache[("tag", "hit")] == 99 and counts.cache[("platforms", "miss")] == 1
    assert counts.requests == {(plain_registry.host, "200"): 2}


def test_concurrent_callers_share_one_registry_round(plain_registry: RegistryProcess, layouts: Layouts) -> None:
    resolver = resolver_for(plain_registry)
    since = len(plain_registry.requests())
    start, results = threading.Barrier(16), []

    def ask() -> None:
        start.wait()
        results.append(resolver.resolve(f"{plain_registry.host}/test/levels:1").platforms)

    threads = [threading.Thread(target=ask) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [EXPECTED["levels"]] * 16
    seen = Counter(r.method for r in plain_registry.ours(since))
    assert seen == {"HEAD": 1, "GET": 1}
