"""What the placement tests run against: the in-repo API server, a real registry (Debian's
``docker-registry``, filled by skopeo from OCI layouts written by ``tests/images/layouts``),
admission as the MutatingAdmissionPolicy does it, and the controller in-process or as the
``node-feature-agent placement`` command.

Images pushed (``<host>/test/<name>:1``), from the issue-26 fixture layout plus three
single-platform ones made with the same writer:

``multi``    linux/amd64, linux/arm64, linux/arm/v7, windows/amd64 and an attestation
``pair``     linux/amd64, linux/arm64
``single``   linux/arm/v7 (platform only in the config blob)
``amd64``, ``arm64``, ``windows``   one platform each
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.client.api_client import ApiClient

from agent.images import Resolver, ResolverConfig
from agent.placement.controller import Controller, ControllerConfig
from agent.placement.kube import PlacementApi
from agent.placement.metrics import PlacementMetrics
from agent.placement.policy import Bounds
from tests.conftest import REPO
from tests.images.layouts import AMD64, ARM64, OCI_INDEX, WINDOWS, Layout
from tests.images.registries import RegistryProcess, push
from tests.placement.admission_eval import Admission
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

IMAGES = ("multi", "pair", "single", "amd64", "arm64", "windows")
(POLICY,) = [d for d in yaml.safe_load_all((REPO / "deploy/placement-policy.yaml").read_text())
             if d["kind"] == "MutatingAdmissionPolicy"]
ADMISSION = Admission(POLICY)


def write_layout(root: Path, extra: dict[str, dict[str, Any]] | None = None) -> Layout:
    """The issue-26 fixture refs plus single-platform ``amd64``, ``arm64``, ``windows`` and
    ``extra`` (name -> descriptor made with the same layout's writer)."""
    layout = Layout(root)
    layout.write()
    for name, platform in (("amd64", AMD64), ("arm64", ARM64), ("windows", WINDOWS)):
        layout.refs[name] = {k: v for k, v in layout.entry(platform, name).items() if k != "platform"}
    layout.refs.update(extra or {})
    manifests = [{**d, "annotations": {"org.opencontainers.image.ref.name": ref}} for ref, d in layout.refs.items()]
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}))
    return layout


def start_registry(root: Path, names: Sequence[str] = IMAGES, extra: dict[str, dict[str, Any]] | None = None) -> RegistryProcess:
    layout = write_layout(root / "layout", extra)
    registry = RegistryProcess(root, "registry").start()
    for name in names:
        push(layout.root, name, f"{registry.host}/test/{name}:1")
    return registry


def gated_pod(server: FakeApiServer, namespace: str, name: str, images: Sequence[str], **spec: Any) -> dict[str, Any]:
    """Create a pod as a cluster with the placement policy would: through admission, then
    through the API server's pod registry."""
    containers = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
           "spec": {"containers": containers, **spec}}
    if ADMISSION.matches(pod, {"kubernetes.io/metadata.name": namespace}):
        pod = ADMISSION.mutate(pod)
    return server.create_pod(namespace, pod)


@dataclass
class InProcess:
    """The controller in this process (a fresh resolver each), on the given server."""

    server: FakeApiServer
    registry_host: str
    bounds: Bounds
    taint_mode: bool = False
    identity: str = "placement-test"
    request_timeout: float = 2.0
    total_timeout: float = 4.0

    def __post_init__(self) -> None:
        self.resolver = Resolver(ResolverConfig(insecure_registries=frozenset({self.registry_host}),
                                                request_timeout=self.request_timeout, total_timeout=self.total_timeout))
        self.metrics = PlacementMetrics(self.resolver.counters)
        api = PlacementApi(ApiClient(self.server.client_configuration()))
        config = ControllerConfig(identity=self.identity, workers=4, taint_mode=self.taint_mode, bounds=self.bounds,
                                  watchdog_interval=0.5, lookup_ttl=0.5)
        self.controller = Controller(api, self.resolver, config, self.metrics)

    def __enter__(self) -> InProcess:
        self.controller.start()
        self.controller.leadership(True)
        return self

    def __exit__(self, *_exc: object) -> None:
        self.controller.stop()


def ungated(server: FakeApiServer, namespace: str, name: str, gate: str = "node-feature-agent.io/arch",
            timeout: float = 60.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pod = server.pod(namespace, name)
        return None if any(g["name"] == gate for g in pod["spec"].get("schedulingGates") or []) else pod
    result: dict[str, Any] = wait_for(done, timeout=timeout, what=f"pod {namespace}/{name} ungated")
    return result


def events_for(server: FakeApiServer, name: str) -> list[tuple[str, str, str]]:
    return [(e["reason"], e["type"], e["message"]) for e in server.events()
            if (e.get("involvedObject") or {}).get("name") == name]


def wait_event(server: FakeApiServer, name: str, reason: str, timeout: float = 60.0) -> tuple[str, str, str]:
    found: tuple[str, str, str] = wait_for(lambda: next((e for e in events_for(server, name) if e[0] == reason), None),
                                           timeout=timeout, what=f"event {reason} on {name}")
    return found


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent", *args]


def start_command(kubeconfig: Path, registry_host: str, *args: str, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(command("--log-format", "json", "placement", "--kubeconfig", str(kubeconfig),
                                        "--insecure-registry", registry_host, "--metrics-port", "off", *args),
                                stdout=out, stderr=subprocess.STDOUT, cwd=REPO)


def node(name: str, arch: str, os: str = "linux", **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/os": os, "kubernetes.io/arch": arch, **labels}}}


def terms_of(pod: dict[str, Any]) -> list[dict[str, Any]]:
    required = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}
    return list(required.get("nodeSelectorTerms") or [])


def iter_lines(path: Path) -> Iterator[dict[str, Any]]:
    for line in path.read_text(errors="replace").splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            continue

