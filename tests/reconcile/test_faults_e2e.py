"""Each API fault is survived: the reconciler returns an outcome (never raises), backs off with
the injected sleep, and converges once the fault clears. Counts come from the server's log."""

from __future__ import annotations

import pytest

from agent.desired import DesiredNodeState, Taint
from agent.reconcile import NodeApi, Reconciler
from tests.reconcile.test_reconciler_e2e import NODE, WANT, Sleeps, node_writes, plan_of

# a plain import: a broken API server module must fail these tests, never skip them
from tests.support.apiserver import FakeApiServer


# -- the server's fault switches, in one place ------------------------------------------------
def fail_next(server, status: int, count: int, retry_after: int | None = None) -> None:
    server.faults.fail(status, count=count, retry_after=retry_after)


def throttle_next(server, count: int, retry_after: int) -> None:
    server.faults.throttle(retry_after=retry_after, count=count)


def refuse_next(server, count: int) -> None:
    server.faults.refuse_connections(count=count)


def slow_next(server, seconds: float, count: int) -> None:
    server.faults.slow(seconds, count=count)


@pytest.fixture
def server():
    with FakeApiServer() as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE}, capacity={"cpu": "4", "pods": "110"})
        yield srv


def make(server, sleeps, request_timeout=(2.0, 5.0), **kw) -> Reconciler:
    api = NodeApi.from_configuration(server.client_configuration(), request_timeout=request_timeout)
    return Reconciler(api, NODE, sleep=sleeps, random=lambda: 0.0, emit_events=False, **kw)


def converged(server) -> bool:
    node = server.get_node(NODE)
    return (node["metadata"]["labels"].get("accelerators/edgetpu") == "true"
            and node["status"]["capacity"].get("google.com/edgetpu") == "2")


def test_server_error_burst_is_retried_with_exponential_backoff():
    sleeps = Sleeps()
    with FakeApiServer() as server:
        server.add_node(NODE, labels={}, capacity={"cpu": "4"})
        fail_next(server, 503, count=3)
        outcome = make(server, sleeps).reconcile(plan_of(WANT))
        assert outcome.ok and converged(server)
        assert sleeps.delays == [0.5, 1.0, 2.0]  # random=0: the base delays (agent.kube.backoff)
        assert outcome.writes == 2 == len(node_writes(server))


def test_429_retry_after_is_honoured(server):
    sleeps = Sleeps()
    throttle_next(server, count=2, retry_after=3)
    outcome = make(server, sleeps).reconcile(plan_of(WANT))
    assert outcome.ok and converged(server)
    assert sleeps.delays == [3.0, 3.0]


def test_refused_connections_then_recovery(server):
    sleeps = Sleeps()
    refuse_next(server, count=2)
    outcome = make(server, sleeps).reconcile(plan_of(WANT))
    assert outcome.ok and converged(server) and len(sleeps.delays) == 2


def test_slow_responses_time_out_and_are_retried(server):
    sleeps = Sleeps()
    slow_next(server, 1.5, count=1)
    outcome = make(server, sleeps, request_timeout=(1.0, 0.3)).reconcile(plan_of(WANT))
    assert outcome.ok and converged(server) and len(sleeps.delays) == 1


def test_outage_longer_than_the_retries_gives_an_outcome_then_converges(server):
    sleeps = Sleeps()
    rec = make(server, sleeps, max_attempts=3)
    fail_next(server, 500, count=3)
    down = rec.reconcile(plan_of(WANT))
    assert not down.ok and "unreachable or failing" in down.error and down.writes == 0
    assert down.retry_after and down.retry_after > 0
    up = rec.reconcile(plan_of(WANT))
    assert up.ok and converged(server)


def test_forbidden_is_reported_once_without_a_hot_loop(server):
    sleeps = Sleeps()
    server.reset_requests()
    fail_next(server, 403, count=1)
    outcome = make(server, sleeps).reconcile(plan_of(WANT))
    assert not outcome.ok and "forbidden" in outcome.error and "ClusterRole" in outcome.error
    assert len(server.requests) == 1 and sleeps.delays == []  # no retry inside the call
    assert outcome.retry_after >= 0.5


def test_one_item_rejected_with_422_is_skipped_and_the_rest_applied(server):
    sleeps = Sleeps()
    too_big = DesiredNodeState(labels={"accelerators/edgetpu": "true"},
                               annotations={"example.com/huge": "x" * 300_000, "example.com/small": "ok"},
                               taints=(Taint("example.com/edgetpu", "NoSchedule", "present"),))
    rec = make(server, sleeps)
    outcome = rec.reconcile(plan_of(too_big))
    assert outcome.ok, outcome.error
    node = server.get_node(NODE)
    assert node["metadata"]["labels"]["accelerators/edgetpu"] == "true"
    assert node["metadata"]["annotations"]["example.com/small"] == "ok"
    assert "example.com/huge" not in node["metadata"]["annotations"]
    assert [p.item for p in outcome.problems if p.origin == "api-server"] == ["annotation example.com/huge"]
    # the refused item is not retried every cycle while it stays the same
    server.reset_requests()
    assert rec.reconcile(plan_of(too_big)).writes == 0 and node_writes(server) == []
