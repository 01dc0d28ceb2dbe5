"""The Node watch against the in-repo API server: what triggers, what does not, recovery."""

import json
import threading

import pytest

from agent.kube.backoff import BackoffSettings
from agent.runtime.node_watch import NodeWatcher, relevant
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

FAST = BackoffSettings(initial=0.01, maximum=0.05)


class Recorder:
    def __init__(self):
        self.nodes = []
        self.lock = threading.Lock()

    def __call__(self, node):
        with self.lock:
            self.nodes.append(node)

    def labels(self):
        with self.lock:
            return [n["metadata"].get("labels", {}) for n in self.nodes]


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.2) as srv:
        srv.add_node("n1", labels={"a": "1"})
        srv.add_node("other")
        yield srv


def start(server, recorder, **kw):
    watcher = NodeWatcher(server.core_api(), "n1", recorder, backoff=FAST, **kw).start()
    wait_for(lambda: recorder.nodes, what="initial list")
    wait_for(lambda: watcher.watches >= 1 and server.watches.count() >= 1, what="watch open")
    return watcher


def test_label_changes_trigger_heartbeats_and_other_nodes_do_not(server):
    rec = Recorder()
    watcher = start(server, rec)
    try:
        assert rec.labels() == [{"a": "1"}]
        # kubelet heartbeat: status conditions only
        server.edit_node("n1", lambda n: n["status"]["conditions"][0].update(lastHeartbeatTime="2030-01-01T00:00:00Z"))
        server.edit_node("other", lambda n: n["metadata"]["labels"].update(x="y"))
        server.edit_node("n1", lambda n: n["metadata"]["labels"].clear())
        wait_for(lambda: len(rec.nodes) >= 2, what="label removal")
        assert rec.labels() == [{"a": "1"}, {}]
        # capacity counts (someone removed an extended resource)
        server.edit_node("n1", lambda n: n["status"]["capacity"].update({"example.com/x": "1"}))
        wait_for(lambda: len(rec.nodes) >= 3, what="capacity change")
        assert watcher.fresh_node(60)["status"]["capacity"]["example.com/x"] == "1"
    finally:
        watcher.stop()
    assert not watcher.alive()
    assert len(rec.nodes) == 3


def test_continues_from_last_version_after_a_dropped_watch(server):
    rec = Recorder()
    watcher = start(server, rec)
    try:
        rv = watcher.resource_version
        server.drop_watches()
        wait_for(lambda: watcher.watches >= 2, what="re-watch")
        watches = [r for r in server.requests if r.query.get("watch") in ("true", "1")]
        assert watches[-1].query.get("resourceVersion")  # continued, not "most recent"
        assert watches[-1].query.get("allowWatchBookmarks") == "true"
        assert watches[-1].query.get("fieldSelector") == "metadata.name=n1"
        assert watches[-1].query.get("timeoutSeconds")
        assert watcher.lists == 1  # no relist needed
        server.edit_node("n1", lambda n: n["metadata"]["labels"].update(b="2"))
        wait_for(lambda: any("b" in labels for labels in rec.labels()), what="change after reconnect")
        assert rv != watcher.resource_version
    finally:
        watcher.stop()


def test_410_relists_and_reports_a_change_made_meanwhile(server):
    rec = Recorder()
    watcher = start(server, rec)
    try:
        watcher_lists = watcher.lists
        server.expire_resource_versions()
        wait_for(lambda: watcher.lists > watcher_lists, what="relist after 410")
        server.edit_node("n1", lambda n: n["metadata"]["labels"].update(c="3"))
        wait_for(lambda: any("c" in labels for labels in rec.labels()), what="change after relist")
    finally:
        watcher.stop()


def test_server_errors_back_off_and_recover(server):
    rec = Recorder()
    server.faults.fail(503, count=3, verb="GET", path="/api/v1/nodes")
    watcher = NodeWatcher(server.core_api(), "n1", rec, backoff=FAST).start()
    try:
        wait_for(lambda: rec.nodes, what="list after 3 failures")
        assert watcher.alive()
    finally:
        watcher.stop()


