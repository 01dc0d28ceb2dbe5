"""NodePrepareResources latency of the DRA kubelet plugin, from the kubelet stand-in's call to
its answer, over the real unix socket against the in-repo API server
(tests/support/kubelet_dra.py):

- floor: a NodePrepareResources with no claims on the same channel (gRPC's own round trip
  and our handler's entry, no work);
- cached: a claim this process prepared already (kubelet's retry; answered from memory, the
  CDI spec checked on disk): no API request;
- GET: a claim allocated and never prepared: one GET of the claim, the CDI spec and the
  checkpoint written (each flushed to disk), then unprepared (not timed) so the checkpoint
  stays one claim long.

API requests are counted from the server's log (the memory DRA mode costs: bench/dra.py).
Prints numbers, asserts nothing.

    .venv/bin/python bench/dra_prepare.py --runs 300
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def shown(name: str, values: list[float], floor: float | None = None) -> str:
    p50, p99 = statistics.median(values), percentile(values, 0.99)
    ratio = f"  ({p50 / floor:.1f}x floor p50)" if floor else ""
    return f"{name:7s} p50 {p50 * 1000:7.2f} ms  p90 {percentile(values, 0.9) * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms{ratio}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    args = parser.parse_args(argv)

    from kubernetes.client.api_client import ApiClient

    from agent.deviceplugin.model import DeviceNode, PluginDevice, ResourceDevices
    from agent.dra.api.v1 import api_pb2, api_pb2_grpc
    from agent.dra.claims import ApiClaims
    from agent.dra.names import DRIVER, device_name
    from agent.dra.plugin import KubeletPlugin
    from agent.kube.light_core import LightCoreV1Api
    from tests.support.apiserver import FakeApiServer
    from tests.support.kubelet_dra import KubeletDra

    node, tpu = "edge-ai-1", "node-feature-agent.io/edgetpu"
    devices = {tpu: ResourceDevices(tpu, (PluginDevice("pci-0000:01:00.0", (DeviceNode("/dev/null", "/dev/apex_0"),)),),
                                    env={"EDGETPU": "1"})}
    name = device_name(tpu, "pci-0000:01:00.0")
    root = tempfile.mkdtemp(prefix="dra-", dir="/tmp")
    with FakeApiServer() as server:
        client = ApiClient(server.client_configuration())
        plugin = KubeletPlugin(node, ApiClaims(LightCoreV1Api(client)), plugin_dir=f"{root}/p", registry_dir=f"{root}/r",
                               cdi_dir=root, check_interval=1.0)
        plugin.publish(devices)
        plugin.start()
        kubelet = KubeletDra(f"{root}/r", client).start()
        kubelet.wait_registered()

        def claim(i: int) -> tuple[str, str, str]:
            created = kubelet.create_claim("default", f"c{i}", ["tpu"])
            kubelet.allocate("default", f"c{i}", [{"request": "tpu", "driver": DRIVER, "pool": node, "device": name}])
            return "default", f"c{i}", created["metadata"]["uid"]

        fresh = [claim(i) for i in range(args.runs)]
        kept = claim(args.runs)
        kubelet.prepare(kept)
        stub = api_pb2_grpc.DRAPluginStub(kubelet.channel())
        for _ in range(20):  # warm-up
            stub.NodePrepareResources(api_pb2.NodePrepareResourcesRequest(), timeout=45)
            kubelet.prepare(kept)
        floor, cached, read = [], [], []
        server.clear_requests()
        for _ in range(args.runs):
            start = time.perf_counter()
            stub.NodePrepareResources(api_pb2.NodePrepareResourcesRequest(), timeout=45)
            floor.append(time.perf_counter() - start)
            start = time.perf_counter()
            answer = kubelet.prepare(kept)
            cached.append(time.perf_counter() - start)
            assert answer.claims[kept[2]].error == ""
        cached_requests = len(server.requests)
        for ref in fresh:
            start = time.perf_counter()
            answer = kubelet.prepare(ref)
            read.append(time.perf_counter() - start)
            assert answer.claims[ref[2]].error == "", answer.claims[ref[2]].error
            kubelet.unprepare(ref)
        gets = [r for r in server.requests if r.method == "GET"]
        kubelet.stop()
        plugin.stop(1.0)
    shutil.rmtree(root, ignore_errors=True)
    base = statistics.median(floor)
    print(f"runs {args.runs} each")
    print(shown("floor", floor))
    print(shown("cached", cached, base) + f"  API requests: {cached_requests}")
    print(shown("GET", read, base) + f"  API requests: {len(gets)} GETs, {len(server.requests) - len(gets)} other")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
