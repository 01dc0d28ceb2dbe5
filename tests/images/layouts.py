"""OCI image layouts written offline, for pushing to a real registry with skopeo.

Shapes follow the OCI image-spec (``image-layout.md``, ``image-index.md``, ``manifest.md``,
``config.md``) and, for the attestation entry, buildx's attestation storage (moby/buildkit
``docs/attestations/attestation-storage.md``: an image manifest whose layer is
``application/vnd.in-toto+json``, listed in the index with platform ``unknown/unknown`` and the
annotations ``vnd.docker.reference.type: attestation-manifest`` and
``vnd.docker.reference.digest``). Layers are one-file gzip tars with mtime 0, so every digest
is reproducible; ``salt`` makes a set of images whose blobs no other set shares.

Each image is a ref name in one layout (``org.opencontainers.image.ref.name``):

- ``multi``: index of linux/amd64, linux/arm64, linux/arm/v7, windows/amd64 (with os.version)
  and an attestation for the amd64 image;
- ``pair``: index of linux/amd64 and linux/arm64 (pushed as an OCI index and, with
  ``--format v2s2``, as a Docker manifest list: skopeo cannot convert an in-toto layer);
- ``single``: the linux/arm/v7 manifest alone: its platform is only in its config blob;
- ``levels``: index of linux/amd64 and linux/amd64/v3;
- ``noarch``: a manifest whose config states os but no architecture.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

from agent.images.platforms import Platform

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"

AMD64 = Platform("linux", "amd64")
ARM64 = Platform("linux", "arm64")
ARMV7 = Platform("linux", "arm", "v7")
WINDOWS = Platform("windows", "amd64", "", "10.0.17763.5576")
AMD64_V3 = Platform("linux", "amd64", "v3")

EXPECTED = {
    "multi": (AMD64, ARM64, ARMV7, WINDOWS),
    "pair": (AMD64, ARM64),
    "single": (ARMV7,),
    "levels": (AMD64, AMD64_V3),
}


class Layout:
    """One layout directory; :meth:`write` returns the descriptors by ref name."""

    def __init__(self, root: Path, salt: str = "") -> None:
        self.root, self.salt = root, salt
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        self.refs: dict[str, dict[str, Any]] = {}

    def blob(self, data: bytes, media_type: str, **extra: Any) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        (self.root / "blobs" / "sha256" / digest).write_bytes(data)
        return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data), **extra}

    def image(self, platform: Platform | None, name: str, config_extra: dict[str, Any] | None = None) -> dict[str, Any]:
        tar = io.BytesIO()
        with tarfile.open(fileobj=tar, mode="w", format=tarfile.USTAR_FORMAT) as archive:
            content = f"{name} {platform} {self.salt}\n".encode()
            info = tarfile.TarInfo(f"etc/{name}")
            info.size, info.mtime = len(content), 0
            archive.addfile(info, io.BytesIO(content))
        raw = tar.getvalue()
        layer = self.blob(gzip.compress(raw, mtime=0), LAYER)
        config: dict[str, Any] = {"rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
                                  "config": {"Labels": {"salt": self.salt}}}
        if platform is not None:
            config.update({"os": platform.os, "architecture": platform.architecture})
            if platform.variant:
                config["variant"] = platform.variant
            if platform.os_version:
                config["os.version"] = platform.os_version
        config.update(config_extra or {})
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": self.blob(json.dumps(config, sort_keys=True).encode(), OCI_CONFIG), "layers": [layer]}
        return self.blob(json.dumps(manifest, sort_keys=True).encode(), OCI_MANIFEST)

    def attestation(self, subject: dict[str, Any]) -> dict[str, Any]:
        statement = {"_type": "https://in-toto.io/Statement/v0.1", "predicateType": "https://spdx.dev/Document",
                     "subject": [{"name": "test", "digest": {"sha256": subject["digest"].split(":")[1]}}],
                     "predicate": {"spdxVersion": "SPDX-2.3", "salt": self.salt}}
        layer = self.blob(json.dumps(statement).encode(), "application/vnd.in-toto+json",
                          annotations={"in-toto.io/predicate-type": "https://spdx.dev/Document"})
        config = {"architecture": "unknown", "os": "unknown", "config": {}, "rootfs": {"type": "layers", "diff_ids": []}}
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                    "config": self.blob(json.dumps(config).encode(), OCI_CONFIG), "layers": [layer]}
        return self.blob(json.dumps(manifest).encode(), OCI_MANIFEST, platform={"architecture": "unknown", "os": "unknown"},
                         annotations={"vnd.docker.reference.digest": subject["digest"],
                                      "vnd.docker.reference.type": "attestation-manifest"})

    def index(self, entries: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
        return self.blob(json.dumps(body, sort_keys=True).encode(), OCI_INDEX)

    def entry(self, platform: Platform, name: str) -> dict[str, Any]:
        descriptor = self.image(platform, name)
        descriptor["platform"] = platform.to_json()
        return descriptor

    def write(self) -> dict[str, dict[str, Any]]:
        amd64, arm64 = self.entry(AMD64, "amd64"), self.entry(ARM64, "arm64")
        armv7, windows = self.entry(ARMV7, "armv7"), self.entry(WINDOWS, "windows")
        self.refs["multi"] = self.index([amd64, arm64, armv7, windows, self.attestation(amd64)])
        self.refs["pair"] = self.index([amd64, arm64])
        self.refs["single"] = {k: v for k, v in armv7.items() if k != "platform"}
        self.refs["levels"] = self.index([amd64, self.entry(AMD64_V3, "amd64v3")])
        self.refs["noarch"] = self.image(None, "noarch", {"os": "linux"})
        manifests = [{**d, "annotations": {"org.opencontainers.image.ref.name": ref}} for ref, d in self.refs.items()]
        (self.root / "index.json").write_text(json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}))
        (self.root / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')
        return self.refs
