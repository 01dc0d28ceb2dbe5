#!/usr/bin/env bash
# Build the image and run it exactly as daemonset.yaml does, on this host (see
# deploy/smoke_image.py for what is checked).  Needs root, Debian's docker.io and mmdebstrap
# (installed here if missing) and the project's venv (.venv, from the README's set-up).
# Not part of CI: too heavy, and CI machines have no Docker engine.
#
#   sudo deploy/smoke-image.sh                 # PASS/FAIL per check, exit 1 on any FAIL
#   sudo deploy/smoke-image.sh --rebuild-base  # make the Debian base image again
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
if ! command -v dockerd >/dev/null || ! command -v mmdebstrap >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io mmdebstrap >/dev/null
fi
if ! /usr/bin/docker info >/dev/null 2>&1; then
  # no bridge and no iptables: the sandbox allows neither; the smoke run uses host networking
  dockerd --iptables=false --bridge=none >/tmp/nfa-smoke-dockerd.log 2>&1 &
  for _ in $(seq 60); do /usr/bin/docker info >/dev/null 2>&1 && break; sleep 0.5; done
fi
exec "$PYTHON" deploy/smoke_image.py "$@"
