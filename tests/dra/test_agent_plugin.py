"""``run --dra`` with its kubelet plugin, through the whole agent: the Agent in-process on a
writable copy of the recorded ``coral-pcie`` host (a Coral PCIe card, ``/dev/apex_0``) against
the in-repo API server, and the kubelet stand-in (``tests/support/kubelet_dra.py``) on real
unix sockets. The scheduler's part is played from what the API server holds: the device is
taken from the ResourceSlice the agent wrote. podman consumes the CDI spec the agent wrote
(``tests/dra/plugin/podman.py``).

The recorded host's ``/dev/apex_0`` does not exist here; the test makes one at the real path
(char 1,3, as ``tests/dra/plugin/test_catalogue.py`` replays nodes) for podman to bind, and
removes it afterwards."""

from __future__ import annotations

import json
import os
import stat

import pytest
from kubernetes.client import CustomObjectsApi
from kubernetes.client.api_client import ApiClient

from agent.deviceplugin.plugins import DevicePlugins
from agent.deviceplugin.resolve import resolve_claims
from agent.discovery import discover
from agent.dra import cdi
from agent.dra.names import DRIVER
from agent.hostfs import HostFS
from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.rules import desired_state, load_catalogue
from agent.runtime.agent import Agent, Settings
from tests.conftest import LABELS_DIR
from tests.deviceplugin.kubelet_standin import KubeletStandIn
from tests.dra.plugin import podman
from tests.dra.plugin.cdi_schema import problems
from tests.runtime.helpers import CoralHost, wait_for
from tests.support.apiserver import FakeApiServer
from tests.support.kubelet_dra import KubeletDra

NODE = "edge-ai-1"
NS = "default"
TPU = "node-feature-agent.io/edgetpu"
APEX = "/dev/apex_0"  # the gasket driver's node of the recorded card (fixtures/sysfs/coral-pcie)


@pytest.fixture
def apex_node():
    """``/dev/apex_0`` on this machine, a char device 1,3 (``/dev/null``'s numbers)."""
    if os.path.lexists(APEX):
        pytest.fail(f"{APEX} exists on this machine; the test would bind a real device")
    os.mknod(APEX, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    try:
        yield APEX
    finally:
        os.unlink(APEX)


class Bed:
    def __init__(self, tmp_path, socket_dir: str, server: FakeApiServer, version: str = "v1",
                 cdi_dir: str | None = None) -> None:
        self.server = server
        self.host = CoralHost(tmp_path, "coral-pcie")
        self.registry_dir = f"{socket_dir}/registry"
        self.plugin_dir = f"{socket_dir}/plugins/nfa"
        self.cdi_dir = cdi_dir or f"{socket_dir}/cdi"
        self.device_plugin_dir = f"{socket_dir}/dp"
        os.makedirs(self.device_plugin_dir)
        settings = Settings(node_name=NODE, rules_dirs=[str(LABELS_DIR)], host_root=str(self.host.root),
                            metrics_port=None, debounce=0.05, debounce_max=0.5, watch_timeout=30,
                            backoff=BackoffSettings(initial=0.05, maximum=0.2), watch_rules=False, udev_mode="off",
                            dra=version, device_plugin=True, device_plugin_dir=self.device_plugin_dir,
                            dra_plugin_dir=self.plugin_dir, dra_registry_dir=self.registry_dir, cdi_dir=self.cdi_dir)
        self.agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()))
        self.api_client = ApiClient(server.client_configuration())
        self.kubelet = KubeletDra(self.registry_dir, self.api_client)

    def start(self) -> Bed:
        self.agent.start()
        wait_for(self.agent.ready.is_set, what="first reconcile")
        self.kubelet.start()
        return self

    def published_tpu(self) -> tuple[str, str]:
        """(pool, device) of the edgetpu device in the agent's ResourceSlice, as the scheduler reads it."""
        def found():
            slices = CustomObjectsApi(self.api_client).list_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices")["items"]
            return [(s["spec"]["pool"]["name"], d["name"]) for s in slices
                    if s["spec"]["nodeName"] == NODE and s["spec"]["driver"] == DRIVER
                    for d in s["spec"]["devices"] if d["attributes"]["class"]["string"] == "edgetpu"]
        (tpu,) = wait_for(found, what="the edgetpu device in the node's ResourceSlice")
        return tpu

    def claim(self, name: str, pool: str, device: str) -> tuple[str, str, str]:
        created = self.kubelet.create_claim(NS, name, ["tpu"])
        self.kubelet.allocate(NS, name, [{"request": "tpu", "driver": DRIVER, "pool": pool, "device": device}])
        return NS, name, created["metadata"]["uid"]

    def close(self) -> None:
        self.kubelet.stop()
        self.agent.stop(timeout=5)


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE)
        yield srv


