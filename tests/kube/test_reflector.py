"""The one reflector (``agent.kube.reflector``) against the in-repo API server, every path:
paged LIST, a LIST page over its byte bound, WATCH with bookmarks, 410 (in-stream and HTTP), a
handler's relist after its pause, stop, backoff cap, Retry-After, streams of junk, HTML, wrong
kinds, objects without uid (in a stream and in a LIST), streams that end at once, and absent
collections (403/404).

Expected behaviour from client-go's ``tools/cache/reflector.go`` (relist on 410, "very short
watch", ``expectedType`` check: an event of another type is ignored) and the API's watch
contract (api-concepts: bookmarks carry only a resourceVersion)."""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import pytest

from agent.kube.backoff import BackoffSettings
from agent.kube.reflector import Reflector, ReflectorSettings, Relist
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODES = "/api/v1/nodes"
RULES = "/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules"
FAST = ReflectorSettings(backoff=BackoffSettings(initial=0.01, maximum=0.05, jitter=0.0), max_delay=0.05)


class Recorder:
    """A handler that remembers every call."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.replaced: list[list[dict[str, Any]]] = []
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.absences: list[int] = []

    def replace(self, objects: list[dict[str, Any]]) -> None:
        with self.lock:
            self.replaced.append(objects)

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        with self.lock:
            self.events.append((kind, obj))

    def absent(self, status: int) -> None:
        with self.lock:
            self.absences.append(status)

    def names(self) -> list[str]:
        with self.lock:
            return [obj["metadata"]["name"] for _, obj in self.events]


def node_reflector(server: FakeApiServer, handler: Recorder, settings: ReflectorSettings = FAST,
                   **kw: Any) -> Reflector:
    return Reflector(server.core_api(), NODES, "Node", handler, name="test-watch", settings=settings,
                     field_selector="metadata.name=n1", **kw).start()


def watches(server: FakeApiServer, path: str = NODES) -> list[Any]:
    return [r for r in server.requests if r.path == path and r.query.get("watch") == "true"]


def line(kind: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": kind, "object": obj}).encode() + b"\n"


def retry_delays(caplog: pytest.LogCaptureFixture) -> list[float]:
    return [float(r.args[2]) for r in caplog.records if r.name == "agent.kube.reflector" and "retrying" in r.msg]


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=300) as srv:
        srv.add_node("n1", labels={"a": "1"})
        srv.add_node("other")
        yield srv


def opened(server: FakeApiServer, reflector: Reflector, n: int = 1) -> None:
    wait_for(lambda: reflector.watches >= n and server.watches.count() >= 1, what=f"watch {n} open")


def test_paged_list_then_watch_from_its_version():
    with FakeApiServer(nfd_crds=True, bookmark_interval=300) as server:
        for i in range(5):
            server.custom.apply({"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule",
                                 "metadata": {"name": f"r{i}"}, "spec": {"rules": []}})
        rec = Recorder()
        settings = ReflectorSettings(page_size=2)
        reflector = Reflector(server.core_api(), RULES, "NodeFeatureRule", rec, name="rules", settings=settings).start()
        try:
            opened(server, reflector)
            lists = [r for r in server.requests if r.path == RULES and "watch" not in r.query]
            assert [r.query.get("limit") for r in lists] == ["2", "2", "2"]
            assert [bool(r.query.get("continue")) for r in lists] == [False, True, True]
            assert [o["metadata"]["name"] for o in rec.replaced[0]] == [f"r{i}" for i in range(5)]
            assert all(o["kind"] == "NodeFeatureRule" for o in rec.replaced[0])
            watch = watches(server, RULES)[0]
            assert watch.query["resourceVersion"] == str(server.store.rv)  # the LIST's: nothing changed since
            assert watch.query["allowWatchBookmarks"] == "true"
            server.custom.apply({"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule",
                                 "metadata": {"name": "r5"}, "spec": {"rules": []}})
            wait_for(lambda: [n for n in rec.names() if n == "r5"], what="the ADDED event")
            assert rec.events[-1][0] == "ADDED"
        finally:
            reflector.stop()


def test_a_bookmark_advances_the_version_and_reaches_no_handler(server):
    rec = Recorder()
    reflector = node_reflector(server, rec)
    try:
        opened(server, reflector)
        before = int(reflector.resource_version)
        server.edit_node("other", lambda n: n["metadata"]["labels"].update(x="y"))  # not selected: no event
        server.send_bookmarks()
        wait_for(lambda: int(reflector.resource_version) > before, what="the bookmark's version")
        assert rec.events == [] and len(rec.replaced) == 1
        opened_before = reflector.watches
        server.drop_watches()
        opened(server, reflector, opened_before + 1)
        assert int(watches(server)[-1].query["resourceVersion"]) > before  # watched again from the bookmark
        assert reflector.lists == 1
    finally:
        reflector.stop()


@pytest.mark.parametrize("how", ["event", "http"])
def test_410_lists_again_and_a_change_made_meanwhile_arrives(server, how):
    rec = Recorder()
    reflector = node_reflector(server, rec)
    try:
        opened(server, reflector)
        if how == "event":
            server.expire_resource_versions()  # the open watch gets an in-stream ERROR 410
        else:
            server.faults.fail(410, path=NODES, watch=True)
            server.drop_watches()
        server.edit_node("n1", lambda n: n["metadata"]["labels"].update(b="2"))
        wait_for(lambda: reflector.lists >= 2, what="the LIST after 410")
        assert reflector.relists == 1
        wait_for(lambda: any((o["metadata"].get("labels") or {}).get("b") == "2"
                             for batch in rec.replaced for o in batch)
                 or any(o["metadata"]["labels"].get("b") == "2" for _, o in rec.events), what="the change")
        assert reflector.backoff.steps == 0  # a 410 is no error: no backoff
    finally:
        reflector.stop()


def test_stop_closes_the_open_watch_and_joins():
    with FakeApiServer(bookmark_interval=300) as server:
        server.add_node("n1")
        rec = Recorder()
        reflector = node_reflector(server, rec, ReflectorSettings(read_timeout=330.0))
        opened(server, reflector)
        assert reflector.alive()
        reflector.stop(timeout=10)  # the stream is quiet for minutes: only closing it ends the read
        assert not reflector.alive()
        assert reflector.watches == 1  # ended by stop, not by a reconnect


def test_errors_back_off_up_to_the_cap(server, caplog):
    caplog.set_level(logging.WARNING, logger="agent.kube.reflector")
    settings = ReflectorSettings(backoff=BackoffSettings(initial=0.01, maximum=10.0, jitter=0.0), max_delay=0.04)
    server.faults.fail(500, count=6, path=NODES, watch=True)
    rec = Recorder()
    reflector = node_reflector(server, rec, settings)
    try:
        wait_for(lambda: server.faults.pending() == 0 and reflector.watches >= 7, what="the errors served")
        assert retry_delays(caplog)[:6] == [0.01, 0.02, 0.04, 0.04, 0.04, 0.04]
        assert reflector.lists == 1  # a version was known: watched again, not listed
    finally:
        reflector.stop()


def test_retry_after_replaces_the_computed_delay_beyond_the_cap(server, caplog):
    caplog.set_level(logging.WARNING, logger="agent.kube.reflector")
    server.faults.throttle(retry_after=1, path=NODES, watch=True)
    rec = Recorder()
    reflector = node_reflector(server, rec)
    try:
        opened(server, reflector, 2)
        assert retry_delays(caplog) == [1.0]  # the server's pace, not FAST's 0.05 s cap
        throttled = [r for r in watches(server) if r.status == 429]
        assert len(throttled) == 1 and len(watches(server)) == 2
    finally:
        reflector.stop()


JUNK = {
    "junk lines": (b"not json\n\x00\xff garbage\n[1, 2]\n", "application/json", "undecodable"),
    "an HTML page": (b"<html><body>Sign in to continue</body></html>\n", "text/html", "undecodable"),
    "a Pod under the Node's name": (line("MODIFIED", {"kind": "Pod", "apiVersion": "v1", "metadata": {
        "name": "n1", "uid": "pod-uid", "resourceVersion": "999999"}}), "application/json", "wrong-kind"),
    "a Node without uid": (line("MODIFIED", {"kind": "Node", "apiVersion": "v1", "metadata": {
        "name": "n1", "resourceVersion": "999999"}}), "application/json", "no-uid"),
}


@pytest.mark.parametrize("case", list(JUNK))
def test_a_stream_with_nothing_usable_backs_off_like_an_error_and_is_counted(server, caplog, case):
    """Each such stream is followed by a backoff wait: the requests are bounded by the waits."""
    caplog.set_level(logging.WARNING, logger="agent.kube.reflector")
    body, content_type, reason = JUNK[case]
    settings = ReflectorSettings(backoff=BackoffSettings(initial=0.05, maximum=0.2, jitter=0.0), max_delay=0.2)
    server.faults.stream(body, count=1000, path=NODES, content_type=content_type)
    rec = Recorder()
    seen: list[tuple[str, str]] = []
    reflector = node_reflector(server, rec, settings, on_ignored=lambda name, why: seen.append((name, why)))
    try:
        wait_for(lambda: reflector.watches >= 6, what="six junk streams")
        reflector.stop()
        delays = retry_delays(caplog)
        assert len(watches(server)) <= len(delays) + 1  # no watch without a wait before it
        assert min(delays) >= 0.05 and max(delays) == 0.2
        assert rec.events == [] and len(rec.replaced) == 1  # nothing taken as the Node
        assert reflector.ignored[reason] >= 5 and ("test-watch", reason) in seen
        assert int(reflector.resource_version) < 999999  # an ignored object moves no version
    finally:
        reflector.stop()


def test_junk_does_not_spin_over_a_second(server):
    """The request rate itself: over one second of junk streams with a 0.5 s first backoff, a
    handful of requests (a spinning loop made hundreds)."""
    settings = ReflectorSettings(backoff=BackoffSettings(initial=0.5, maximum=5.0))
    server.faults.stream(b"junk\n", count=100000, path=NODES)
    rec = Recorder()
    reflector = node_reflector(server, rec, settings)
    try:
        opened_at = len(watches(server))
        time.sleep(1.0)  # a window to count requests in; the assertion is on the count
        assert len(watches(server)) - opened_at <= 4
    finally:
        reflector.stop()


def test_streams_that_end_at_once_are_paced(server):
    """Empty streams ending at once (client-go's "very short watch"): the first is re-watched at
    once, then 50 ms doubling to ``quick_end_max_wait`` (0.2 s here): in one second at most
    1 + 5 (0, .05, .1, .2, .2, .2 ...) requests."""
    server.faults.stream(b"", count=100000, path=NODES)
    rec = Recorder()
    reflector = node_reflector(server, rec, ReflectorSettings(quick_end_max_wait=0.2))
    try:
        wait_for(lambda: reflector.watches >= 2, what="two empty streams")
        before = len(watches(server))
        time.sleep(1.0)  # a window to count requests in; the assertion is on the count
        assert len(watches(server)) - before <= 6
    finally:
        reflector.stop()


def test_wrong_kind_among_good_events_is_ignored_and_the_good_ones_delivered(server):
    rec = Recorder()
    reflector = node_reflector(server, rec)
    try:
        opened(server, reflector)
        good = server.node("n1")
        good["metadata"]["labels"]["c"] = "3"
        body = (line("MODIFIED", {"kind": "Pod", "metadata": {"name": "n1", "uid": "p"}})
                + line("MODIFIED", {**good, "kind": "Node"}))
        server.faults.stream(body, path=NODES)
        server.drop_watches()
        wait_for(lambda: rec.events, what="the good event")
        assert [obj["kind"] for _, obj in rec.events] == ["Node"]
        assert reflector.ignored["wrong-kind"] == 1 and reflector.backoff.steps == 0
    finally:
        reflector.stop()


def test_an_absent_collection_goes_to_the_handler_and_is_listed_again_when_it_appears():
    with FakeApiServer(nfd_crds=True, bookmark_interval=300) as server:
        server.custom.uninstall()
        server.faults.fail(403, path=RULES, watch=False)
        rec = Recorder()
        settings = ReflectorSettings(absent_backoff=BackoffSettings(initial=0.02, maximum=0.05, jitter=0.0))
        reflector = Reflector(server.core_api(), RULES, "NodeFeatureRule", rec, name="rules", settings=settings).start()
        try:
            wait_for(lambda: len(rec.absences) >= 2, what="403, then 404")
            assert rec.absences[:2] == [403, 404] and rec.replaced == []
            server.custom.install()
            wait_for(lambda: rec.replaced, what="the LIST once the CRD is installed")
            assert reflector.backoff.steps == 0  # absence is not an error
        finally:
            reflector.stop()


def test_without_an_absent_policy_a_404_is_an_error(server, caplog):
    caplog.set_level(logging.WARNING, logger="agent.kube.reflector")
    rec = Recorder()
    reflector = Reflector(server.core_api(), RULES, "NodeFeatureRule", rec, name="rules", settings=FAST).start()
    try:
        wait_for(lambda: len(retry_delays(caplog)) >= 2, what="two retries")
        assert rec.absences == [] and rec.replaced == []
    finally:
        reflector.stop()


def test_a_list_answer_that_is_not_the_kinds_list_is_an_error(server, caplog):
    caplog.set_level(logging.WARNING, logger="agent.kube.reflector")
    rec = Recorder()
    reflector = Reflector(server.core_api(), "/api/v1/pods", "Node", rec, name="pods-as-nodes", settings=FAST).start()
    try:
        wait_for(lambda: len(retry_delays(caplog)) >= 2, what="two retries")
        assert rec.replaced == [] and "not a NodeList" in caplog.text
    finally:
        reflector.stop()


def rule(name: str, spec_bytes: int = 0) -> dict[str, Any]:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": {"name": name},
            "spec": {"rules": [{"name": "x" * spec_bytes}]}}


def lists_of(server: FakeApiServer, path: str = RULES) -> list[Any]:
    return [r for r in server.requests if r.path == path and "watch" not in r.query]


class Pages(Recorder):
    """A handler that takes each LIST page by page (``PagedHandler``)."""

    def __init__(self) -> None:
        super().__init__()
        self.pages: list[list[str]] = []
        self.ends: list[bool] = []

    def listing(self) -> Pages:
        return self

    def page(self, objects: list[dict[str, Any]]) -> None:
        with self.lock:
            self.pages.append([o["metadata"]["name"] for o in objects])

    def end(self, complete: bool) -> None:
        with self.lock:
            self.ends.append(complete)


def test_a_page_over_the_byte_bound_is_asked_again_with_fewer_objects_and_read_page_by_page():
    """16 objects of about 1.3 kB, pages of 16 at most 4,000 bytes: the first page is over the
    bound, so the same page is asked again for an eighth of the objects (2), and so on; a
    ``PagedHandler`` gets each page as it is read."""
    with FakeApiServer(nfd_crds=True, bookmark_interval=300) as server:
        names = [f"r{i:02}" for i in range(16)]
        for name in names:
            server.custom.apply(rule(name, 1000))
        rec = Pages()
        settings = ReflectorSettings(page_size=16, max_page_bytes=4000)
        reflector = Reflector(server.core_api(), RULES, "NodeFeatureRule", rec, name="rules", settings=settings).start()
        try:
            opened(server, reflector)
            lists = lists_of(server)
            assert [r.query.get("limit") for r in lists] == ["16"] + ["2"] * 8
            assert [bool(r.query.get("continue")) for r in lists] == [False, False] + [True] * 7
            assert rec.pages == [names[i:i + 2] for i in range(0, 16, 2)] and rec.ends == [True]
            assert rec.replaced == []  # page by page: no whole-collection copy
            assert watches(server, RULES)[0].query["resourceVersion"] == str(server.store.rv)
        finally:
            reflector.stop()


def test_a_page_of_one_object_over_the_byte_bound_is_not_read_and_what_was_read_is_held():
    """A page of one object still over the bound ends the LIST incomplete: the handler's
    collection is not replaced (the objects not read are not gone), and the watch follows from
    the version of the pages read."""
    with FakeApiServer(nfd_crds=True, bookmark_interval=300) as server:
        for name in ("a", "b"):
            server.custom.apply(rule(name))
        rec = Recorder()
        settings = ReflectorSettings(page_size=2, max_page_bytes=4000)
        reflector = Reflector(server.core_api(), RULES, "NodeFeatureRule", rec, name="rules", settings=settings).start()
        try:
            opened(server, reflector)
            assert [[o["metadata"]["name"] for o in batch] for batch in rec.replaced] == [["a", "b"]]
            server.custom.apply(rule("c", 5000))  # one object over the page bound
            server.custom.apply(rule("d"))
            server.expire_resource_versions()  # LIST again: a, b, then c alone, still over
            wait_for(lambda: reflector.lists >= 4 and reflector.watches >= 2, what="the LIST and the watch after it")
            lists = lists_of(server)[1:]
            assert [r.query.get("limit") for r in lists] == ["2", "2", "1"]
            assert lists[1].query["continue"] == lists[2].query["continue"]  # the same page, fewer objects
            assert len(rec.replaced) == 1  # held: a, b, and nothing said of c or d
            assert reflector.backoff.steps == 0  # not an error: no backoff
            server.custom.apply({**rule("a"), "spec": {"rules": []}})
            wait_for(lambda: "a" in rec.names(), what="the watch following from the pages read")
        finally:
            reflector.stop()


def test_max_page_bytes_needs_paging():
    with pytest.raises(ValueError, match="page_size"):
        ReflectorSettings(max_page_bytes=4000)


def test_a_handlers_relist_closes_the_stream_pauses_and_lists_again():
    """``Relist`` from ``event``: the stream is closed before the handler's pause (events
    meanwhile cost nothing), then one LIST, which has what changed during the pause."""

    class Relister(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.paused = threading.Event()
            self.resume = threading.Event()

        def pause(self) -> None:
            self.paused.set()
            self.resume.wait()

        def event(self, kind: str, obj: dict[str, Any]) -> None:
            super().event(kind, obj)
            if obj["metadata"]["name"] == "go":
                raise Relist(self.pause)

    with FakeApiServer(nfd_crds=True, bookmark_interval=300) as server:
        server.custom.apply(rule("a"))
        rec = Relister()
        reflector = Reflector(server.core_api(), RULES, "NodeFeatureRule", rec, name="rules",
                              settings=FAST).start()
        try:
            opened(server, reflector)
            server.custom.apply(rule("go"))
            wait_for(rec.paused.is_set, what="the handler's pause")
            made: list[str] = []

            def change_seen_closed() -> bool:  # the server sees a closed stream when it writes to it
                made.append(f"b{len(made)}")
                server.custom.apply(rule(made[-1]))
                return server.watches.count() == 0

            wait_for(change_seen_closed, what="the stream closed during the pause")
            assert len(lists_of(server)) == 1 and reflector.watches == 1  # the changes meanwhile asked nothing
            rec.resume.set()
            wait_for(lambda: len(rec.replaced) == 2, what="the LIST after the pause")
            assert sorted(o["metadata"]["name"] for o in rec.replaced[1]) == sorted(["a", "go", *made])
            assert reflector.relists == 1 and reflector.backoff.steps == 0
        finally:
            rec.resume.set()
            reflector.stop()


def test_list_items_of_another_kind_or_without_uid_are_ignored_and_counted(server):
    good = server.node("n1")
    pod = {"kind": "Pod", "metadata": {"name": "n1", "uid": "p"}}
    no_uid = {"kind": "Node", "metadata": {"name": "n1"}}
    server.faults.answer({"kind": "NodeList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                          "items": [pod, no_uid, "junk", good]}, path=NODES)
    rec = Recorder()
    seen: list[tuple[str, str]] = []
    reflector = node_reflector(server, rec, on_ignored=lambda name, why: seen.append((name, why)))
    try:
        opened(server, reflector)
        assert [[o["metadata"]["uid"] for o in batch] for batch in rec.replaced] == [[good["metadata"]["uid"]]]
        assert sorted(seen) == [("test-watch", "no-uid"), ("test-watch", "undecodable"), ("test-watch", "wrong-kind")]
    finally:
        reflector.stop()


def test_the_gate_is_held_while_delivering_and_free_while_waiting_on_the_network(server):
    """``gate``: every page and event is decoded and handed over under it; an open, quiet watch
    does not hold it, and what arrives while a reader holds it is delivered once it is free."""
    gate = threading.Lock()
    held: list[bool] = []

    class Gated(Recorder):
        def replace(self, objects: list[dict[str, Any]]) -> None:
            held.append(gate.locked())
            super().replace(objects)

        def event(self, kind: str, obj: dict[str, Any]) -> None:
            held.append(gate.locked())
            super().event(kind, obj)

    rec = Gated()
    reflector = node_reflector(server, rec, gate=gate)
    try:
        opened(server, reflector)
        assert gate.acquire(timeout=10)  # the watch is open and quiet: the gate is free
        try:
            server.edit_node("n1", lambda n: n["metadata"]["labels"].update(g="1"))
            assert rec.events == []  # the reader holds the gate: nothing delivered meanwhile
        finally:
            gate.release()
        wait_for(lambda: rec.events, what="the event once the gate is free")
        assert held == [True, True]
    finally:
        reflector.stop()


def test_on_readable_tells_a_failure_and_the_recovery(server):
    """``on_readable``: the failure's description while a LIST or WATCH fails, None once a LIST
    completed or a WATCH was answered (a writer holds its writes in between)."""
    told: list[str | None] = []
    server.faults.fail(503, count=2, verb="GET", path=NODES)
    rec = Recorder()
    reflector = node_reflector(server, rec, on_readable=told.append)
    try:
        wait_for(lambda: told[-1:] == [None] and rec.replaced, what="the first LIST after the failures")
        assert told[:2] == ["HTTP 503 Service Unavailable"] * 2 and told[2] is None
        opened(server, reflector)
        wait_for(lambda: len(told) >= 4, what="the watch answered")
        assert told[3] is None
        server.faults.fail(500, count=1, verb="GET", path=NODES)
        server.drop_watches()
        wait_for(lambda: "HTTP 500 Internal Server Error" in told, what="the failed re-watch")
        wait_for(lambda: told[-1] is None and reflector.watches >= 3, what="the watch back")
    finally:
        reflector.stop()
