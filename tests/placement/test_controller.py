"""The placement controller end to end: pods created through the in-repo API server (after
the admission policy), images on a real registry, the controller in-process. Where a pod may
then run is judged by the scheduler's own filters (``tests/support/scheduling``) on nodes
labelled as kubelet and our node agent label them."""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.placement import podspec
from agent.placement.nodeclasses import ARM32_LABEL
from agent.placement.policy import ON_ERROR_ANNOTATION, Bounds
from tests.images.registries import RegistryProcess
from tests.placement.harness import (
    InProcess,
    events_for,
    gated_pod,
    node,
    start_registry,
    terms_of,
    ungated,
    wait_event,
)
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer
from tests.support.scheduling import feasible_nodes

pytestmark = pytest.mark.slow
FAST = Bounds(retry_window=2.0, deadline=600.0, first_retry=0.2, max_retry=0.5)
NODES = [node("amd64", "amd64"), node("amd64-v3", "amd64", **{"feature.node.kubernetes.io/cpu-cpuid.X86_64_V3": "true"}),
         node("arm64", "arm64"), node("arm64-aarch32", "arm64", **{ARM32_LABEL: "v8"}),
         node("pi-zero", "arm", **{ARM32_LABEL: "v6"}), node("pi-3", "arm", **{ARM32_LABEL: "v7"}),
         node("win", "amd64", os="windows")]


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as api:
        api.add_namespace("apps")
        yield api


def sample(running: InProcess, name: str, **labels: str) -> float | None:
    value: float | None = running.metrics.registry.get_sample_value(name, labels)
    return value


def image(registry: RegistryProcess, name: str) -> str:
    return f"{registry.host}/test/{name}:1"


def test_a_gated_pod_is_resolved_and_released_with_the_right_affinity(server: FakeApiServer,
                                                                      registry: RegistryProcess) -> None:
    created = gated_pod(server, "apps", "web", [image(registry, "multi"), image(registry, "pair")],
                        initContainers=[{"name": "init", "image": image(registry, "pair")}])
    assert created["spec"]["schedulingGates"] == [{"name": podspec.GATE}]
    assert created["status"]["conditions"][0]["reason"] == "SchedulingGated"
    with InProcess(server, registry.host, FAST):
        pod = ungated(server, "apps", "web")
    assert feasible_nodes(pod, NODES) == ["amd64", "amd64-v3", "arm64", "arm64-aarch32"]
    assert podspec.SELECTOR_LABEL not in pod["metadata"].get("labels", {})
    digests = json.loads(pod["metadata"]["annotations"][podspec.DIGESTS_ANNOTATION])
    assert set(digests) == {image(registry, "multi"), image(registry, "pair")}
    ((reason, kind, message),) = events_for(server, "web")
    assert (reason, kind) == ("ArchResolved", "Normal")
    assert digests[image(registry, "pair")][:19] in message and "linux/arm64" in message


def test_archaware_s_three_image_intersection_bug_is_absent(server: FakeApiServer, registry: RegistryProcess) -> None:
    """pair ∩ amd64 ∩ arm64 is empty: the pod stays gated with NoCommonArch and the gauge says so
    (archaware-controller would have tolerated both architectures)."""
    gated_pod(server, "apps", "three", [image(registry, n) for n in ("pair", "amd64", "arm64")])
    with InProcess(server, registry.host, FAST) as running:
        _reason, kind, message = wait_event(server, "three", "NoCommonArch")
        wait_for(lambda: sample(running, "nfa_placement_no_common_arch_pods") == 1, what="no-common gauge")
        assert kind == "Warning" and "kept gated" in message
        assert server.pod("apps", "three")["spec"]["schedulingGates"] == [{"name": podspec.GATE}]
        assert sample(running, "nfa_placement_pods_total", outcome="no_common_arch") == 1


