"""Pure protocol pieces, with the specs' own examples as expected values: the challenge of
distribution's docs/spec/auth/token.md, Retry-After's two forms from RFC 9110 section 10.2.3,
and index entries as buildx writes them (moby/buildkit docs/attestations/attestation-storage.md)."""

from __future__ import annotations

import email.utils

import pytest

from agent.images import InvalidManifestError, Platform
from agent.images.auth import parse_challenge
from agent.images.manifests import index_platforms
from agent.images.transport import retry_after_seconds


def test_token_spec_challenge() -> None:
    header = ('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
              'scope="repository:samalba/my-app:pull,push"')
    assert parse_challenge(header) == ("bearer", {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                                                  "scope": "repository:samalba/my-app:pull,push"})
    assert parse_challenge('Basic realm="basic-realm"') == ("basic", {"realm": "basic-realm"})


def test_retry_after_forms() -> None:
    assert retry_after_seconds("120", 0.0) == 120.0
    date = "Fri, 31 Dec 1999 23:59:59 GMT"
    when = email.utils.parsedate_to_datetime(date).timestamp()
    assert retry_after_seconds(date, when - 30) == pytest.approx(30.0)
    assert retry_after_seconds(date, when + 30) == 0.0
    assert retry_after_seconds("soon", 0.0) == 1.0 and retry_after_seconds("", 0.0) == 1.0


MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def entry(platform: dict[str, str] | None, **annotations: str) -> dict[str, object]:
    out: dict[str, object] = {"mediaType": MANIFEST, "digest": "sha256:" + "a" * 64, "size": 1}
    if platform is not None:
        out["platform"] = platform
    if annotations:
        out["annotations"] = {k.replace("_", "."): v for k, v in annotations.items()}
    return out


def test_sbom_without_annotation_is_skipped_by_unknown_platform() -> None:
    platforms, skipped = index_platforms("r", {"manifests": [entry({"os": "linux", "architecture": "arm64", "variant": "v8"}),
                                                             entry({"os": "unknown", "architecture": "unknown"})]}, 1000)
    assert platforms == (Platform("linux", "arm64", "v8"),)
    assert [s.reason for s in skipped] == ["platform unknown/unknown (attestation or SBOM)"]


@pytest.mark.parametrize("platform,needle", [(None, "has no platform"), ({"os": "linux"}, "states no architecture"),
                                             ({"os": "linux", "architecture": ""}, "states no architecture"),
                                             ({"architecture": "amd64"}, "states no os")])
def test_missing_platform_fields_are_errors(platform: dict[str, str] | None, needle: str) -> None:
    with pytest.raises(InvalidManifestError, match=needle):
        index_platforms("r", {"manifests": [entry(platform)]}, 1000)


def test_an_index_of_attestations_only_is_an_error() -> None:
    only = entry({"os": "unknown", "architecture": "unknown"}, vnd_docker_reference_type="attestation-manifest")
    with pytest.raises(InvalidManifestError, match="no runnable platform"):
        index_platforms("r", {"manifests": [only]}, 1000)
