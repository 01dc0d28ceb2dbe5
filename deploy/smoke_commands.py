"""The commands the image offers besides ``run`` and ``discover``, each run once inside the
native image by deploy/smoke_image.py: on the coral-usb fixture, against the in-repo API
server, and ``explain-image`` against a real registry (Debian's ``docker-registry``) holding
the smoke image itself, pushed there by ``skopeo``; ``placement`` in the image then releases
a gated pod naming that image, as the Deployment in deploy/placement.yaml would (its user,
a read-only root)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from deploy.smoke_docker import DOCKER, KUBECONFIG_IN_POD, check, container_cmd, sh
from deploy.smoke_flags import DockerRun
from tests.images.registries import RegistryProcess
from tests.placement.harness import gated_pod, terms_of
from tests.runtime.helpers import wait_for
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
        placement(image, registry.host, target, architecture, tmp)


def placement(image: str, registry_host: str, target: str, architecture: str, tmp: Path) -> None:
    """The controller in the image ungates a pod naming ``target`` with a node affinity on its
    architecture; the container then stops on SIGTERM."""
    with FakeApiServer() as server:
        server.add_namespace("apps")
        kubeconfig = server.kubeconfig(tmp / "kubeconfig-placement")
        os.chmod(kubeconfig, 0o644)
        gated_pod(server, "apps", "smoke", [target])
        name = "nfa-smoke-placement"
        started = sh(DOCKER, "run", "-d", "--name", name, "--network", "host", "--read-only", "--user", "10001",
                     "--mount", f"type=bind,source={kubeconfig},target={KUBECONFIG_IN_POD},readonly", image,
                     "placement", f"--kubeconfig={KUBECONFIG_IN_POD}", f"--insecure-registry={registry_host}",
                     "--metrics-port=off")
        try:
            def released() -> bool:
                return not server.pod("apps", "smoke")["spec"].get("schedulingGates")
            try:
                wait_for(released, timeout=60, what="the gated pod released by placement in the image")
            except AssertionError:
                pass
            pod = server.pod("apps", "smoke")
            archs = {value for term in terms_of(pod) for req in term.get("matchExpressions") or []
                     if req.get("key") == "kubernetes.io/arch" for value in req.get("values") or []}
            check(started.returncode == 0 and released() and archs == {architecture},
                  f"placement in the image releases a pod naming {target} with affinity on {sorted(archs)}")
            stopped = sh(DOCKER, "stop", "-t", "10", name)
            code = sh(DOCKER, "inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
            check(stopped.returncode == 0 and code == "0", f"placement in the image exits 0 on SIGTERM (exit {code})")
            if not released():
                print(sh(DOCKER, "logs", name).stderr[-1500:])
        finally:
            sh(DOCKER, "rm", "-f", name)