def test_arm_v7_only_images_land_only_on_nodes_that_run_arm_v7(server: FakeApiServer, registry: RegistryProcess) -> None:
    gated_pod(server, "apps", "armv7", [image(registry, "single")])
    with InProcess(server, registry.host, FAST):
        pod = ungated(server, "apps", "armv7")
    assert feasible_nodes(pod, NODES) == ["arm64-aarch32", "pi-3"]


def test_a_windows_only_image_never_lands_on_linux(server: FakeApiServer, registry: RegistryProcess) -> None:
    gated_pod(server, "apps", "win", [image(registry, "windows")])
    gated_pod(server, "apps", "mixed", [image(registry, "windows"), image(registry, "amd64")])
    with InProcess(server, registry.host, FAST):
        pod = ungated(server, "apps", "win")
        wait_event(server, "mixed", "NoCommonArch")
    assert feasible_nodes(pod, NODES) == ["win"]


def test_the_pod_s_own_choice_is_kept_and_a_conflict_is_said(server: FakeApiServer, registry: RegistryProcess,
                                                             caplog: pytest.LogCaptureFixture) -> None:
    """Admission leaves such pods alone; one gated some other way is ungated untouched. Each
    Event is logged at its own level: the Warning at WARNING, the Normal at INFO."""
    caplog.set_level(logging.INFO, logger="agent.placement")
    for name, arch in (("pinned", "arm64"), ("wrong", "s390x")):
        server.create_pod("apps", {"metadata": {"name": name, "labels": {podspec.SELECTOR_LABEL: podspec.GATED}},
                                   "spec": {"containers": [{"name": "c", "image": image(registry, "pair")}],
                                            "nodeSelector": {"kubernetes.io/arch": arch},
                                            "schedulingGates": [{"name": podspec.GATE}]}})
    with InProcess(server, registry.host, FAST):
        pinned, wrong = ungated(server, "apps", "pinned"), ungated(server, "apps", "wrong")
        wait_event(server, "wrong", "ArchConflict")
    assert terms_of(pinned) == [] and terms_of(wrong) == []
    assert [e[0] for e in events_for(server, "pinned")] == ["ArchResolved"]
    levels = {(r.getMessage().split(": ")[0], r.getMessage().split(": ")[1], r.levelno) for r in caplog.records
              if getattr(r, "event", "") in ("ArchConflict", "ArchResolved")}
    assert levels == {("pod apps/wrong", "ArchConflict", logging.WARNING), ("pod apps/pinned", "ArchResolved", logging.INFO)}


def test_taint_mode_tolerates_exactly_the_allowed_architectures(server: FakeApiServer, registry: RegistryProcess) -> None:
    tainted = [dict(n, spec={"taints": [{"key": podspec.TAINT_KEY, "value": n["metadata"]["labels"]["kubernetes.io/arch"],
                                         "effect": "NoSchedule"}]}) for n in NODES]
    gated_pod(server, "apps", "t", [image(registry, "pair")])
    with InProcess(server, registry.host, FAST, taint_mode=True):
        pod = ungated(server, "apps", "t")
    assert [t["value"] for t in pod["spec"]["tolerations"]] == ["amd64", "arm64"]
    assert feasible_nodes(pod, tainted) == ["amd64", "amd64-v3", "arm64", "arm64-aarch32"]


def test_a_second_look_before_the_watch_catches_up_sends_no_second_patch(
        server: FakeApiServer, registry: RegistryProcess) -> None:
    """A key queued twice (the LIST, the watch's ADDED, a new leader's sweep) is looked at again
    before the watch delivers our own write: the controller's cache must already show the pod
    released. Here no watch runs at all, so the second look always comes first."""
    gated_pod(server, "apps", "twice", [image(registry, "amd64")])
    placement = InProcess(server, registry.host, FAST)  # not started: no informer thread, no workers
    placement.controller.informer.list_once()
    placement.controller.process("apps/twice")
    placement.controller.process("apps/twice")
    patches = [r for r in server.requests if r.method == "PATCH" and r.path.endswith("/pods/twice")]
    assert [r.status for r in patches] == [200]
    assert not server.pod("apps", "twice")["spec"].get("schedulingGates")


