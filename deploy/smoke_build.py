"""Build the shipped Dockerfile for one platform, the way deploy/smoke_image.py tests it.

The Dockerfile starts from ``debian:bookworm-slim``. No registry is reachable where the smoke
test runs, so it makes that base itself, by the recipe Debian's official images use
(debuerreotype: the ``minbase`` variant, merged /usr, documentation, man pages and locales
excluded by dpkg path filters, no apt lists), with ``mmdebstrap`` from Debian's mirror, for
each platform's Debian architecture (qemu-user-static runs the foreign maintainer scripts).
The one addition is this machine's CA bundle and an ``/etc/pip.conf`` naming it, because the
build reaches PyPI through this network's TLS proxy; a real build needs neither.

The image is built from the repository's tracked files only (``git ls-files``), as a clean
checkout would be.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")  # Debian's docker.io client: BuildKit without buildx
SUITE = "bookworm"
MIRRORS = (f"deb http://deb.debian.org/debian {SUITE} main",
           f"deb http://deb.debian.org/debian {SUITE}-updates main",
           f"deb http://deb.debian.org/debian-security {SUITE}-security main")
#: debuerreotype's slimming (``debuerreotype-slimify``): what the -slim images leave out
SLIM_PATH_FILTERS = ("path-exclude=/usr/share/man/*", "path-exclude=/usr/share/doc/*",
                     "path-include=/usr/share/doc/*/copyright", "path-exclude=/usr/share/info/*",
                     "path-exclude=/usr/share/groff/*", "path-exclude=/usr/share/lintian/*",
                     "path-exclude=/usr/share/linda/*", "path-exclude=/usr/share/locale/*",
                     "path-include=/usr/share/locale/locale.alias")
BUILD_CA = "/usr/local/share/build-host-ca.pem"


@dataclass(frozen=True)
class Platform:
    """An OCI platform and the Debian architecture that runs on it."""

    oci: str  # linux/amd64, linux/arm64, linux/arm/v7
    debian: str  # amd64, arm64, armhf

    @property
    def tag(self) -> str:
        return self.oci.removeprefix("linux/").replace("/", "")


PLATFORMS = {p.oci: p for p in (Platform("linux/amd64", "amd64"), Platform("linux/arm64", "arm64"),
                                Platform("linux/arm/v7", "armhf"))}


class BuildFailed(RuntimeError):
    """A step of the base or image build failed; the message carries its output's tail."""


def run(*cmd: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, env=env, cwd=cwd, check=False)


def host_platform() -> Platform:
    machine = os.uname().machine
    oci = {"x86_64": "linux/amd64", "aarch64": "linux/arm64", "armv7l": "linux/arm/v7"}.get(machine)
    if oci is None:
        raise BuildFailed(f"no image platform for this machine ({machine})")
    return PLATFORMS[oci]


def base_tag(platform: Platform) -> str:
    return f"nfa-smoke-base:{SUITE}-slim-{platform.tag}"


def build_base(platform: Platform, tmp: Path, rebuild: bool) -> str:
    """The ``debian:bookworm-slim`` stand-in for ``platform``, made once and kept as a local image."""
    tag = base_tag(platform)
    if not rebuild and run(DOCKER, "image", "inspect", tag).returncode == 0:
        return tag
    context = tmp / f"base-{platform.tag}"
    context.mkdir()
    ca = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    cmd = ["mmdebstrap", "--variant=minbase", f"--architectures={platform.debian}",
           "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr", "--aptopt=Acquire::Languages \"none\"",
           *(f"--dpkgopt={rule}" for rule in SLIM_PATH_FILTERS),
           "--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*.bin",
           f"--customize-hook=cp {ca} \"$1{BUILD_CA}\"",
           f"--customize-hook=printf '[global]\\ncert = {BUILD_CA}\\n' > \"$1/etc/pip.conf\"",
           SUITE, str(context / "rootfs.tar"), *MIRRORS]
    done = make_rootfs(cmd)
    if done.returncode and f"{SUITE}-security" in done.stderr:
        # seen here: the mirror served a stale armhf security index for hours (size mismatch)
        print(f"WARN  {platform.debian}: {SUITE}-security unreadable on this mirror; this base is made without it "
              "(a smoke-test base only: never ship an image built so)")
        done = make_rootfs([part for part in cmd if "-security" not in part])
    if done.returncode:
        raise BuildFailed(f"mmdebstrap {platform.debian} failed:\n{done.stderr[-2000:]}")
    # an image made by `docker build FROM scratch` carries its platform; `docker import` would not
    (context / "Dockerfile").write_text("FROM scratch\nADD rootfs.tar /\nCMD [\"bash\"]\n")
    done = run(DOCKER, "build", "--platform", platform.oci, "-t", tag, str(context), env={**os.environ, "DOCKER_BUILDKIT": "1"})
    if done.returncode:
        raise BuildFailed(f"base image {tag}: {done.stderr[-2000:]}")
    return tag


def make_rootfs(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    """mmdebstrap, tried three times: a mirror caught mid-sync answers with a short index file."""
    done = run("nice", "-n", "15", *cmd)
    for attempt in range(2):
        if done.returncode == 0:
            break
        time.sleep(20 * (attempt + 1))
        done = run("nice", "-n", "15", *cmd)
    return done


def checkout(tmp: Path) -> Path:
    """The repository's tracked files, as a clean clone has them."""
    context = tmp / "context"
    if context.exists():
        return context
    files = run("git", "-C", str(REPO), "ls-files", "-z").stdout.split("\0")
    for rel in filter(None, files):
        src, dst = REPO / rel, context / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    dockerfile = context / "Dockerfile"
    # the syntax directive makes BuildKit fetch a frontend image from a registry; the built-in
    # frontend of Debian's docker.io understands this Dockerfile (RUN --mount) without it
    dockerfile.write_text("".join(line for line in dockerfile.read_text().splitlines(True)
                                  if not line.startswith("# syntax=")))
    return context


def image_tag(platform: Platform) -> str:
    return f"node-feature-agent:smoke-{platform.tag}"


def build_image(platform: Platform, base: str, tmp: Path) -> float:
    """Build the Dockerfile for ``platform`` on ``base``; the seconds it took. A foreign
    platform's build runs under qemu-user-static, at low priority (a shared machine)."""
    started = time.monotonic()
    done = run("nice", "-n", "15", DOCKER, "build", "--platform", platform.oci, "--network", "host",
               "--build-arg", f"BASE_IMAGE={base}", "-t", image_tag(platform), str(checkout(tmp)),
               env={**os.environ, "DOCKER_BUILDKIT": "1"})
    if done.returncode:
        raise BuildFailed(f"docker build {platform.oci}:\n{done.stderr[-3000:]}")
    return time.monotonic() - started


@dataclass(frozen=True)
class ImageSize:
    unpacked: int  # bytes, as `docker image inspect` reports (layers unpacked)
    compressed: int  # bytes of `docker save | gzip`: what a registry stores and a node pulls, near enough


def image_size(platform: Platform) -> ImageSize:
    tag = image_tag(platform)
    unpacked = int(run(DOCKER, "image", "inspect", "-f", "{{.Size}}", tag).stdout.strip())
    done = run("sh", "-c", f"{DOCKER} save {tag} | gzip -c | wc -c")
    if done.returncode:
        raise BuildFailed(f"docker save {tag}: {done.stderr}")
    return ImageSize(unpacked=unpacked, compressed=int(done.stdout.strip()))
