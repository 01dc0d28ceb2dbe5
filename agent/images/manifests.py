"""What a manifest, an index or a config blob says about platforms: pure functions on bytes
that the caller has already checked against their digest.

Field names are the OCI image-spec's (``image-index.md``, ``manifest.md``, ``config.md``);
Docker's manifest list and v2 schema 2 manifest use the same names (distribution
``docs/spec/manifest-v2-2.md``).
"""

from __future__ import annotations

import hashlib
import json
import re

from agent.images.errors import InvalidManifestError
from agent.images.platforms import (
    ATTESTATION_ANNOTATION,
    INDEX_TYPES,
    MANIFEST_TYPES,
    Platform,
    SkippedEntry,
)

CONFIG_TYPES = ("application/vnd.oci.image.config.v1+json", "application/vnd.docker.container.image.v1+json")
_DIGEST = re.compile(r"(sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})")


def check_digest(reference: str, digest: str) -> str:
    """``digest`` if it is a sha256 or sha512 digest in canonical form, else an error."""
    if not _DIGEST.fullmatch(digest):
        raise InvalidManifestError(reference, f"digest {str(digest)[:100]!r} is not a sha256 or sha512 digest")
    return digest


def verify(reference: str, what: str, body: bytes, digest: str) -> None:
    """Refuse ``body`` unless its hash is ``digest``."""
    algorithm, _, expected = check_digest(reference, digest).partition(":")
    actual = hashlib.new(algorithm, body).hexdigest()
    if actual != expected:
        raise InvalidManifestError(reference, f"{what} does not match its digest {digest} (got {algorithm}:{actual})")


def load_json(reference: str, what: str, body: bytes) -> dict[str, object]:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise InvalidManifestError(reference, f"{what} is not JSON") from None
    if not isinstance(document, dict):
        raise InvalidManifestError(reference, f"{what} is not a JSON object")
    return document


def media_type_of(reference: str, document: dict[str, object], content_type: str) -> str:
    """The body's own ``mediaType`` when it has one, else the ``Content-Type`` header's."""
    stated = document.get("mediaType")
    media_type = stated if isinstance(stated, str) and stated else content_type.split(";")[0].strip()
    if media_type not in INDEX_TYPES + MANIFEST_TYPES:
        raise InvalidManifestError(reference, f"unsupported manifest media type {media_type!r}")
    return media_type


def index_platforms(reference: str, document: dict[str, object],
                    max_entries: int) -> tuple[tuple[Platform, ...], tuple[SkippedEntry, ...]]:
    """The runnable platforms of an index or manifest list, in order without duplicates, and
    the entries skipped with why."""
    entries = document.get("manifests")
    if not isinstance(entries, list):
        raise InvalidManifestError(reference, "index has no 'manifests' list")
    if len(entries) > max_entries:
        raise InvalidManifestError(reference, f"index has {len(entries)} entries, over the cap of {max_entries}")
    platforms: list[Platform] = []
    skipped: list[SkippedEntry] = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise InvalidManifestError(reference, "index entry is not an object")
        digest, media_type = str(entry.get("digest", "")), str(entry.get("mediaType", ""))
        reason = _skip_reason(entry)
        if reason:
            skipped.append(SkippedEntry(digest, media_type, reason))
            continue
        platform = _platform(reference, f"index entry {digest}", entry.get("platform"))
        if platform not in platforms:
            platforms.append(platform)
    if not platforms:
        raise InvalidManifestError(reference, "index lists no runnable platform")
    return tuple(platforms), tuple(skipped)


def _skip_reason(entry: dict[str, object]) -> str:
    annotations = entry.get("annotations")
    if isinstance(annotations, dict) and ATTESTATION_ANNOTATION in annotations:
        return f"{annotations[ATTESTATION_ANNOTATION]} (annotation {ATTESTATION_ANNOTATION})"
    platform = entry.get("platform")
    if isinstance(platform, dict) and platform.get("os") == "unknown" and platform.get("architecture") == "unknown":
        return "platform unknown/unknown (attestation or SBOM)"
    media_type = entry.get("mediaType")
    if media_type in INDEX_TYPES:
        return "nested index (not followed)"
    if media_type not in MANIFEST_TYPES:
        return f"not an image manifest (mediaType {media_type!r})"
    return ""


def config_descriptor(reference: str, document: dict[str, object], max_bytes: int) -> str:
    """The config blob digest of an image manifest, after checking it names an image config."""
    config = document.get("config")
    if not isinstance(config, dict):
        raise InvalidManifestError(reference, "manifest has no config descriptor")
    if config.get("mediaType") not in CONFIG_TYPES:
        raise InvalidManifestError(reference, f"not a container image: config media type {config.get('mediaType')!r}")
    size = config.get("size")
    if isinstance(size, int) and size > max_bytes:
        raise InvalidManifestError(reference, f"config blob of {size} bytes is over the {max_bytes}-byte cap")
    return check_digest(reference, str(config.get("digest", "")))


def config_platform(reference: str, digest: str, document: dict[str, object]) -> Platform:
    """The platform an image config states (``os``, ``architecture``, ``variant``,
    ``os.version`` at its top level)."""
    return _platform(reference, f"config blob {digest}", document)


def _platform(reference: str, where: str, value: object) -> Platform:
    if not isinstance(value, dict):
        raise InvalidManifestError(reference, f"{where} has no platform")
    fields = {name: value.get(name, "") for name in ("os", "architecture", "variant", "os.version")}
    if not all(isinstance(v, str) for v in fields.values()):
        raise InvalidManifestError(reference, f"{where}: platform fields must be strings")
    if not fields["os"] or not fields["architecture"]:
        missing = " and ".join(name for name in ("os", "architecture") if not fields[name])
        raise InvalidManifestError(reference, f"{where} states no {missing} (not read as 'any platform')")
    return Platform(str(fields["os"]), str(fields["architecture"]), str(fields["variant"]), str(fields["os.version"]))