def device_plugin_nodes(host_root: str) -> list[tuple[str, str, str]]:
    """The device nodes the device plugin's ``Allocate`` gives for the host's TPU (its own
    kubelet stand-in, the same catalogue resolution): (host path, container path, permissions)."""
    found = discover(HostFS(host_root))
    state = desired_state(found.features, found.labels, {}, load_catalogue([str(LABELS_DIR)]))
    published = resolve_claims(HostFS(host_root), state.device_claims)
    directory = f"{host_root}-dp"
    os.makedirs(directory)
    kubelet = KubeletStandIn(directory).start()
    plugins = DevicePlugins(directory, check_interval=0.1).start()
    try:
        plugins.publish(published)
        (device,) = published[TPU].devices
        kubelet.wait_list(TPU, [(device.id, "Healthy")])
        (allocated,) = kubelet.allocate(TPU, [device.id]).container_responses
        return sorted((d.host_path, d.container_path, d.permissions) for d in allocated.devices)
    finally:
        plugins.stop(1.0)
        kubelet.stop()


def metric(agent: Agent, name: str, labels: dict[str, str]) -> float:
    return agent.metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_claim_on_the_published_device_is_prepared_consumed_by_podman_and_unprepared(tmp_path, socket_dir, server,
                                                                                       apex_node):
    podman.image()
    bed = Bed(tmp_path / "a", socket_dir, server, cdi_dir=podman.RUNTIME_CDI_DIR).start()
    try:
        # DRA serves the resource: no device plugin (though --device-plugin was on), no patched count
        assert bed.agent.devices is None and os.listdir(bed.device_plugin_dir) == []
        assert "DRA kubelet plugin" in bed.agent.parts.names() and "device plugin" not in bed.agent.parts.names()
        assert TPU not in server.node(NODE)["status"].get("capacity", {})
        assert server.node(NODE)["metadata"]["labels"]["accelerators/edgetpu"] == "true"
        bed.kubelet.wait_registered()
        assert metric(bed.agent, "nfa_dra_plugin_registrations_total", {"result": "registered"}) == 1
        pool, device = bed.published_tpu()
        assert pool == NODE
        ref = bed.claim("detector", pool, device)
        try:
            answer = bed.kubelet.prepare(ref).claims[ref[2]]
            assert answer.error == ""
            assert [(d.pool_name, d.device_name) for d in answer.devices] == [(pool, device)]
            with open(cdi.spec_path(podman.RUNTIME_CDI_DIR, ref[2])) as handle:
                spec = json.load(handle)
            assert problems(spec) == []
            (entry,) = spec["devices"]
            nodes = sorted((n["hostPath"], n["path"], n["permissions"]) for n in entry["containerEdits"]["deviceNodes"])
            assert nodes == device_plugin_nodes(str(bed.host.root)) == [(APEX, APEX, "rw")]
            ids = [i for d in answer.devices for i in d.cdi_device_ids]
            assert podman.run(ids, f"stat -c '%n %F %t,%T' {APEX}").splitlines() == [f"{APEX} character special file 1,3"]
            assert metric(bed.agent, "nfa_dra_plugin_claims_total", {"operation": "prepare", "result": "prepared"}) == 1
        finally:
            assert bed.kubelet.unprepare(ref).claims[ref[2]].error == ""
        assert ref[2] not in cdi.claim_specs(podman.RUNTIME_CDI_DIR)
        assert not os.path.exists(cdi.spec_path(podman.RUNTIME_CDI_DIR, ref[2]))
        assert metric(bed.agent, "nfa_dra_plugin_claims_total", {"operation": "unprepare", "result": "unprepared"}) == 1
        assert TPU not in server.node(NODE)["status"].get("capacity", {})
        node_writes = [json.dumps(r.body) for r in server.requests if r.method == "PATCH" and "/nodes/" in r.path]
        assert node_writes and not any(TPU.replace("/", "~1") in w or TPU in w for w in node_writes)
    finally:
        bed.close()


