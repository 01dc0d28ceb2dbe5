"""Placement's two time promises, end to end against the in-repo API server through the real
client:

* every pod carrying our gate is released by its deadline whatever happens to its
  ``node-feature-agent.io/placement`` label: removed or set to ``disabled`` while gated (the
  label-selecting watch then sends DELETED with the previous object, as the API server's watch
  cache does: k8s.io/apiserver ``pkg/storage/cacher/cache_watcher.go``
  ``convertToWatchEvent``, kubernetes 04d6b4f1, modelled in ``tests/support/watch.py``), or
  changed while no controller ran;
* a registry (or an API read) that accepts and never answers cannot push a pod's decision past
  its bound: every request is cut to what is left of the retry window (or, for ``hold``, of
  the hard deadline).

Pods are kept gated without a registry answer by pointing their images at a socket that
accepts connections and never answers, in a namespace whose on-error choice is ``hold``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import CoreV1Api
from kubernetes.client.api_client import ApiClient

from agent.placement import podspec
from agent.placement.controller import created_at
from agent.placement.kube import PlacementApi
from agent.placement.policy import ON_ERROR_ANNOTATION, Bounds
from tests.placement.harness import InProcess, events_for, gated_pod, terms_of, ungated, wait_event
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

pytestmark = pytest.mark.slow
HOLD = Bounds(retry_window=1.0, deadline=600.0, first_retry=0.2, max_retry=0.5)


@pytest.fixture
def server() -> Iterator[FakeApiServer]:
    with FakeApiServer() as api:
        api.add_namespace("apps")
        api.add_namespace("held", annotations={ON_ERROR_ANNOTATION: "hold"})
        yield api


@pytest.fixture
def silent() -> Iterator[str]:
    """A registry host that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


def client(server: FakeApiServer) -> PlacementApi:
    return PlacementApi(ApiClient(server.client_configuration()))


def relabel(server: FakeApiServer, namespace: str, name: str, value: str | None) -> dict[str, Any]:
    """Set (or, with None, remove) the pod's placement label as a user would: a merge PATCH."""
    return client(server).patch_pod(namespace, name, {"metadata": {"labels": {podspec.SELECTOR_LABEL: value}}})


def outcome(running: InProcess, name: str) -> float | None:
    value: float | None = running.metrics.registry.get_sample_value("nfa_placement_pods_total", {"outcome": name})
    return value


def held_gated(server: FakeApiServer, running: InProcess, name: str) -> None:
    """Wait until the controller holds ``name`` (its registry never answers)."""
    wait_event(server, name, "ArchInspectionFailed")
    assert server.pod("held", name)["spec"]["schedulingGates"] == [{"name": podspec.GATE}]


@pytest.mark.parametrize(("value", "event_type"), [(None, "Warning"), (podspec.OPTED_OUT, "Normal"),
                                                    ("later", "Warning")])
def test_a_gated_pod_whose_label_changes_is_released_without_affinity(
        server: FakeApiServer, silent: str, value: str | None, event_type: str) -> None:
    gated_pod(server, "held", "p", [f"{silent}/test/pair:1"])
    with InProcess(server, silent, HOLD, request_timeout=0.5, total_timeout=1.0) as running:
        held_gated(server, running, "p")
        relabel(server, "held", "p", value)
        pod = ungated(server, "held", "p")
        _reason, kind, message = wait_event(server, "p", "ArchPlacementSkipped")
        assert outcome(running, "skipped") == 1
        wait_for(lambda: not running.controller._strays, what="the pod forgotten once released")
    assert kind == event_type and "without architecture affinity" in message
    assert terms_of(pod) == [] and pod["metadata"].get("labels", {}).get(podspec.SELECTOR_LABEL) == value
    patches = [r for r in server.requests if r.method == "PATCH" and r.path.endswith("/pods/p")]
    assert [r.status for r in patches] == [200, 200]  # the user's relabel, then our ungate


def test_a_gated_pod_deleted_costs_one_read_and_no_write(server: FakeApiServer, silent: str) -> None:
    gated_pod(server, "held", "gone", [f"{silent}/test/pair:1"])
    with InProcess(server, silent, HOLD, request_timeout=0.5, total_timeout=1.0) as running:
        held_gated(server, running, "gone")
        CoreV1Api(ApiClient(server.client_configuration())).delete_namespaced_pod("gone", "held")
        wait_for(lambda: [r.status for r in server.requests if r.method == "GET" and r.path.endswith("/pods/gone")]
                 == [404], what="the deleted pod read once")
        wait_for(lambda: not running.controller._strays, what="the deleted pod forgotten")
    assert [r for r in server.requests if r.method == "PATCH" and r.path.endswith("/pods/gone")] == []
    assert [e[0] for e in events_for(server, "gone")] == ["ArchInspectionFailed"]


