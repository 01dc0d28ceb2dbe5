"""At most one Event per pass (each Event is a write the API server pays for): what a pass has to say is aggregated into one
core/v1 Event, posted through the real client to the in-repo API server (which validates
Events as the real one does: reason, type, involvedObject)."""

from __future__ import annotations

import pytest

from agent.reconcile import NodeApi
from agent.reconcile import events as ev
from agent.reconcile.events import EventRecorder, aggregate, event_body
from tests.support.apiserver import FakeApiServer

NODE = "edge-1"


@pytest.fixture
def server():
    with FakeApiServer() as srv:
        srv.add_node(NODE)
        yield srv


def recorder(server) -> EventRecorder:
    return EventRecorder(NodeApi.from_configuration(server.client_configuration()), NODE)


def posts(server) -> int:
    return sum(1 for r in server.requests if r.method == "POST" and r.path.endswith("/events"))


def test_a_pass_with_two_writes_posts_one_event_naming_both(server):
    rec = recorder(server)
    with rec.deferred():
        rec.record("uid-1", ev.REASON_LABELS, "add label accelerators/edgetpu=true")
        rec.record("uid-1", ev.REASON_RESOURCES, "add extended resource node-feature-agent.io/edgetpu=1")
        assert posts(server) == 0  # held until the pass's writes are done
    assert posts(server) == 1
    (event,) = server.events()
    assert event["reason"] == ev.REASON_LABELS and event["type"] == "Normal"
    assert event["message"] == ("NodeFeaturesUpdated: add label accelerators/edgetpu=true | "
                                "ExtendedResourcesUpdated: add extended resource node-feature-agent.io/edgetpu=1")
    assert event["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "uid-1"}


def test_a_warning_leads_the_aggregate_and_makes_it_a_warning(server):
    rec = recorder(server)
    with rec.deferred():
        rec.record("uid-1", ev.REASON_LABELS, "add label a/b=true")
        with rec.deferred():  # nested blocks (the Reconciler's inside the run loop's) join the outer one
            rec.record("uid-1", ev.REASON_CLASH, "label x/y: kept foreign value", warning=True)
        rec.record("uid-1", "DiscoverySourceFailed", "source usb failed as a whole", warning=True)
    (event,) = server.events()
    assert event["type"] == "Warning" and event["reason"] == ev.REASON_CLASH
    assert event["message"].split(" | ") == ["ForeignValueKept: label x/y: kept foreign value",
                                             "DiscoverySourceFailed: source usb failed as a whole",
                                             "NodeFeaturesUpdated: add label a/b=true"]


def test_a_single_event_is_posted_unchanged_and_release_sends_early(server):
    rec = recorder(server)
    with rec.deferred():
        rec.record("uid-1", ev.REASON_RESOURCES, "remove extended resource x.io/y")
        rec.release()
        assert posts(server) == 1
        rec.record("uid-1", ev.REASON_LABELS, "remove label a/b")
    assert [(e["reason"], e["message"]) for e in server.events()] == [
        (ev.REASON_RESOURCES, "remove extended resource x.io/y"), (ev.REASON_LABELS, "remove label a/b")]


def test_long_parts_share_the_message_limit_and_each_stays_visible():
    import datetime as dt

    now = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
    short = event_body(NODE, "u", ev.REASON_RESOURCES, "add extended resource x.io/y=1", "Normal", now)
    long1 = event_body(NODE, "u", ev.REASON_LABELS, "L" * 1000, "Normal", now)
    long2 = event_body(NODE, "u", ev.REASON_CLASH, "W" * 1000, "Warning", now)
    body = aggregate([long1, short, long2])
    parts = body["message"].split(" | ")
    assert len(body["message"]) <= ev.MAX_MESSAGE and len(parts) == 3
    assert parts[0].startswith("ForeignValueKept: WWW") and parts[0].endswith("...")
    assert parts[1].startswith("NodeFeaturesUpdated: LLL") and parts[1].endswith("...")
    assert parts[2] == "ExtendedResourcesUpdated: add extended resource x.io/y=1"  # short: kept whole
    assert abs(len(parts[0]) - len(parts[1])) <= 1  # the long ones split the rest evenly


def test_the_warnings_of_an_aggregate_that_fails_to_post_are_kept_for_later(server):
    rec = recorder(server)
    server.faults.throttle(retry_after=1, count=1, verb="POST", path="/events")
    with rec.deferred():
        rec.record("uid-1", ev.REASON_LABELS, "add label a/b=true")
        rec.record("uid-1", ev.REASON_REJECTED, "label c/d rejected", warning=True)
    assert not server.events() and [b["reason"] for b in rec.backlog] == [ev.REASON_REJECTED]  # Normal: logged only
    assert rec.flush("uid-1") == 1
    (event,) = server.events()
    assert (event["reason"], event["message"]) == (ev.REASON_REJECTED, "label c/d rejected")


def test_warnings_kept_through_an_outage_go_out_in_the_next_passs_one_event(server):
    """After an outage, the Warnings kept from failed posts are not re-posted
    one by one: the next successful pass carries them in its one Event, oldest timestamp first."""
    import datetime as dt

    clock = iter(dt.datetime(2026, 11, 24, 19, 0, s, tzinfo=dt.UTC) for s in range(60))
    rec = EventRecorder(NodeApi.from_configuration(server.client_configuration()), NODE, now=lambda: next(clock))
    server.faults.fail(503, count=3, verb="POST", path="/events")
    for n in range(3):  # three passes during the outage, each with a Warning
        with rec.deferred():
            rec.record("uid-1", ev.REASON_CLASH, f"label x/{n}: kept foreign value", warning=True)
    assert len(rec.backlog) == 3 and not server.events()
    with rec.deferred():  # the first pass after it: its own change plus the three Warnings
        rec.record("uid-1", ev.REASON_LABELS, "add label a/b=true")
        assert rec.flush("uid-1") == 3 and posts(server) == 3  # 3 refused, nothing new yet
    assert posts(server) == 4 and not rec.backlog
    (event,) = server.events()
    assert event["type"] == "Warning" and event["reason"] == ev.REASON_CLASH
    assert event["message"].split(" | ") == [f"ForeignValueKept: label x/{n}: kept foreign value" for n in range(3)] + [
        "NodeFeaturesUpdated: add label a/b=true"]
    stamps = [dt.datetime.fromisoformat(event[k].replace("Z", "+00:00")) for k in ("firstTimestamp", "lastTimestamp")]
    assert [t.second for t in stamps] == [0, 3]  # the oldest Warning's time, the pass's time


def test_a_flush_outside_a_pass_is_one_event_and_a_failed_one_keeps_everything(server):
    rec = recorder(server)
    server.faults.fail(503, count=3, verb="POST", path="/events")
    for n in range(2):
        rec.record("uid-1", ev.REASON_REJECTED, f"label c/{n} rejected", warning=True)
    assert rec.flush() == 0 and len(rec.backlog) == 2  # the third 503
    assert rec.flush() == 2 and not rec.backlog
    (event,) = server.events()
    assert event["message"] == "ChangeRejected: label c/0 rejected | ChangeRejected: label c/1 rejected"


def test_warnings_from_another_thread_wait_for_the_next_pass(server):
    """A rejected rules edit is judged in the watcher thread: it is held for the next pass
    (the caller queues one) and shares that pass's one Event; in the worker's own pass it
    joins that pass directly."""
    import threading

    rec = recorder(server)
    queued = []
    watcher = threading.Thread(target=lambda: queued.extend(
        rec.hold_for_next_pass("uid-1", "RulesInvalid", f"rules/zz-{n}.yaml: bad YAML", warning=True) for n in (1, 2)))
    watcher.start()
    watcher.join()
    assert queued == [True, True] and posts(server) == 0
    with rec.deferred():
        rec.record("uid-1", ev.REASON_LABELS, "add label a/b=true")
        assert rec.hold_for_next_pass("uid-1", "RulesInvalid", "rules/zz-3.yaml: bad YAML", warning=True) is False
    assert posts(server) == 1
    (event,) = server.events()
    assert event["reason"] == "RulesInvalid" and event["message"].split(" | ") == [
        "RulesInvalid: rules/zz-1.yaml: bad YAML", "RulesInvalid: rules/zz-2.yaml: bad YAML",
        "RulesInvalid: rules/zz-3.yaml: bad YAML", "NodeFeaturesUpdated: add label a/b=true"]
    with rec.deferred():
        pass
    assert posts(server) == 1  # nothing held: no Event
