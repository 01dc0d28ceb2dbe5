"""Platforms as the registry states them, and what a manifest or index says about them.

A platform is kept whole: ``linux/arm/v7`` is not ``linux/arm64``, ``windows/amd64`` is not
``linux/amd64``, ``linux/amd64/v3`` is not ``linux/amd64``. Nothing is normalised (no
``aarch64`` -> ``arm64``, no default variant): the values are exactly what the index entry or
config blob says, so a caller matches them against node labels with its own rules.

Attestation and SBOM entries of an index are skipped, with the reason: buildx marks them with
the annotation ``vnd.docker.reference.type`` (value ``attestation-manifest``) and the platform
``unknown/unknown`` (docker/buildx docs "Attestation storage"; moby/buildkit
``docs/attestations/attestation-storage.md``). A platform without ``os`` or ``architecture``
is an error (:class:`~agent.images.errors.InvalidManifestError`), never "any".
"""

from __future__ import annotations

from dataclasses import dataclass

# The four manifest media types (OCI image-spec media-types.md; distribution's
# docs/spec/manifest-v2-2.md).
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)
ALL_TYPES = INDEX_TYPES + MANIFEST_TYPES

ATTESTATION_ANNOTATION = "vnd.docker.reference.type"


@dataclass(frozen=True, order=True)
class Platform:
    """One platform an image runs on: ``os``, ``architecture``, ``variant`` ("" when the
    registry gives none), and for Windows ``os_version`` ("" when absent). Two platforms are
    equal only when all four are."""

    os: str
    architecture: str
    variant: str = ""
    os_version: str = ""

    def __str__(self) -> str:
        """``os/architecture[/variant]``, the form ``docker --platform`` takes."""
        return "/".join(part for part in (self.os, self.architecture, self.variant) if part)

    def to_json(self) -> dict[str, str]:
        """The OCI field names; ``variant`` and ``os.version`` only when present."""
        out = {"os": self.os, "architecture": self.architecture}
        if self.variant:
            out["variant"] = self.variant
        if self.os_version:
            out["os.version"] = self.os_version
        return out


@dataclass(frozen=True)
class SkippedEntry:
    """An index entry that is not a runnable image, and why it was left out."""

    digest: str
    media_type: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"digest": self.digest, "mediaType": self.media_type, "reason": self.reason}


@dataclass(frozen=True)
class ImagePlatforms:
    """The answer for one image reference.

    ``reference``: as asked; ``canonical``: the fully qualified name the registry was asked
    about (``docker.io/library/nginx:latest``); ``digest``: the manifest or index digest the
    answer is about (verified); ``media_type``: its media type; ``platforms``: the runnable
    platforms in registry order, without duplicates; ``skipped``: index entries left out;
    ``source``: where the answer came from, one line (registry host, and for a single
    manifest the config blob digest); ``cached``: True when no registry request was made.
    """

    reference: str
    canonical: str
    digest: str
    media_type: str
    platforms: tuple[Platform, ...]
    skipped: tuple[SkippedEntry, ...]
    source: str
    cached: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "reference": self.reference,
            "canonical": self.canonical,
            "digest": self.digest,
            "mediaType": self.media_type,
            "platforms": [p.to_json() for p in self.platforms],
            "skipped": [s.to_json() for s in self.skipped],
            "source": self.source,
            "cached": self.cached,
        }