def test_healthz_fails_when_the_kubelet_plugin_dies(tmp_path, socket_dir, server):
    bed = Bed(tmp_path / "a", socket_dir, server).start()
    try:
        assert bed.agent.healthy() == (True, "ok")
        assert bed.agent.dra_plugin is not None
        bed.agent.dra_plugin.stop(1.0)  # its thread ends as a crash would end it
        wait_for(lambda: not bed.agent.dra_plugin.alive(), what="the plugin thread ended")
        assert bed.agent.healthy() == (False, "DRA kubelet plugin thread died")
    finally:
        bed.close()


def test_runs_plugin_answers_a_kubelet_on_an_emptied_registry_through_its_directory_watch(tmp_path, socket_dir,
                                                                                        server):
    """``run`` watches the plugin's directories: kubelet coming back on an emptied registry
    directory registers the driver again though the plugin's own look is an hour away."""
    bed = Bed(tmp_path / "a", socket_dir, server)
    assert bed.agent.dra_plugin is not None
    bed.agent.dra_plugin.check_interval = 3600.0
    bed.start()
    try:
        bed.kubelet.wait_registered()
        seen = len(bed.kubelet.infos)
        bed.kubelet.restart(wipe=True)
        bed.kubelet.wait_registered(after=seen)
        assert metric(bed.agent, "nfa_dra_plugin_registrations_total", {"result": "registered"}) == 2
    finally:
        bed.close()


def test_in_v1beta1_mode_claims_are_read_in_v1beta1(tmp_path, socket_dir):
    """A 1.32/1.33 cluster: the mode chose v1beta1, and the plugin reads the claim there."""
    with FakeApiServer(bookmark_interval=0.5, dra_versions=("v1beta1",)) as server:
        server.add_node(NODE)
        bed = Bed(tmp_path / "a", socket_dir, server, version="v1beta1").start()
        try:
            bed.kubelet.wait_registered()
            objects = CustomObjectsApi(bed.api_client)
            slices = wait_for(lambda: objects.list_cluster_custom_object(
                "resource.k8s.io", "v1beta1", "resourceslices")["items"], what="the node's ResourceSlices")
            (device,) = [d["name"] for s in slices for d in s["spec"]["devices"]
                         if d["basic"]["attributes"]["class"]["string"] == "edgetpu"]
            created = objects.create_namespaced_custom_object("resource.k8s.io", "v1beta1", NS, "resourceclaims", {
                "apiVersion": "resource.k8s.io/v1beta1", "kind": "ResourceClaim", "metadata": {"name": "old"},
                "spec": {"devices": {"requests": [{"name": "tpu", "deviceClassName": "edgetpu.node-feature-agent.io",
                                                   "allocationMode": "ExactCount", "count": 1}]}}})
            objects.patch_namespaced_custom_object_status("resource.k8s.io", "v1beta1", NS, "resourceclaims", "old", {
                "status": {"allocation": {"devices": {"results": [
                    {"request": "tpu", "driver": DRIVER, "pool": NODE, "device": device}]}}}})
            ref = (NS, "old", created["metadata"]["uid"])
            answer = bed.kubelet.prepare(ref).claims[ref[2]]
            assert answer.error == "" and [d.device_name for d in answer.devices] == [device]
            reads = [r.path for r in server.requests if r.method == "GET" and r.path.endswith("/resourceclaims/old")]
            assert reads == [f"/apis/resource.k8s.io/v1beta1/namespaces/{NS}/resourceclaims/old"]
            assert bed.kubelet.unprepare(ref).claims[ref[2]].error == ""
            assert not os.path.exists(cdi.spec_path(bed.cdi_dir, ref[2]))
        finally:
            bed.close()


def test_a_checkpoint_past_its_bound_is_a_warning_event_and_a_metric(tmp_path, socket_dir, server):
    from agent.dra.plugin import CHECKPOINT, MAX_CHECKPOINT_BYTES

    bed = Bed(tmp_path / "a", socket_dir, server)
    os.makedirs(bed.plugin_dir)
    with open(os.path.join(bed.plugin_dir, CHECKPOINT), "w") as handle:
        handle.write(" " * (MAX_CHECKPOINT_BYTES + 1))
    bed.start()
    try:
        wait_for(lambda: any(e.get("reason") == "DraPluginReadBounded" and "larger than 16777216 bytes"
                             in (e.get("message") or e.get("note") or "") for e in server.events()),
                 what="a Warning Event naming the checkpoint bound")
        assert metric(bed.agent, "nfa_dra_plugin_bounded_total", {"bound": "checkpoint"}) == 1
    finally:
        bed.close()
