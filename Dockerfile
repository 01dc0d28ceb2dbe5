# syntax=docker/dockerfile:1
# node-feature-agent image: one process per node, non-root, read-only root filesystem.
#
# Both stages start from Debian bookworm (debian:bookworm-slim) and use Debian's own python3
# (3.11), so the image runs the interpreter and C libraries Debian patches, and
# deploy/smoke-image.sh can build this very file on a base it makes with mmdebstrap from the same
# packages (deploy/install.md "The image").
#
# linux/amd64, linux/arm64 and linux/arm/v7 from this one file; nothing here names an
# architecture. pip takes each platform's wheels and compiles in the builder what has none
# (psutil, PyYAML and google-re2 on arm/v7; google-re2 against Debian's RE2, pyproject.toml):
#   docker buildx build --platform linux/amd64,linux/arm64,linux/arm/v7 -t REGISTRY/node-feature-agent:0.1.0 --push .
ARG BASE_IMAGE=debian:bookworm-slim

# ---- builder: a virtual environment with the agent and its dependencies -------------------
FROM ${BASE_IMAGE} AS builder
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Compilers and headers only for what has no wheel: google-re2 needs RE2, Abseil and pybind11.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc g++ libc6-dev binutils \
       libre2-dev libabsl-dev pybind11-dev \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PREFER_BINARY=1 PIP_NO_COMPILE=1
RUN python3 -m venv /opt/node-feature-agent
WORKDIR /src
# The dependencies first, from pyproject.toml alone, so that a change to agent/ reuses this
# layer; the pip cache mount keeps wheels compiled here for the next build (--use-pep517: a
# project without pyproject.toml, google-re2, is built as a wheel too, not installed by setup.py).
COPY pyproject.toml ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"], sep="\n")' \
       > requirements.txt \
    && /opt/node-feature-agent/bin/pip install --use-pep517 -r requirements.txt
COPY README.md ./
COPY agent/ ./agent/
# agent/labels links to ../labels: the wheel carries the catalogue (agent.config.packaged_catalogue)
COPY labels/ ./labels/
RUN --mount=type=cache,target=/root/.cache/pip \
    /opt/node-feature-agent/bin/pip install --no-deps .
# What the image never runs goes: pip and setuptools; the kubernetes client's asyncio copy
# (kubernetes/aio, 41 MB) with the packages only it imports, and its generated API classes and
# models (33 MB: the agent sends its few requests through ApiClient, agent/runtime/light_core.py,
# and reads JSON; the lazy packages stay, so a use of a removed class fails by its name);
# tests, C sources and type stubs of the dependencies; symbols of shared objects.
# Then every module is compiled once (the root filesystem is read-only in the pod).
# Debian packages whose libraries a compiled extension links (libre2 where google-re2 was
# built here) are listed in /opt/runtime-packages for the runtime stage.
RUN site=$(/opt/node-feature-agent/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))') \
    && /opt/node-feature-agent/bin/python -m pip uninstall -y -q aiohttp aiohttp-retry aiosignal aiohappyeyeballs \
       frozenlist multidict yarl propcache setuptools pip \
    && rm -rf "$site/kubernetes/aio" \
    && find "$site/kubernetes/client/api" "$site/kubernetes/client/models" -name '*.py' ! -name __init__.py -delete \
    && find /opt/node-feature-agent -depth -type d \( -name __pycache__ -o -name tests -o -name test \) -exec rm -rf {} + \
    && find /opt/node-feature-agent -type f \( -name '*.pyi' -o -name '*.pyx' -o -name '*.pxd' -o -name '*.c' \
       -o -name '*.cc' -o -name '*.h' \) -delete \
    && find /opt/node-feature-agent -type f -name '*.so*' -exec strip --strip-unneeded {} + \
    && python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash /opt/node-feature-agent/lib \
    && find /opt/node-feature-agent -type f -name '*.so*' -exec ldd {} + | awk '$3 ~ /^\// {print $3}' | sort -u \
       | xargs -r -n1 basename | sed 's|^|*/|' | xargs -r dpkg -S | cut -d: -f1 | sort -u > /opt/runtime-packages

# ---- runtime: Debian's python3, the libraries the extensions link, the environment --------
FROM ${BASE_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="node-feature-agent" \
      org.opencontainers.image.description="Per-node hardware discovery and generalized labels, extended resources and taints for Kubernetes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/node-feature-agent/node-feature-agent" \
      org.opencontainers.image.documentation="https://github.com/node-feature-agent/node-feature-agent/blob/main/deploy/README.md" \
      org.opencontainers.image.base.name="debian:bookworm-slim"
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# libudev1 is what pyudev loads (ctypes). No pip, no compilers, no apt lists or caches.
# hadolint ignore=DL3008,SC2046
RUN --mount=type=bind,from=builder,source=/opt/runtime-packages,target=/tmp/runtime-packages \
    apt-get update \
    && apt-get install -y --no-install-recommends python3-minimal libpython3.11-stdlib libudev1 \
       $(cat /tmp/runtime-packages) \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/lib/dpkg/*-old /var/log/*
COPY --from=builder /opt/node-feature-agent /opt/node-feature-agent
COPY labels/ /etc/node-feature-agent/labels/
ENV PATH=/opt/node-feature-agent/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    NODE_FEATURE_AGENT_RULES=/etc/node-feature-agent/labels
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["node-feature-agent"]
CMD ["run"]
