"""The slice publisher's thread against the in-repo API server through the real client: the
slices come from one LIST and a WATCH, not a LIST per publish; a slice changed or deleted by
someone else is put back; a writer that keeps changing them back is left alone after a few
repairs, once told; nothing is written before the first LIST or while the watch fails; a 409
waits for the watch."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from agent.dra.names import DRIVER
from agent.dra.publisher import ContestSettings, SlicePublisher
from agent.dra.slices import Node, Refused, published_devices
from agent.kube.backoff import BackoffSettings
from agent.kube.reflector import ReflectorSettings
from tests.dra.test_slices import SLICES, _stop_watches, pci, resources, sync, writer  # noqa: F401 - the fixture stops their watches
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

FAST = ReflectorSettings(backoff=BackoffSettings(initial=0.02, maximum=0.1), max_delay=0.1, watch_timeout=30)
FIGHTER = "fighting-writer/1.0"


def ours(api: FakeApiServer) -> list[Any]:
    """Requests of the publisher (the other writer's carry its User-Agent)."""
    return [r for r in api.requests if "/resourceslices" in r.path
            and r.headers.get("User-Agent", r.headers.get("user-agent", "")) != FIGHTER]


def our_writes(api: FakeApiServer) -> list[Any]:
    return [r for r in ours(api) if r.method != "GET"]


def stored(api: FakeApiServer) -> list[dict[str, Any]]:
    return api.store.list(SLICES)[0]


class Run:
    def __init__(self, api: FakeApiServer, **kw: Any) -> None:
        self.results: list[str] = []
        self.contested: list[str | None] = []
        uid = api.node("n1")["metadata"]["uid"]
        self.publisher = SlicePublisher(client.ApiClient(api.client_configuration()), Node("n1", uid), "v1",
                                        taints=False, on_sync=self.results.append,
                                        on_contested=self.contested.append, backoff=BackoffSettings(initial=0.05, maximum=0.1, jitter=0.0),
                                        watch_settings=FAST, **kw)

    def publish(self, *devices: Any) -> None:
        self.publisher.publish(resources(*devices))
        assert self.publisher.synced.wait(20)


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    with FakeApiServer(bookmark_interval=0.2) as server:
        server.add_node("n1")
        yield server


@pytest.fixture
def run(api: FakeApiServer) -> Iterator[Run]:
    started = Run(api)
    started.publisher.start()
    yield started
    started.publisher.stop()
    assert not started.publisher.alive()


def other_writer(api: FakeApiServer) -> client.ResourceV1Api:
    api_client = client.ApiClient(api.client_configuration())
    api_client.user_agent = FIGHTER
    return client.ResourceV1Api(api_client)


def test_no_request_per_publish_one_list_then_the_watch(api: FakeApiServer, run: Run) -> None:
    run.publish(pci(1), pci(2))
    api.clear_requests()
    for _ in range(20):  # twenty discovery passes with the same devices
        run.publish(pci(1), pci(2))
    assert run.results[-20:] == ["unchanged"] * 20
    assert ours(api) == []  # no LIST, no write: the watch (still open) has it all
    assert run.publisher.watched.reflector.lists == 1
    run.publish(pci(1))
    assert [(r.method, r.status) for r in ours(api)] == [("PUT", 200)]  # a change: one write, no read


def test_a_deleted_slice_is_put_back(api: FakeApiServer, run: Run) -> None:
    run.publish(pci(1))
    [mine] = stored(api)
    other_writer(api).delete_resource_slice(mine["metadata"]["name"])
    wait_for(lambda: [len(s["spec"]["devices"]) for s in stored(api)] == [1], what="the slice put back")
    assert [s["metadata"]["name"] for s in stored(api)] != [mine["metadata"]["name"]]  # a new one
    assert run.publisher.watched.reflector.lists == 1  # the watch told, no LIST


def test_a_changed_slice_is_put_back_and_a_stranger_deleted(api: FakeApiServer, run: Run) -> None:
    run.publish(pci(1), pci(2))
    [mine] = stored(api)
    changed = dict(mine, spec=dict(mine["spec"], devices=[{"name": "bogus"}]))
    other_writer(api).replace_resource_slice(mine["metadata"]["name"], changed)
    wait_for(lambda: [len(s["spec"]["devices"]) for s in stored(api)] == [2], what="the content put back")
    stranger = {"metadata": {"name": "stranger"}, "spec": {
        "driver": DRIVER, "nodeName": "n1", "pool": {"name": "n1", "generation": 0, "resourceSliceCount": 1},
        "devices": [{"name": "x"}]}}
    other_writer(api).create_resource_slice(stranger)
    wait_for(lambda: "stranger" not in {s["metadata"]["name"] for s in stored(api)}, what="the extra slice deleted")
    assert [len(s["spec"]["devices"]) for s in stored(api)] == [2]


def test_a_fighting_writer_is_left_alone_after_the_limit(api: FakeApiServer) -> None:
    run = Run(api, contest=ContestSettings(limit=3, window=3600.0, hold=3600.0))
    run.publisher.start()
    try:
        run.publish(pci(1), pci(2))
        fighter = other_writer(api)
        reverts = 0

        def revert() -> None:
            nonlocal reverts
            [current] = stored(api)
            fighter.replace_resource_slice(current["metadata"]["name"],
                                           dict(current, spec=dict(current["spec"], devices=[{"name": f"theirs{reverts}"}])))
            reverts += 1

        def put_back() -> bool:
            return [len(s["spec"]["devices"]) for s in stored(api)] == [2]

        api.clear_requests()
        for _ in range(3):  # the limit: each revert is repaired
            revert()
            wait_for(put_back, what="repaired")
        assert len(our_writes(api)) == 3 and run.contested == []
        revert()  # the fourth: left as the fighter set it
        wait_for(lambda: run.contested != [], what="the contest")
        assert run.contested[0] and "3 times" in str(run.contested[0]) and len(run.contested) == 1
        for n in range(3):  # it goes on: each change is seen, none is written over
            revert()
            wait_for(lambda n=n: run.results.count("contested") >= n + 2, what=f"the change seen {run.results}")
        assert len(our_writes(api)) == 3 and not put_back() and len(run.contested) == 1
        run.publish(pci(1), pci(2), pci(3))  # a change of the devices themselves is written
        assert [len(s["spec"]["devices"]) for s in stored(api)] == [3]
    finally:
        run.publisher.stop()


def test_nothing_written_before_the_first_list(api: FakeApiServer) -> None:
    run = Run(api)
    api.faults.slow(0.5, verb="GET", path="/resourceslices")  # the first LIST takes its time
    run.publisher.start()
    try:
        run.publish(pci(1))
        methods = [(r.method, r.query.get("watch")) for r in ours(api)]
        assert methods[0] == ("GET", None) and methods.index(("POST", None)) > 0  # the LIST came back first
    finally:
        run.publisher.stop()


def test_a_failing_first_list_holds_until_it_reads(api: FakeApiServer) -> None:
    run = Run(api)
    api.faults.fail(503, count=10_000, verb="GET", path="/resourceslices")
    run.publisher.start()
    try:
        run.publisher.publish(resources(pci(1)))
        wait_for(lambda: "held" in run.results, what="held")
        assert our_writes(api) == [] and stored(api) == []
        api.faults.clear()
        assert run.publisher.synced.wait(20)
        assert "written" in run.results and len(stored(api)) == 1
    finally:
        run.publisher.stop()


def test_a_409_waits_for_the_watch_then_writes(api: FakeApiServer) -> None:
    """The writer's view is a LIST the watch has not followed; another writer's change makes
    its PUT a 409; once the watch (started now: LIST, WATCH) shows the newer version it writes."""
    devices = published_devices(resources(pci(1)), taints=False).devices
    sync(writer(api), devices)
    w = writer(api, start=False)
    w.watched.list_once()
    [mine] = stored(api)
    other_writer(api).replace_resource_slice(mine["metadata"]["name"],
                                             dict(mine, spec=dict(mine["spec"], devices=[{"name": "theirs"}])))
    api.clear_requests()
    with pytest.raises(Refused):
        w.sync(published_devices(resources(pci(1), pci(2)), taints=False).devices)
    assert [(r.method, r.status) for r in ours(api)] == [("PUT", 409)]
    w.watched.start()
    try:
        assert sync(w, published_devices(resources(pci(1), pci(2)), taints=False).devices) == 1
        assert [len(s["spec"]["devices"]) for s in stored(api)] == [2]
    finally:
        w.watched.stop()


def test_a_409_no_event_follows_is_retried(api: FakeApiServer, run: Run) -> None:
    run.publish(pci(1))
    api.faults.fail(409, verb="PUT", path="/resourceslices")
    api.clear_requests()
    run.publish(pci(1), pci(2))
    assert "conflict" in run.results and "written" in run.results
    assert [(r.method, r.status) for r in ours(api)] == [("PUT", 409), ("PUT", 200)]


def test_an_attribute_left_out_is_told_once_per_device_change(api: FakeApiServer) -> None:
    told: list[tuple[str, dict[str, str]]] = []
    run = Run(api, on_dropped=lambda device, lost: told.append((device, dict(lost))))
    run.publisher.start()
    try:
        for _ in range(3):
            run.publish(pci(1, serial="S" * 65), pci(2))
        assert told == [("edgetpu-pci-0000-00-00-1", {"serial": "too-long"})]
        run.publish(pci(1, serial="T" * 70), pci(2, serial="U" * 80))
        assert told[1:] == [("edgetpu-pci-0000-00-00-2", {"serial": "too-long"})]
    finally:
        run.publisher.stop()


def test_stop_ends_both_threads(api: FakeApiServer) -> None:
    run = Run(api)
    run.publisher.start()
    run.publish(pci(1))
    run.publisher.stop()
    assert not run.publisher.alive() and not run.publisher.watched.alive()