def test_a_conflicting_write_is_decided_again_on_the_fresh_pod(server: FakeApiServer, registry: RegistryProcess) -> None:
    gated_pod(server, "apps", "busy", [image(registry, "amd64")])
    server.faults.fail(409, count=1, verb="PATCH", path="/pods/busy")
    with InProcess(server, registry.host, FAST):
        pod = ungated(server, "apps", "busy")
    patches = [r for r in server.requests if r.method == "PATCH" and r.path.endswith("/pods/busy")]
    assert [r.status for r in patches] == [409, 200]
    assert feasible_nodes(pod, NODES) == ["amd64", "amd64-v3"]


@pytest.fixture
def lone_registry(tmp_path: Path) -> Iterator[RegistryProcess]:
    process = start_registry(tmp_path, names=("pair",))
    try:
        yield process
    finally:
        process.stop()


def test_registry_stopped_mid_test_pods_are_ungated_within_the_bound(server: FakeApiServer,
                                                                    lone_registry: RegistryProcess) -> None:
    gated_pod(server, "apps", "before", [image(lone_registry, "pair")])
    with InProcess(server, lone_registry.host, FAST) as running:
        ungated(server, "apps", "before")
        lone_registry.stop()
        gated_pod(server, "apps", "after", [image(lone_registry, "amd64")])
        pod = ungated(server, "apps", "after")
        _reason, kind, message = wait_event(server, "after", "ArchInspectionFailed")
        assert sample(running, "nfa_placement_pods_total", outcome="inspection_failed") == 1
        assert sample(running, "nfa_placement_pods_total", outcome="timed_out") == 0  # the retry bound, not the deadline
    assert kind == "Warning" and "the registry's answer" in message and lone_registry.host in message
    assert terms_of(pod) == []


def test_on_error_hold_keeps_the_gate_until_the_deadline_and_fallback_picks_the_arch(
        server: FakeApiServer, lone_registry: RegistryProcess) -> None:
    server.add_namespace("held", annotations={ON_ERROR_ANNOTATION: "hold"})
    server.add_namespace("fallback", annotations={ON_ERROR_ANNOTATION: "fallback:arm64"})
    lone_registry.stop()
    gated_pod(server, "held", "h", [image(lone_registry, "pair")])
    gated_pod(server, "fallback", "f", [image(lone_registry, "pair")])
    with InProcess(server, lone_registry.host, Bounds(retry_window=1.0, deadline=15.0, first_retry=0.2, max_retry=0.5)) \
            as running:
        fallback = ungated(server, "fallback", "f")
        wait_event(server, "h", "ArchInspectionFailed")
        # four failed attempts take longer than the 1 s retry window: "ungate" would be done
        wait_for(lambda: running.controller._states["held/h"].attempts >= 4, what="four attempts")
        assert server.pod("held", "h")["spec"].get("schedulingGates") == [{"name": podspec.GATE}]
        held = ungated(server, "held", "h")
        wait_event(server, "h", "ArchGateTimedOut")
    assert feasible_nodes(fallback, NODES) == ["arm64", "arm64-aarch32"]
    assert terms_of(held) == []


def test_a_pod_gated_past_the_deadline_while_the_controller_was_down_is_released_at_start(
        server: FakeApiServer, registry: RegistryProcess) -> None:
    gated_pod(server, "apps", "old", [image(registry, "pair")])
    then = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=11)
    with server.store.lock:  # as if created 11 minutes ago (the store keeps creationTimestamp on updates)
        server.store.objects["pods"][("apps", "old")]["metadata"]["creationTimestamp"] = then.strftime("%Y-%m-%dT%H:%M:%SZ")
    with InProcess(server, registry.host, Bounds(deadline=600.0)):
        pod = ungated(server, "apps", "old")
        _reason, kind, message = wait_event(server, "old", "ArchGateTimedOut")
    assert kind == "Warning" and "600" in message and terms_of(pod) == []
