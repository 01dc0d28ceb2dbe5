#!/usr/bin/env bash
# Build the shipped Dockerfile and prove the image in a real container (see deploy/smoke_image.py
# for what is checked). Needs root, Debian's docker.io, mmdebstrap, docker-registry and skopeo
# (explain-image against a real registry) and, for foreign platforms,
# qemu-user-static registered with binfmt (all installed here if missing), and the project's
# venv (.venv, from the README's set-up). CI runs it for its own platform (.ci/run); the foreign
# platforms are run by hand before a release (deploy/install.md "The image").
#
#   sudo deploy/smoke-image.sh                                  # this machine's platform
#   sudo deploy/smoke-image.sh --platform linux/arm64 --platform linux/arm/v7
#   sudo deploy/smoke-image.sh --rebuild-base                   # make the Debian bases again
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
packages="docker.io mmdebstrap docker-registry skopeo"
case " $* " in *" --platform"*) packages="$packages qemu-user-static binfmt-support" ;; esac
for package in $packages; do
  if ! dpkg-query -W -f '${Status}' "$package" 2>/dev/null | grep -q "ok installed"; then
    apt-get update -q >/dev/null
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q $packages >/dev/null
    break
  fi
done
case " $* " in *" --platform"*)
  # foreign binaries (a linux/arm64 or linux/arm/v7 build) run through qemu-user-static
  [ -e /proc/sys/fs/binfmt_misc/register ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc || true
  update-binfmts --enable >/dev/null 2>&1 || true ;;
esac
if ! /usr/bin/docker info >/dev/null 2>&1; then
  # no bridge and no iptables: the sandbox allows neither; the smoke run uses host networking
  dockerd --iptables=false --bridge=none >/tmp/nfa-smoke-dockerd.log 2>&1 &
  for _ in $(seq 60); do /usr/bin/docker info >/dev/null 2>&1 && break; sleep 0.5; done
fi
exec "$PYTHON" deploy/smoke_image.py "$@"
