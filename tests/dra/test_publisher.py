"""The slice publisher's thread: the latest publish is written, a failed read is retried."""

from __future__ import annotations

from kubernetes import client

from agent.dra.publisher import SlicePublisher
from agent.dra.slices import Node
from tests.dra.test_slices import SLICES, pci, resources
from tests.support.apiserver import FakeApiServer


def test_publish_writes_the_latest_and_retries_a_held_read() -> None:
    with FakeApiServer() as api:
        uid = api.add_node("n1")["metadata"]["uid"]
        results: list[str] = []
        publisher = SlicePublisher(client.ApiClient(api.client_configuration()), Node("n1", uid), "v1", taints=False,
                                   on_sync=results.append, backoff=(0.05, 0.1)).start()
        try:
            api.faults.fail(503, verb="GET", path="/resourceslices")
            publisher.publish(resources(pci(1), pci(2)))
            assert publisher.synced.wait(10)
            assert results[0] == "held" and results[-1] == "written"
            assert len(api.store.list(SLICES)[0][0]["spec"]["devices"]) == 2
            publisher.publish(resources(pci(1), pci(2)))
            assert publisher.synced.wait(10)
            assert results[-1] == "unchanged"
        finally:
            publisher.stop()
        assert not publisher.alive()