def test_deleted_and_recreated_node(server):
    rec = Recorder()
    deleted = threading.Event()
    watcher = start(server, rec, on_deleted=deleted.set)
    try:
        server.delete_node("n1")
        assert deleted.wait(20)
        assert watcher.fresh_node(60) is None
        server.add_node("n1", labels={"new": "1"})
        wait_for(lambda: any("new" in labels for labels in rec.labels()), what="re-registered node")
    finally:
        watcher.stop()


def test_node_after_requires_our_write_to_have_been_seen(server):
    rec = Recorder()
    watcher = start(server, rec)
    try:
        assert watcher.node_after("", 60) is not None
        assert watcher.node_after("999999", 60) is None  # a write the watch has not delivered yet
        node = server.core_api().patch_node("n1", {"metadata": {"labels": {"z": "1"}}})
        wait_for(lambda: watcher.node_after(node.metadata.resource_version, 60), what="own write seen")
    finally:
        watcher.stop()


def test_stop_is_prompt_while_the_stream_is_quiet():
    with FakeApiServer(bookmark_interval=300) as server:
        server.add_node("n1")
        rec = Recorder()
        watcher = start(server, rec)
        watcher.stop(timeout=5)
        assert not watcher.alive()


def test_relevant_ignores_status_noise():
    node = {"metadata": {"uid": "u", "labels": {"a": "1"}, "resourceVersion": "5"},
            "spec": {"taints": []}, "status": {"capacity": {"cpu": "4"}, "conditions": [{"type": "Ready"}]}}
    noisy = {"metadata": {"uid": "u", "labels": {"a": "1"}, "resourceVersion": "6"},
             "spec": {}, "status": {"capacity": {"cpu": "4"}, "conditions": [{"type": "Ready", "x": 1}]}}
    assert relevant(node) == relevant(noisy)
    assert relevant(None) is None
    assert relevant(node) != relevant({**node, "metadata": {**node["metadata"], "uid": "v"}})


def event_line(kind, obj):
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def test_hostile_stream_lines_are_dropped_and_only_this_node_is_taken(server, caplog):
    """Junk, an event without an object, another node, a Pod under the Node's name and a Node
    without uid are not taken as the Node; a bookmark moves the version; this Node (kind,
    name, uid) is; an in-stream 410 relists and any other ERROR is an error (backoff)."""
    rec = Recorder()
    deleted = threading.Event()
    watcher = start(server, rec, on_deleted=deleted.set)
    try:
        node = server.node("n1")
        pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "n1", "uid": "pod", "resourceVersion": "7"}}
        body = (b"not json at all\n" + b'["a list"]\n' + b'{"type": "ADDED"}\n'
                + event_line("MODIFIED", {"kind": "Node", "metadata": {"name": "other", "uid": "o", "resourceVersion": "7"}})
                + event_line("MODIFIED", pod) + event_line("DELETED", pod)
                + event_line("MODIFIED", {"kind": "Node", "metadata": {"name": "n1", "resourceVersion": "8"}})
                + event_line("BOOKMARK", {"kind": "Node", "metadata": {"resourceVersion": "9"}})
                + event_line("MODIFIED", {**node, "metadata": {**node["metadata"], "resourceVersion": "10",
                                                               "labels": {"hostile": "1"}}})
                + event_line("ERROR", {"kind": "Status", "code": 500}))
        server.faults.stream(body, path="/api/v1/nodes")
        server.drop_watches()
        wait_for(lambda: any("hostile" in labels for labels in rec.labels()), what="the Node itself")
        assert [n["metadata"]["name"] for n in rec.nodes] == ["n1", "n1"]
        assert all(n["kind"] == "Node" and n["metadata"]["uid"] == node["metadata"]["uid"] for n in rec.nodes)
        assert not deleted.is_set()  # the Pod's DELETED is not the Node's
        assert watcher.reflector.ignored == {"undecodable": 3, "wrong-kind": 2, "no-uid": 1}
        wait_for(lambda: "node watch failed (RuntimeError: watch error 500" in caplog.text, what="the ERROR's backoff")
        wait_for(lambda: watcher.watches >= 3, what="a watch after the ERROR's backoff")
        opened = watcher.lists
        server.faults.stream(event_line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired"}),
                             path="/api/v1/nodes")
        server.drop_watches()
        wait_for(lambda: watcher.lists > opened, what="LIST after an in-stream 410")
    finally:
        watcher.stop()