def test_a_label_changed_while_no_controller_ran_is_found_by_the_sweep(server: FakeApiServer, silent: str) -> None:
    """The watch never shows this pod: the Pending sweep at leadership does."""
    gated_pod(server, "held", "quiet", [f"{silent}/test/pair:1"])
    relabel(server, "held", "quiet", podspec.OPTED_OUT)
    with InProcess(server, silent, HOLD, request_timeout=0.5, total_timeout=1.0) as running:
        pod = ungated(server, "held", "quiet")
        _reason, kind, _message = wait_event(server, "quiet", "ArchPlacementSkipped")
        assert running.controller.sweeps >= 1
    assert kind == "Normal" and terms_of(pod) == []
    sweeps = [r for r in server.requests if r.method == "GET" and r.path == "/api/v1/pods"
              and r.query.get("fieldSelector") == "status.phase=Pending"]
    assert sweeps and all(r.status == 200 and r.query.get("limit") == "500" for r in sweeps)


class RecordingResolver:
    """The real resolver, with the deadline each call was given written down."""

    def __init__(self, real: Any) -> None:
        self.real, self.deadlines = real, []

    def resolve(self, reference: str, credentials: Any = None, *, pull_always: bool = False,
                deadline: float | None = None) -> Any:
        self.deadlines.append(deadline)
        bound = {} if deadline is None else {"deadline": deadline}
        return self.real.resolve(reference, credentials, pull_always=pull_always, **bound)


def test_a_hanging_registry_is_cut_at_the_retry_window(server: FakeApiServer, silent: str) -> None:
    """Window 1.5 s, request timeout 10 s: the one request is cut at the window's end and the
    pod is released then. Uncut, the resolver's two 10 s requests would have run first (the
    decision 20 s after the first attempt)."""
    gated_pod(server, "apps", "slow", [f"{silent}/test/pair:1"])
    running = InProcess(server, silent, Bounds(retry_window=1.5, deadline=600.0, first_retry=0.2, max_retry=0.5),
                        request_timeout=10.0, total_timeout=20.0)
    spy = running.controller.resolver = RecordingResolver(running.resolver)
    with running:
        wait_for(lambda: running.controller._states.get("apps/slow"), what="first attempt")
        first = running.controller._states["apps/slow"].first_attempt
        pod = ungated(server, "apps", "slow")
        _reason, kind, message = wait_event(server, "slow", "ArchInspectionFailed")
    assert running.resolver.counters().requests == {(silent, "error"): 1}
    assert spy.deadlines == [pytest.approx(first + 1.5, abs=1e-3)]  # the window's end, on the same clock
    assert outcome(running, "inspection_failed") == 1 and terms_of(pod) == []
    assert kind == "Warning" and "timed out" in message


def test_hold_against_a_hanging_registry_is_cut_at_the_hard_deadline(server: FakeApiServer, silent: str) -> None:
    gated_pod(server, "held", "h", [f"{silent}/test/pair:1"])
    running = InProcess(server, silent, Bounds(retry_window=1.0, deadline=4.0, first_retry=0.2, max_retry=0.5),
                        request_timeout=10.0, total_timeout=20.0)
    spy = running.controller.resolver = RecordingResolver(running.resolver)
    with running:
        pod = ungated(server, "held", "h")
        _reason, kind, _message = wait_event(server, "h", "ArchGateTimedOut")
    created = created_at(pod)
    assert created is not None
    assert running.resolver.counters().requests == {(silent, "error"): 1}
    assert len(spy.deadlines) == 1 and spy.deadlines[0] == pytest.approx(running.controller._mono(created + 4.0), abs=0.05)
    assert kind == "Warning" and terms_of(pod) == []


def test_a_namespace_read_that_hangs_is_cut_at_the_retry_window(server: FakeApiServer, silent: str) -> None:
    """The namespace GET is held 10 s by the API server: the pod's decision is written before
    that answer (ordering, not timing: the server records a request when it answers it)."""
    gated_pod(server, "apps", "ns", [f"{silent}/test/pair:1"])
    server.faults.slow(10.0, count=1, verb="GET", path="/api/v1/namespaces/apps")
    with InProcess(server, silent, Bounds(retry_window=1.5, deadline=600.0, first_retry=0.2, max_retry=0.5),
                   request_timeout=10.0, total_timeout=20.0):
        ungated(server, "apps", "ns")
        seen = [(r.method, r.path) for r in server.requests]
    ours = [i for i, (m, p) in enumerate(seen) if m == "PATCH" and p.endswith("/pods/ns")]
    assert ours and ("GET", "/api/v1/namespaces/apps") not in seen[:ours[0]]

