"""Running things for deploy/smoke_image.py: commands, containers, and the PASS/FAIL record."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path

from deploy.smoke_build import DOCKER
from deploy.smoke_flags import DockerRun

KUBECONFIG_IN_POD = "/var/run/node-feature-agent/kubeconfig"
RESULTS: list[tuple[bool, str]] = []


def check(ok: bool, what: str) -> bool:
    RESULTS.append((ok, what))
    print(f"{'PASS' if ok else 'FAIL'}  {what}", flush=True)
    return ok


def sh(*cmd: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, text=True, capture_output=True, cwd=cwd, check=False)


def container_cmd(run: DockerRun, image: str, *args: str, name: str | None = None, detach: bool = False,
                  extra: tuple[str, ...] | list[str] = ()) -> list[str]:
    cmd = [DOCKER, "run"] + (["-d"] if detach else ["--rm"]) + (["--name", name] if name else [])
    return cmd + list(run.flags) + list(extra) + [image, *args]


def started_at(name: str) -> float:
    """The container's start (docker's State.StartedAt) as a wall-clock time."""
    text = sh(DOCKER, "inspect", "-f", "{{.State.StartedAt}}", name).stdout.strip()
    whole, _, fraction = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(whole + "+00:00").timestamp() + float(f"0.{fraction or 0}")


def cpu_seconds(name: str) -> float | None:
    """CPU time the container has used so far (its cgroup's accounting, v1 or v2), or None."""
    ident = sh(DOCKER, "inspect", "-f", "{{.Id}}", name).stdout.strip()
    for path in (f"/sys/fs/cgroup/cpuacct/docker/{ident}/cpuacct.usage", f"/sys/fs/cgroup/docker/{ident}/cpu.stat",
                 f"/sys/fs/cgroup/system.slice/docker-{ident}.scope/cpu.stat"):
        try:
            text = Path(path).read_text()
        except OSError:
            continue
        if path.endswith("cpuacct.usage"):
            return int(text) / 1e9
        usage = [line.split()[1] for line in text.splitlines() if line.startswith("usage_usec ")]
        return int(usage[0]) / 1e6 if usage else None
    return None
