"""API server faults against the whole agent loop (in-process ``Agent``, real HTTP, real
watch). Each case: the fault, then convergence once it clears, the ledger clean (no foreign
item touched, no owned label flapped), the foreign parts of the Node exactly as seeded."""

from __future__ import annotations

import json
import time

from agent.kube.backoff import BackoffSettings
from tests.faults.harness import NODE, differences, foreign_view, seeded_foreign, stable
from tests.runtime.helpers import EDGETPU_LABEL, EDGETPU_RESOURCE, wait_for
from tests.support.apiserver import SecondWriter


def _errors(h) -> float:
    return h.metric('nfa_reconcile_total{result="error"}') or 0.0


def _vandalise_and_wait_restored(h, server, want) -> None:
    """Someone removes an owned label: proves the node watch is live again after a fault."""
    server.edit_node(NODE, lambda n: n["metadata"]["labels"].pop(next(iter(want.labels))) and None)
    h.wait_converged(want, what="owned label restored through the watch")


def test_api_down_at_start(server, ledger, make_harness):
    server.faults.refuse_connections(count=100_000)  # every connection closed unanswered
    h = make_harness().start(wait_ready=False)
    wait_for(lambda: _errors(h) >= 2, what="two failed reconciles while the API is down")
    assert not h.agent.ready.is_set() and h.agent.healthy()[0]
    assert server.writes(NODE) == []
    server.faults.clear()
    want = h.wait_converged(what="converged after the API came up")
    wait_for(h.agent.ready.is_set, what="ready")
    _vandalise_and_wait_restored(h, server, want)
    assert ledger.assert_clean(want.labels, want.extended_resources) >= 2
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_api_down_mid_run(server, ledger, make_harness):
    h = make_harness().start()
    before = h.wait_converged()
    errors = _errors(h)
    server.faults.refuse_connections(count=100_000)
    server.drop_watches(abrupt=True)  # the server went away: open streams die too
    h.unplug()
    wait_for(lambda: _errors(h) >= errors + 2, what="reconciles failing while the API is down")
    assert has_label(server, EDGETPU_LABEL)  # nothing was half-done while down
    server.faults.clear()
    after = h.wait_converged(what="unplug applied after the outage")
    assert EDGETPU_LABEL not in after.labels and EDGETPU_RESOURCE not in after.extended_resources
    _vandalise_and_wait_restored(h, server, after)
    ledger.assert_clean(*stable(before, after))
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_watch_dropped_cleanly_and_abruptly(server, ledger, make_harness):
    h = make_harness().start()
    want = h.wait_converged()
    watcher = h.agent.node_watcher
    for abrupt in (False, True):
        # the previous round's stream may still be winding down: drop only once a fresh one is open
        wait_for(lambda: any(w.drop is None for w in list(server.watches.open)), what="an open watch to drop")
        watches, lists = watcher.watches, watcher.lists
        assert server.drop_watches(abrupt=abrupt) >= 1
        # a change made while the agent is reconnecting is still seen: it continues from its version
        server.edit_node(NODE, lambda n: n["metadata"]["labels"].pop(EDGETPU_LABEL) and None)
        h.wait_converged(want, what=f"label restored after a {'n abrupt' if abrupt else ' clean'} drop")
        wait_for(lambda watches=watches: watcher.watches > watches, what="re-watch")
        assert watcher.lists == lists  # no relist needed
    ledger.assert_clean(want.labels, want.extended_resources)
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_410_gone_relists_and_catches_the_missed_change(server, ledger, make_harness):
    h = make_harness().start()
    want = h.wait_converged()
    watcher = h.agent.node_watcher
    lists = watcher.lists
    server.drop_watches(abrupt=True)
    def remove_the_tpu(n: dict) -> None:
        n["metadata"]["labels"].pop(EDGETPU_LABEL)
        n["status"]["capacity"].pop(EDGETPU_RESOURCE)

    server.edit_node(NODE, remove_the_tpu)
    server.expire_resource_versions()  # the version the agent would continue from is compacted
    h.wait_converged(want, what="missed change repaired after the relist")
    wait_for(lambda: watcher.lists > lists, what="relist after 410")
    ledger.assert_clean(want.labels)
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_409_storm_from_a_second_writer_every_50ms(server, ledger, make_harness):
    # Slow the agent's writes a little so its read is always stale by the time it writes:
    # every write carrying a resourceVersion precondition (taint edits) meets a 409.
    server.faults.slow(0.12, count=8, verb="PATCH")
    writer = server.second_writer(NODE, interval=0.05)
    with writer:
        wait_for(lambda: writer.edits >= 2, what="second writer running")
        h = make_harness().start()
        before = h.wait_converged(what="startup under the storm")
        h.unplug()
        middle = h.wait_converged(what="unplug under the storm")
        h.plug()
        after = h.wait_converged(what="plug under the storm")
    assert writer.errors == [] and writer.edits >= 10
    conflicts = [r for r in server.requests if r.method == "PATCH" and r.status == 409]
    assert conflicts, "the storm never produced a conflict: the test did not test anything"
    stay, resources = stable(before, middle)
    ledger.assert_clean(stay, resources)
    assert differences(server.node(NODE), after) == []
    # the other writer never lost its label (values only go up) or its taint
    seen_taint, last = False, 0
    for event in ledger.versions():
        labels = event.object["metadata"].get("labels") or {}
        taints = [t for t in event.object["spec"].get("taints") or [] if t["key"] == SecondWriter.TAINT]
        if SecondWriter.LABEL in labels:
            assert int(labels[SecondWriter.LABEL]) >= last, f"rv {event.rv}: second writer's label went back"
            last = int(labels[SecondWriter.LABEL])
        elif last:
            raise AssertionError(f"rv {event.rv}: second writer's label lost")
        if seen_taint:
            assert taints, f"rv {event.rv}: second writer's taint lost"
        seen_taint = seen_taint or bool(taints)
    expected = seeded_foreign({SecondWriter.LABEL: writer.last_value})
    expected["taints"] = sorted(expected["taints"] + [(SecondWriter.TAINT, "NoSchedule", writer.last_value)])
    assert foreign_view(server.node(NODE)) == expected


