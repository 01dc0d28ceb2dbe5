"""DRA mode holds what a bounded /dev read did not read: a glob past its match bound
(``agent.deviceplugin.devnodes.MAX_MATCHES``) leaves the devices it did not reach in the
ResourceSlices as last published, with the ``nfa_device_plugin_undetermined`` metric and one
Warning, exactly as the device plugin does (tests/deviceplugin/test_devnodes.py)."""

from __future__ import annotations

from agent import rules
from agent.deviceplugin.devnodes import MAX_MATCHES
from agent.discovery import discover
from agent.dra.names import device_name
from agent.hostfs import HostFS
from agent.reconcile.node_api import NodeApi
from agent.runtime.dra_service import DraService
from agent.runtime.metrics import AgentMetrics
from tests.deviceplugin.test_devnodes import catalogue, host_copy
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODE = "homelab-1"
SLICES = "resourceslices.resource.k8s.io"
PTS = "example.com/pts"


def slice_devices(server) -> set[str]:
    return {d["name"] for s in server.store.list(SLICES)[0] for d in s["spec"]["devices"]}


def test_devices_past_the_bound_stay_in_the_slices_with_a_metric_and_one_warning(tmp_path):
    root = host_copy(tmp_path)
    pts = root / "dev/pts"
    pts.mkdir()
    for n in range(10):
        (pts / f"x{n}").write_text("")
    catalogue_ = catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/pts/*\n", PTS)
    metrics, warnings = AgentMetrics(), []
    with FakeApiServer() as server:
        server.add_node(NODE)
        api = NodeApi.from_configuration(server.client_configuration())
        service = DraService(api.core.api_client, str(root), NODE, "v1", taints=False, metrics=metrics,
                             warn=warnings.append).start()

        def publish():
            found = discover(HostFS(root))
            service.publish(rules.desired_state(found.features, found.labels, {}, catalogue_), server.node(NODE))

        def held_metric():
            return metrics.device_plugin_undetermined.labels(resource=PTS)._value.get()

        try:
            publish()
            first = {device_name(PTS, f"dev-pts-x{n}") for n in range(10)}
            wait_for(lambda: slice_devices(server) == first, what="the ten devices published")
            assert held_metric() == 0 and warnings == []
            for n in range(10_000):  # sorted before x0..x9: the bound stops before reaching them
                (pts / f"{n:05d}").write_text("")
            publish()
            publish()  # a second pass past the bound warns no more
            bounded = {device_name(PTS, f"dev-pts-{n:05d}") for n in range(MAX_MATCHES)}
            wait_for(lambda: slice_devices(server) == bounded | first, what="the bounded read added, x0..x9 held")
            assert held_metric() == 1
            expected = (f"DRA {PTS}: /dev/pts/* matches 10010 entries; the first {MAX_MATCHES} are served, "
                        "the rest are not read; the devices not read are held as last published "
                        "(deploy/devices.md, \"Bounds\")")
            assert warnings == [expected]
            assert [r for r in server.requests if "/resourceslices" in r.path and r.method == "DELETE"] == []
            for n in range(10_000):
                (pts / f"{n:05d}").unlink()
            (pts / "x9").unlink()  # read whole again: a device that is gone is gone
            publish()
            wait_for(lambda: slice_devices(server) == first - {device_name(PTS, "dev-pts-x9")},
                     what="a whole read drops what is gone")
            assert held_metric() == 0
        finally:
            service.stop()