def test_clean_ends_reconnect_at_once_from_the_last_version():
    """A clean end of the stream is no error (the API server ends every watch). Even with a 30 s error backoff and
    streams ended before any event, the watcher is back within moments, from its version."""
    slow = BackoffSettings(initial=30.0, maximum=30.0)
    with FakeApiServer(bookmark_interval=3600) as srv:
        srv.add_node("n1", labels={"a": "1"})
        rec = Recorder()
        watcher = NodeWatcher(srv.core_api(), "n1", rec, backoff=slow).start()
        try:
            wait_for(lambda: watcher.watches >= 1 and srv.watches.count() >= 1, what="watch open")
            for n in (2, 3, 4):
                wait_for(lambda: srv.watches.count() >= 1, what="watch open")
                srv.drop_watches()
                wait_for(lambda n=n: watcher.watches >= n and srv.watches.count() >= 1, timeout=10, what=f"re-watch {n}")
            assert watcher.lists == 1
            srv.edit_node("n1", lambda n: n["metadata"]["labels"].update(b="2"))
            wait_for(lambda: any("b" in labels for labels in rec.labels()), timeout=10, what="change after reconnects")
        finally:
            watcher.stop()


class RecordingWaits(NodeWatcher):
    """The real watcher, with every back-off wait its reflector asks for recorded (and
    shortened), so the test asserts on the policy, not on the clock."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.waits: list[float] = []
        wait = self.reflector._wait

        def recorded(seconds: float) -> None:
            self.waits.append(seconds)
            wait(min(seconds, 0.05))

        self.reflector._wait = recorded


def test_a_clean_end_of_the_stream_reconnects_at_once_and_errors_back_off_a_few_seconds_at_most(server):
    """With the production back-off settings (800 ms doubling to 30 s): a Node change is never
    missed for longer than a few seconds, whether the server ends its watches cleanly or not."""
    from agent.runtime.node_watch import MAX_WATCH_DELAY

    rec = Recorder()
    watcher = RecordingWaits(server.core_api(), "n1", rec).start()
    try:
        wait_for(lambda: rec.nodes and watcher.watches >= 1 and server.watches.count() >= 1, what="watch open")
        for n in range(3):  # the server ends the stream cleanly (its timeout, a restart)
            server.edit_node("n1", lambda node, n=n: node["metadata"]["labels"].update(step=str(n)))
            wait_for(lambda n=n: rec.labels()[-1].get("step") == str(n), what="event seen")
            opened = watcher.watches
            assert server.drop_watches() >= 1
            wait_for(lambda opened=opened: watcher.watches > opened and server.watches.count() >= 1, what="rewatch")
        # No back-off builds up across clean ends: each one resets it. (A stream that ends within
        # a second with no event at all, which a loaded machine can produce here, is paused once
        # by the first step, 0.8 s plus jitter, so a server closing watches at once is no hot loop.)
        assert all(w <= 1.6 for w in watcher.waits), watcher.waits
        server.edit_node("n1", lambda node: node["metadata"]["labels"].update(step="after"))
        wait_for(lambda: rec.labels()[-1].get("step") == "after", what="events keep flowing")

        # abrupt ends: errors; the delays grow, but never past a few seconds. Each cut waits for
        # the server to hold the reopened stream (a cut between two streams would cut nothing)
        wait_for(lambda: server.watches.count() >= 1, what="the stream open on the server")
        seen = server.watches.started - 1
        for _ in range(8):
            wait_for(lambda seen=seen: server.watches.started > seen, what="rewatch after an error")
            seen = server.watches.started
            assert server.drop_watches(abrupt=True) >= 1
        wait_for(lambda: server.watches.started > seen, what="rewatch after the last error")
        assert watcher.waits and max(watcher.waits) <= MAX_WATCH_DELAY
    finally:
        watcher.stop()