def test_429_retry_after_is_waited_out(server, ledger, make_harness):
    h = make_harness().start()
    before = h.wait_converged()
    server.clear_requests()
    server.faults.throttle(retry_after=1, count=2, verb="PATCH")
    h.unplug()
    after = h.wait_converged(what="unplug applied after throttling")
    patches = [r for r in server.requests if r.method == "PATCH" and r.node == NODE]
    throttled = [i for i, r in enumerate(patches) if r.status == 429]
    assert len(throttled) == 2
    for i in throttled:
        assert patches[i].headers is not None and i + 1 < len(patches)
        waited = patches[i + 1].at - patches[i].at
        assert waited >= 1.0, f"retried {waited:.3f}s after a 429 with Retry-After: 1"
    ledger.assert_clean(*stable(before, after))
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_500_and_503_bursts_at_start_and_mid_run(server, ledger, make_harness):
    server.faults.fail(500, count=3)
    server.faults.fail(503, count=3)
    h = make_harness().start(wait_ready=False)
    before = h.wait_converged(what="converged after the startup burst")
    assert server.faults.pending() == 0
    server.faults.fail(503, count=3, verb="PATCH")
    server.faults.fail(500, count=3, verb="PATCH")
    h.unplug()
    after = h.wait_converged(what="unplug applied after a write burst")
    assert server.faults.pending() == 0
    codes = [r.status for r in server.requests if r.fault == "fail"]
    assert codes.count(500) == 6 and codes.count(503) == 6
    ledger.assert_clean(*stable(before, after))
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_5s_slow_responses_time_out_and_converge(server, ledger, make_harness):
    h = make_harness(request_timeout=(2.0, 3.0)).start()
    before = h.wait_converged()
    server.faults.slow(5, count=1, after=True, verb="PATCH")  # applied, answer 5 s late: client gives up at 3 s
    server.faults.slow(5, count=1, verb="PATCH")  # answered late, applied after the client gave up
    h.unplug()
    after = h.wait_converged(timeout=40, what="unplug applied through slow responses")
    assert [k for k, *_ in server.faults.injected].count("slow") == 2
    ledger.assert_clean(*stable(before, after))
    assert foreign_view(server.node(NODE)) == seeded_foreign()
    assert h.agent.healthy()[0]


def has_label(server, key: str) -> bool:
    return key in (server.node(NODE)["metadata"].get("labels") or {})


def _event_line(kind: str, obj: dict) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_a_junk_watch_stream_neither_spins_nor_is_taken_as_the_node(server, ledger, make_harness):
    """An auth proxy answering the Node watch with an HTML page, and a Pod under the Node's name
    (ADDED, then DELETED): with the shipped backoff (0.5 s doubling) the agent makes a handful of
    watch requests in two seconds (it made 77-544 a second), counts what it ignored, writes
    nothing (a Pod taken as the Node looked like a deleted and recreated Node: everything
    re-applied), and follows the Node again once the stream heals."""
    h = make_harness(backoff=BackoffSettings()).start()
    want = h.wait_converged()
    writes = len(server.writes(NODE))
    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": NODE, "uid": "pod-uid", "resourceVersion": "999999"}}
    body = b"<html><body>Please sign in</body></html>\n" + _event_line("ADDED", pod) + _event_line("DELETED", pod)
    server.faults.stream(body, count=100_000, path="/api/v1/nodes")
    wait_for(lambda: any(w.drop is None for w in list(server.watches.open)), what="an open watch to drop")
    server.drop_watches()
    wait_for(lambda: server.faults.injected, what="the first junk stream served")
    served = len(server.faults.injected)
    time.sleep(2.0)  # a window to count requests in; the assertion is on the count
    assert len(server.faults.injected) - served <= 5
    assert (h.metric('nfa_watch_ignored_total{reason="wrong-kind",watch="node watch"}') or 0) >= 2
    assert (h.metric('nfa_watch_ignored_total{reason="undecodable",watch="node watch"}') or 0) >= 1
    assert len(server.writes(NODE)) == writes and h.agent.healthy()[0]
    server.faults.clear()
    _vandalise_and_wait_restored(h, server, want)
    ledger.assert_clean(want.labels, want.extended_resources)
    assert foreign_view(server.node(NODE)) == seeded_foreign()
