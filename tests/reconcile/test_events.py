"""At most one Event per pass (issue 13 item 5): what a pass has to say is aggregated into one
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

    now = dt.datetime(2026, 11, 24, tzinfo=dt.timezone.utc)
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


def test_an_aggregate_with_a_warning_that_fails_to_post_is_kept_for_later(server):
    rec = recorder(server)
    server.faults.throttle(retry_after=1, count=1, verb="POST", path="/events")
    with rec.deferred():
        rec.record("uid-1", ev.REASON_LABELS, "add label a/b=true")
        rec.record("uid-1", ev.REASON_REJECTED, "label c/d rejected", warning=True)
    assert not server.events() and len(rec.backlog) == 1
    assert rec.flush("uid-1") == 1
    (event,) = server.events()
    assert event["reason"] == ev.REASON_REJECTED and "NodeFeaturesUpdated: add label a/b=true" in event["message"]
