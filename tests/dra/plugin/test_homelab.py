"""The shipped home-lab declarations (deploy/optional-rules/homelab-devices.yaml) in DRA mode,
on the constructed homelab hosts (fixtures/sysfs/homelab, -replugged; their READMEs say where
each name comes from): the node's ResourceSlice names the Zigbee sticks by their USB port and
/dev/fuse once per share (``shares: 10``), the names survive the replug that swaps ttyUSB0 and
ttyUSB1, and a claim on a FUSE replica is prepared with a CDI spec naming /dev/fuse.

Expected names follow the folding documented for ``agent.dra.names.device_name`` (resource
kind + stable ID, ``:``/``.`` to ``-``, ``-rN`` for replica N > 0): the Sonoff sits on port 1-1
of the xHCI controller 0000:00:14.0, the ConBee on 1-3; /dev/fuse's ID is ``dev-fuse``.
The fixture's /dev nodes are empty files; the plugin passes host paths through to CDI and the
runtime, so no node is opened here."""

from __future__ import annotations

import json

from agent import rules
from agent.discovery import discover
from agent.dra import cdi
from agent.hostfs import HostFS
from agent.runtime.dra_service import DraService
from agent.runtime.metrics import AgentMetrics
from tests.deviceplugin.test_devnodes import SHIPPED, host_copy, replace_tree
from tests.dra.plugin.conftest import NODE
from tests.runtime.helpers import wait_for

SLICES = "resourceslices.resource.k8s.io"
SONOFF, CONBEE = "zigbee-usb-0000-00-14-0-1-1", "zigbee-usb-0000-00-14-0-1-3"
FUSE = ["fuse-dev-fuse"] + [f"fuse-dev-fuse-r{n}" for n in range(1, 10)]


def slice_devices(server) -> set[str]:
    return {d["name"] for s in server.store.list(SLICES)[0] if s["spec"]["nodeName"] == NODE
            for d in s["spec"]["devices"]}


def test_zigbee_and_ten_fuse_replicas_are_published_stable_across_a_replug_and_fuse_is_prepared(bed, tmp_path):
    root = host_copy(tmp_path)
    service = DraService(bed.api_client, str(root), NODE, "v1", taints=False, metrics=AgentMetrics())

    def publish():
        found = discover(HostFS(root))
        service.publish(rules.desired_state(found.features, found.labels, {}, SHIPPED), bed.server.node(NODE))

    try:
        publish()
        first = wait_for(lambda: slice_devices(bed.server) >= {SONOFF, CONBEE, *FUSE} and slice_devices(bed.server),
                         what="the Zigbee sticks and ten FUSE replicas in the slice")
        assert {n for n in first if n.startswith("fuse-")} == set(FUSE)
        replugged: list = []
        service.consumers.append(replugged.append)
        assert service.publisher is not None and service.publisher.synced.wait(10)
        bed.server.clear_requests()
        replace_tree(root, "homelab-replugged")
        publish()
        assert service.publisher.synced.wait(10)  # the replugged host's pass is written
        # same names and attributes: the replug changed no ID, so there is nothing to write
        assert slice_devices(bed.server) == first
        assert [r for r in bed.server.requests if "/resourceslices" in r.path and r.method != "GET"] == []
        (devices,) = replugged
        (sonoff,) = [d for d in devices["node-feature-agent.io/zigbee"].devices if d.id == "usb-0000:00:14.0-1-1"]
        assert [(n.host_path, n.container_path) for n in sonoff.nodes] == [("/dev/ttyUSB1", "/dev/zigbee")]
        plugin = bed.start_plugin(devices=devices)
        service.consumers.append(plugin.publish)
        bed.kubelet.start().wait_registered()
        ref = bed.claim("fuse", ["fuse-dev-fuse-r3"])
        answer = bed.kubelet.prepare(ref).claims[ref[2]]
        assert answer.error == "" and [d.device_name for d in answer.devices] == ["fuse-dev-fuse-r3"]
        with open(cdi.spec_path(bed.cdi_dir, ref[2])) as handle:
            (device,) = json.load(handle)["devices"]
        assert device["containerEdits"]["deviceNodes"] == [
            {"path": "/dev/fuse", "hostPath": "/dev/fuse", "permissions": "rw"}]
        assert bed.kubelet.unprepare(ref).claims[ref[2]].error == ""
    finally:
        service.stop()
