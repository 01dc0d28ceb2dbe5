"""The commands the image offers besides ``run`` and ``discover``, each run once inside the
native image by deploy/smoke_image.py: on the coral-usb fixture, against the in-repo API
server, and ``explain-image`` against a real registry (Debian's ``docker-registry``) holding
the smoke image itself, pushed there by ``skopeo``."""

from __future__ import annotations

import json
import os
from pathlib import Path

from deploy.smoke_docker import KUBECONFIG_IN_POD, check, container_cmd, sh
from deploy.smoke_flags import DockerRun
from tests.images.registries import RegistryProcess
from tests.support.apiserver import FakeApiServer

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "fixtures" / "sysfs" / "coral-usb"


def offline_commands(run: DockerRun, image: str) -> None:
    """plan, explain, validate and snapshot on the fixture, mounted read-only."""
    fixture = ["--mount", f"type=bind,source={FIXTURE},target=/fixture,readonly"]
    offline = {"plan": ["plan", "--host-root=/fixture", "--format=json"],
               "explain": ["explain", "--host-root=/fixture", "accelerators/edgetpu"],
               "validate": ["validate"],
               "snapshot": ["snapshot", "--host-root=/fixture", "--output=/tmp/snapshot.tar.gz"]}
    for what, args in offline.items():
        done = sh(*container_cmd(run, image, *args, extra=[*fixture, "--tmpfs", "/tmp:size=16m"]))
        check(done.returncode == 0, f"{what} runs in the image (exit {done.returncode}) {done.stderr.strip()[-200:]}")


def apply_and_clean(run: DockerRun, image: str, tmp: Path) -> None:
    """apply labels a Node from the fixture, clean takes it all off again."""
    fixture = ["--mount", f"type=bind,source={FIXTURE},target=/fixture,readonly"]
    with FakeApiServer() as server:
        server.add_node("smoke-apply")
        kubeconfig = server.kubeconfig(tmp / "kubeconfig-apply")
        os.chmod(kubeconfig, 0o644)
        mount = ["--mount", f"type=bind,source={kubeconfig},target={KUBECONFIG_IN_POD},readonly"]
        for what, host in (("apply", ["--host-root=/fixture"]), ("clean", [])):
            done = sh(*container_cmd(run, image, what, *host, "--node-name=smoke-apply",
                                     f"--kubeconfig={KUBECONFIG_IN_POD}", extra=[*fixture, *mount]))
            labels = server.node("smoke-apply")["metadata"].get("labels") or {}
            edgetpu = labels.get("accelerators/edgetpu")
            check(done.returncode == 0 and (edgetpu == "true") == (what == "apply"),
                  f"{what} in the image: exit {done.returncode}, accelerators/edgetpu={edgetpu} {done.stderr.strip()[-200:]}")


def explain_image(run: DockerRun, image: str, tmp: Path) -> None:
    """explain-image in the image names the platform of the image itself, read from a registry."""
    with RegistryProcess(tmp, "registry").running() as registry:
        target = f"{registry.host}/node-feature-agent:smoke"
        pushed = sh("skopeo", "copy", "-q", "--dest-tls-verify=false", f"docker-daemon:{image}", f"docker://{target}")
        if not check(pushed.returncode == 0, f"the image pushed to a real registry ({target})"):
            print(pushed.stderr[-1500:])
            return
        done = sh(*container_cmd(run, image, "explain-image", f"--insecure-registry={registry.host}", "--format=json",
                                 target))
        platforms = json.dumps(json.loads(done.stdout)) if done.returncode == 0 else ""
        arch = sh("docker", "image", "inspect", "-f", "{{.Os}}/{{.Architecture}}", image).stdout.strip()
        os_name, _, architecture = arch.partition("/")
        check(done.returncode == 0 and f'"{os_name}"' in platforms and f'"{architecture}"' in platforms,
              f"explain-image in the image finds {arch} for {target} (exit {done.returncode}) {done.stderr.strip()[-200:]}")
