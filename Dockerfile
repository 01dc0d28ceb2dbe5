# syntax=docker/dockerfile:1
# node-feature-agent image: one process per node, non-root, read-only root filesystem.
#
# Multi-arch (linux/amd64 + linux/arm64) from one Dockerfile: nothing here downloads an
# architecture-specific binary; pip picks the right wheels inside each platform's build.
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/node-feature-agent:0.1.0 --push .
ARG PYTHON_VERSION=3.12
# Where no registry is reachable, deploy/smoke-image.sh passes a base made locally from Debian
# packages (--build-arg BASE_IMAGE=...); real builds keep the official slim image.
ARG BASE_IMAGE=python:${PYTHON_VERSION}-slim

# ---- builder: the agent and all its dependencies as wheels --------------------------------
FROM ${BASE_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent/ ./agent/
# agent/labels links to ../labels: the wheel carries the catalogue (agent.config.packaged_catalogue)
COPY labels/ ./labels/
# What `run` needs at runtime: kubernetes, pyudev (+ libudev1 below), watchfiles, PyYAML,
# prometheus-client, psutil, py-cpuinfo, jsonpatch, google-re2. Every compiled one (watchfiles, PyYAML, google-re2,
# psutil, and kubernetes' aiohttp/pydantic-core/...) publishes manylinux wheels for x86_64
# and aarch64; --prefer-binary keeps the compiler-free slim builder on them.
RUN pip wheel --prefer-binary --wheel-dir /wheels .

# ---- runtime: only the interpreter, libudev (for pyudev) and the wheels -------------------
FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="node-feature-agent" \
      org.opencontainers.image.description="Per-node hardware discovery and generalized labels, extended resources and taints for Kubernetes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/node-feature-agent/node-feature-agent" \
      org.opencontainers.image.documentation="https://github.com/node-feature-agent/node-feature-agent/blob/main/deploy/README.md"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    NODE_FEATURE_AGENT_RULES=/etc/node-feature-agent/labels
# libudev1 is what pyudev loads (ctypes); Debian security updates track the slim base tag.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libudev1 \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels /wheels/node_feature_agent-*.whl
COPY labels/ /etc/node-feature-agent/labels/
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["node-feature-agent"]
CMD ["run"]
