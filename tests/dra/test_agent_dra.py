"""``run --dra`` end to end: the agent in-process against the in-repo API server and a
writable copy of a recorded host; the ResourceSlices, the counts it stops patching, hotplug,
the hand-off from its own earlier counts, a restart, and the mode chosen from discovery."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading

import pytest

from agent.commands.run import with_dra_mode
from agent.dra import mode
from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime.agent import Agent, Settings
from agent.runtime.event_sources import SocketSource
from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import LABELS_DIR
from tests.runtime.helpers import CORAL_DEVPATH, CoralHost, wait_for
from tests.support.apiserver import FakeApiServer

NODE = "edge-ai-1"
TPU, HAILO = "node-feature-agent.io/edgetpu", "node-feature-agent.io/hailo8"
SLICES = "resourceslices.resource.k8s.io"
OWNED_RESOURCES = "node-feature-agent.io/owned-extended-resources"


class Harness:
    def __init__(self, tmp_path, server, case="edge-ai", version="v1", taints=False):
        tmp_path.mkdir(exist_ok=True)
        self.host = CoralHost(tmp_path, case)
        self.sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        settings = Settings(node_name=NODE, rules_dirs=[str(LABELS_DIR)], host_root=str(self.host.root),
                            metrics_port=None, debounce=0.05, debounce_max=0.5, watch_timeout=30,
                            backoff=BackoffSettings(initial=0.05, maximum=0.2), watch_rules=False,
                            dra=version, dra_device_taints=taints)
        self.agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()),
                           event_source=SocketSource(receiver))

    def start(self):
        self.agent.start()
        wait_for(self.agent.ready.is_set, what="first reconcile")
        return self

    def inject(self, action, devpath=CORAL_DEVPATH, subsystem="usb"):
        self.sender.send(encode_kernel_uevent(action, devpath, subsystem))

    def close(self):
        self.agent.stop(timeout=5)
        self.sender.close()


def devices(server) -> dict[str, dict]:
    return {d["name"]: d for s in server.store.list(SLICES)[0] for d in s["spec"]["devices"]}


def slice_writes(server) -> list:
    return [r for r in server.requests if "/resourceslices" in r.path and r.method != "GET"]


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE)
        yield srv


def test_devices_published_counts_not_patched_and_a_restart_writes_nothing(tmp_path, server):
    h = Harness(tmp_path / "a", server).start()
    try:
        wait_for(lambda: len(devices(server)) == 3, what="three devices published")
        classes = sorted(d["attributes"]["class"]["string"] for d in devices(server).values())
        assert classes == ["edgetpu", "edgetpu", "hailo8"]
        capacity = server.node(NODE)["status"]["capacity"]
        assert TPU not in capacity and HAILO not in capacity  # DRA counts them; nobody patches them
        assert server.node(NODE)["metadata"]["labels"]["accelerators/edgetpu"] == "true"
    finally:
        h.close()
    server.clear_requests()
    h2 = Harness(tmp_path / "b", server).start()
    try:
        publisher = wait_for(lambda: h2.agent.dra.publisher, what="publisher started")
        assert publisher.synced.wait(10)
        assert slice_writes(server) == []
    finally:
        h2.close()


def test_hotplug_updates_the_slice(tmp_path, server):
    h = Harness(tmp_path, server, case="coral-usb").start()
    try:
        wait_for(lambda: len(devices(server)) == 1, what="coral published")
        server.clear_requests()
        h.host.unplug()
        h.inject("remove", CORAL_DEVPATH + "/2-2:1.0")
        h.inject("remove")
        wait_for(lambda: len(devices(server)) == 0, what="coral gone from the slice")
        h.host.plug()
        h.inject("add")
        wait_for(lambda: len(devices(server)) == 1, what="coral back")
        # one write per change: the emptied pool's slice deleted, then created again
        assert [r.method for r in slice_writes(server)] == ["DELETE", "POST"]
    finally:
        h.close()


def test_waits_for_its_own_earlier_count_to_go(tmp_path, server):
    """A count the agent patched before (its ownership record) must be gone before DRA
    publishes the same devices: never two counts of one device on one node."""
    def own(node):
        node["metadata"]["annotations"][OWNED_RESOURCES] = TPU
        node["status"]["capacity"][TPU] = "2"
        node["status"]["allocatable"][TPU] = "2"

    server.edit_node(NODE, own)
    h = Harness(tmp_path, server).start()
    try:
        wait_for(lambda: TPU not in server.node(NODE)["status"]["capacity"], what="own count removed")
        wait_for(lambda: sum(1 for n in devices(server) if n.startswith("edgetpu")) == 2, what="tpus published")
    finally:
        h.close()


@pytest.mark.parametrize(("versions", "taints", "wanted", "expected"), [
    (("v1", "v1beta1"), True, "auto", mode.DraApi("v1", True)),
    (("v1", "v1beta1"), False, "auto", mode.DraApi("v1", False)),
    (("v1beta1",), False, "auto", mode.DraApi("v1beta1", False)),
    ((), False, "auto", mode.DraApi("")),
    (("v1",), False, "off", mode.DraApi("")),
])
def test_mode_from_discovery(versions, taints, wanted, expected):
    with FakeApiServer(dra_versions=versions, dra_device_taints=taints) as srv:
        client = NodeApi.from_configuration(srv.client_configuration()).core.api_client
        assert mode.decide(wanted, mode.discover(client)) == expected


def test_on_without_dra_refuses_and_a_failed_discovery_is_not_a_decision():
    with FakeApiServer(dra_versions=()) as srv:
        client = NodeApi.from_configuration(srv.client_configuration()).core.api_client
        settings = Settings(node_name=NODE, rules_dirs=[], host_root="/", device_plugin=True)
        with pytest.raises(ValueError, match="serves neither"):
            with_dra_mode(settings, "on", client, threading.Event())
        assert with_dra_mode(settings, "auto", client, threading.Event()).device_plugin  # falls back
    with FakeApiServer() as srv:
        client = NodeApi.from_configuration(srv.client_configuration()).core.api_client
        srv.faults.fail(500, count=10, path="/apis/resource.k8s.io")
        with pytest.raises(ValueError, match="cannot tell"):
            with_dra_mode(settings, "auto", client, threading.Event(), attempts=2)
        srv.faults.answer({"kind": "Status"}, count=10, path="/apis/resource.k8s.io")
        with pytest.raises(ValueError, match="cannot tell"):
            with_dra_mode(settings, "auto", client, threading.Event(), attempts=1)
        srv.faults.clear()
        chosen = with_dra_mode(settings, "auto", client, threading.Event())
        assert chosen.dra == "v1" and not chosen.device_plugin


def test_clean_deletes_this_nodes_slices_only(tmp_path, server):
    h = Harness(tmp_path, server).start()
    try:
        wait_for(lambda: len(devices(server)) == 3, what="published")
    finally:
        h.close()
    server.store.create(SLICES, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                                 "metadata": {"name": "other-node"},
                                 "spec": {"driver": "node-feature-agent.io", "nodeName": "other",
                                          "pool": {"name": "other", "generation": 0, "resourceSliceCount": 1}}})
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    done = subprocess.run([sys.executable, "-m", "agent", "clean", "--node-name", NODE, "--kubeconfig", str(kubeconfig)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert "ResourceSlices: 1 deleted" in done.stdout, done.stdout + done.stderr
    assert [s["metadata"]["name"] for s in server.store.list(SLICES)[0]] == ["other-node"]


def test_consumers_get_the_mapping_the_slices_are_built_from(tmp_path, server):
    h = Harness(tmp_path, server)
    seen: list[dict] = []
    h.agent.dra.consumers.append(lambda resources: seen.append(dict(resources)))
    h.start()
    try:
        wait_for(lambda: len(devices(server)) == 3, what="published")
        last = wait_for(lambda: seen and seen[-1], what="consumer called")
        from agent.dra.names import device_name

        names = {device_name(r, d.id) for r, state in last.items() for d in state.devices}
        assert names == set(devices(server))
    finally:
        h.close()


def test_slices_that_cannot_be_read_are_held_with_a_warning(tmp_path, server):
    server.faults.fail(503, count=1000, verb="GET", path="/resourceslices")
    h = Harness(tmp_path, server).start()
    try:
        wait_for(lambda: any(e.get("reason") == "ResourceSlicesNotWritten" for e in server.events()),
                 what="Warning Event")
        assert devices(server) == {} and slice_writes(server) == []
        server.faults.clear()
        wait_for(lambda: len(devices(server)) == 3, what="published after the reads recover")
    finally:
        h.close()


def test_a_writer_fighting_over_the_slices_gets_one_warning_and_is_left_alone(tmp_path, server):
    """Another writer that keeps changing the node's slice back: five repairs within a minute
    (``ContestSettings``), then the slice is left as it set it, with one Warning Event and
    ``nfa_dra_slices_contested`` 1."""
    from kubernetes import client

    h = Harness(tmp_path, server, case="coral-usb").start()
    fighter = client.ResourceV1Api(client.ApiClient(server.client_configuration()))
    try:
        wait_for(lambda: len(devices(server)) == 1, what="coral published")
        ours = set(devices(server))

        def revert(n: int) -> None:
            [current] = server.store.list(SLICES)[0]
            fighter.replace_resource_slice(current["metadata"]["name"],
                                           dict(current, spec=dict(current["spec"], devices=[{"name": f"x{n}"}])))

        for n in range(5):
            revert(n)
            wait_for(lambda: set(devices(server)) == ours, what="put back")
        revert(5)
        wait_for(lambda: [e for e in server.events() if e.get("reason") == "ResourceSlicesContested"],
                 what="the Warning Event")
        assert h.agent.metrics.dra_slices_contested._value.get() == 1
        assert set(devices(server)) == {"x5"}
        [event] = [e for e in server.events() if e.get("reason") == "ResourceSlicesContested"]
        assert event["type"] == "Warning" and "5 times" in event["message"]
    finally:
        h.close()


def test_an_attribute_left_out_is_one_warning_and_one_count_not_one_per_pass(tmp_path, server):
    h = Harness(tmp_path, server, case="coral-usb")
    (h.host.root / ("sys" + CORAL_DEVPATH) / "serial").write_text("S" * 70 + "\n")
    h.start()
    try:
        wait_for(lambda: len(devices(server)) == 1, what="coral published")
        [device] = devices(server).values()
        assert "serial" not in device["attributes"]
        wait_for(lambda: [e for e in server.events() if e.get("reason") == "ResourceSliceAttributesDropped"],
                 what="the Warning Event")
        dropped = h.agent.metrics.dra_attributes_dropped.labels("too-long")
        for _ in range(3):  # passes with the same device: told once
            before = h.agent.passes
            h.agent.resync()
            wait_for(lambda before=before: h.agent.passes > before, what="a pass")
            assert h.agent.dra.publisher.synced.wait(10)  # the pass's publish handled
        assert dropped._value.get() == 1
        [event] = [e for e in server.events() if e.get("reason") == "ResourceSliceAttributesDropped"]
        assert "serial (a value longer than 64 bytes)" in event["message"] and event["type"] == "Warning"
    finally:
        h.close()
