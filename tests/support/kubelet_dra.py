"""A kubelet stand-in for DRA: the plugin watcher, the DRA client and the scheduler's one
write, over real unix sockets and the in-repo API server.

What it does, as kubelet does it:

- plugin watcher (``pkg/kubelet/pluginmanager/pluginwatcher/plugin_watcher.go``): watches the
  registry directory (polled here; kubelet uses fsnotify and walks the directory at its
  start), and for each socket it has not registered calls ``GetInfo``; a ``DRAPlugin`` whose
  ``supported_versions`` name a service it knows (``v1.DRAPlugin``, ``v1beta1.DRAPlugin``;
  ``validateSupportedServices`` in ``pkg/kubelet/cm/dra/plugin``, the first the plugin lists)
  is dialled on its endpoint and told ``NotifyRegistrationStatus(true)``; otherwise it is told
  ``false`` with kubelet's error text; a socket that disappears unregisters the driver;
- DRA client: ``NodePrepareResources`` / ``NodeUnprepareResources`` with 45 s timeouts
  (``defaultClientCallTimeout``);
- scheduler: ``allocate`` writes ``status.allocation.devices.results`` of a claim through the
  ``/status`` subresource, as kube-scheduler's DRA plugin does once it picked devices;
  ``allocate_share`` first does the allocator's arithmetic for a device that allows multiple
  allocations (below).

It is not kubelet: no claim info cache, no pod admission, no ResourceSlice wiping.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import uuid
from fractions import Fraction
from typing import Any

import grpc

from agent.dra.api.registration import api_pb2 as reg_pb2
from agent.dra.api.registration import api_pb2_grpc as reg_grpc
from agent.dra.api.v1 import api_pb2 as v1_pb2
from agent.dra.api.v1 import api_pb2_grpc as v1_grpc
from agent.dra.api.v1beta1 import api_pb2 as v1beta1_pb2
from agent.dra.api.v1beta1 import api_pb2_grpc as v1beta1_grpc
from agent.dra.names import DRIVER

KUBELET_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # servicesSupportedByKubelet
CALL_TIMEOUT = 45.0


def claim_body(name: str, requests: list[str], device_class: str = "edgetpu.node-feature-agent.io") -> dict[str, Any]:
    """A ResourceClaim asking one device of ``device_class`` per request name."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": r, "exactly": {"deviceClassName": device_class,
                                                                       "allocationMode": "ExactCount", "count": 1}}
                                              for r in requests]}}}


class KubeletDra:
    def __init__(self, registry_dir: str, api_client: Any, services: tuple[str, ...] = KUBELET_SERVICES,
                 poll: float = 0.05) -> None:
        from kubernetes.client import CustomObjectsApi

        self.registry_dir = registry_dir
        self.services = services
        self.poll = poll
        self.objects = CustomObjectsApi(api_client)
        self.infos: list[reg_pb2.PluginInfo] = []
        self.refusals: list[str] = []
        self._seen: dict[str, tuple[int, int, int]] = {}  # socket path -> identity registered
        self._drivers: dict[str, tuple[str, str, grpc.Channel]] = {}  # driver -> (socket, service, channel)
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> KubeletDra:
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="kubelet-dra", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        with self._cond:
            drivers, self._drivers, self._seen = dict(self._drivers), {}, {}
        for _socket, _service, channel in drivers.values():
            channel.close()

    def restart(self) -> None:
        """kubelet ends (its connections go) and starts again: a fresh watcher walks the
        directory and registers what it finds."""
        self.stop()
        self.start()

    # -- the plugin watcher -----------------------------------------------------------------
    def _watch(self) -> None:
        while not self._stop.is_set():
            try:
                names = os.listdir(self.registry_dir)
            except FileNotFoundError:
                names = []
            present = {}
            for name in names:
                path = os.path.join(self.registry_dir, name)
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                if stat.S_ISSOCK(st.st_mode):
                    present[path] = (st.st_dev, st.st_ino, st.st_ctime_ns)
            with self._cond:
                for path in [p for p in self._seen if present.get(p) != self._seen[p]]:
                    del self._seen[path]  # gone or replaced: deregister
                    for driver in [d for d, v in self._drivers.items() if v[0] == path]:
                        self._drivers.pop(driver)[2].close()
                    self._cond.notify_all()
            for path, identity in present.items():
                if path not in self._seen:
                    self._register(path, identity)
            self._stop.wait(self.poll)

    def _register(self, path: str, identity: tuple[int, int, int]) -> None:
        try:
            with grpc.insecure_channel(f"unix://{path}") as channel:
                stub = reg_grpc.RegistrationStub(channel)
                info = stub.GetInfo(reg_pb2.InfoRequest(), timeout=5)
                error = self._check(info)
                dra: grpc.Channel | None = None
                if not error:
                    dra = grpc.insecure_channel(f"unix://{info.endpoint}")
                    try:
                        grpc.channel_ready_future(dra).result(timeout=5)
                    except grpc.FutureTimeoutError:
                        dra.close()
                        dra, error = None, f"cannot dial {info.endpoint}"
                stub.NotifyRegistrationStatus(reg_pb2.RegistrationStatus(plugin_registered=not error, error=error),
                                              timeout=5)
        except grpc.RpcError:
            return  # the plugin went away mid-registration: the next look tries again
        with self._cond:
            self._seen[path] = identity
            self.infos.append(info)
            if dra is None:
                self.refusals.append(error)
            else:
                service = next(s for s in info.supported_versions if s in self.services)
                old = self._drivers.get(info.name)
                self._drivers[info.name] = (path, service, dra)
                if old is not None:
                    old[2].close()
            self._cond.notify_all()

    def _check(self, info: reg_pb2.PluginInfo) -> str:
        if info.type != "DRAPlugin":
            return f"unknown plugin type {info.type}"
        if not info.supported_versions:
            return "empty list of supported gRPC services (aka supported versions)"
        if not any(s in self.services for s in info.supported_versions):
            return (f"none of services supported by the plugin ({list(info.supported_versions)}) are supported by "
                    f"the kubelet ({list(self.services)})")
        return ""

    # -- what tests look at ---------------------------------------------------------------
    def service(self, driver: str = DRIVER) -> str | None:
        with self._cond:
            entry = self._drivers.get(driver)
            return entry[1] if entry else None

    def wait_for(self, predicate: Any, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("kubelet DRA stand-in: condition not reached in time")
                self._cond.wait(min(left, 0.1))

    def wait_registered(self, after: int = 0, timeout: float = 20.0) -> None:
        """Until the driver is registered by a registration later than the ``after``-th."""
        self.wait_for(lambda: len(self.infos) > after and DRIVER in self._drivers, timeout)

    # -- the scheduler's write ------------------------------------------------------------
    def create_claim(self, namespace: str, name: str, requests: list[str]) -> Any:
        return self.objects.create_namespaced_custom_object(
            "resource.k8s.io", "v1", namespace, "resourceclaims", claim_body(name, requests))

    def allocate(self, namespace: str, name: str, results: list[dict[str, Any]]) -> Any:
        """Write ``status.allocation.devices.results`` (each ``{request, driver, pool, device}``)."""
        body = {"status": {"allocation": {"devices": {"results": results}}}}
        return self.objects.patch_namespaced_custom_object_status(
            "resource.k8s.io", "v1", namespace, "resourceclaims", name, body)

    def allocate_share(self, namespace: str, name: str, requests: list[str], pool: str, device: str) -> Any:
        """One share per request of a published device with ``allowMultipleAllocations``, as the
        scheduler's allocator gives it (k8s.io/dynamic-resource-allocation ``structured``:
        ``allocateDevice``, ``consumable_capacity.go``): a request naming no capacity consumes each
        of the device's capacities at its ``requestPolicy.default`` (the whole value without
        one); with what the claims of ``namespace`` already hold of that device, no capacity may
        pass its ``value``, else the device is not allocated (None is returned and nothing
        written). Each result gets a new ``shareID`` and its ``consumedCapacity``."""
        from tests.support.quantity import parse

        listed: Any = self.objects.list_cluster_custom_object("resource.k8s.io", "v1", "resourceslices")
        slices: list[Any] = listed["items"]
        (entry,) = [d for s in slices if s["spec"]["driver"] == DRIVER and s["spec"]["pool"]["name"] == pool
                    for d in s["spec"].get("devices") or [] if d["name"] == device]
        if entry.get("allowMultipleAllocations") is not True:
            raise ValueError(f"device {device} does not allow multiple allocations")
        capacity = entry.get("capacity") or {}
        each = {k: (c.get("requestPolicy") or {}).get("default") or c["value"] for k, c in capacity.items()}
        used = dict.fromkeys(capacity, Fraction(0))
        listed = self.objects.list_namespaced_custom_object("resource.k8s.io", "v1", namespace, "resourceclaims")
        claims: list[Any] = listed["items"]
        for claim in claims:
            for result in (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                if (result["driver"], result["pool"], result["device"]) == (DRIVER, pool, device):
                    for k, v in (result.get("consumedCapacity") or {}).items():
                        used[k] = used.get(k, Fraction(0)) + parse(v)[0]
        if any(used[k] + len(requests) * parse(each[k])[0] > parse(c["value"])[0] for k, c in capacity.items()):
            return None
        return self.allocate(namespace, name, [{"request": r, "driver": DRIVER, "pool": pool, "device": device,
                                                "shareID": str(uuid.uuid4()), "consumedCapacity": dict(each)}
                                               for r in requests])

    def deallocate(self, namespace: str, name: str) -> Any:
        return self.objects.patch_namespaced_custom_object_status(
            "resource.k8s.io", "v1", namespace, "resourceclaims", name, {"status": {"allocation": None}})

    # -- the DRA client -------------------------------------------------------------------
    def channel(self) -> grpc.Channel:
        """The channel to the registered driver's DRA socket."""
        with self._cond:
            return self._drivers[DRIVER][2]

    def _stub(self) -> tuple[Any, Any]:
        """The generated module and a stub of the service kubelet chose at registration."""
        with self._cond:
            entry = self._drivers.get(DRIVER)
        if entry is None:
            raise AssertionError(f"driver {DRIVER} is not registered")
        _path, service, channel = entry
        pb2, grpc_mod = (v1_pb2, v1_grpc) if service == "v1.DRAPlugin" else (v1beta1_pb2, v1beta1_grpc)
        return pb2, grpc_mod.DRAPluginStub(channel)

    def prepare(self, *claims: tuple[str, str, str]) -> Any:
        pb2, stub = self._stub()
        request = pb2.NodePrepareResourcesRequest(claims=[pb2.Claim(namespace=ns, name=n, uid=u) for ns, n, u in claims])
        return stub.NodePrepareResources(request, timeout=CALL_TIMEOUT)

    def unprepare(self, *claims: tuple[str, str, str]) -> Any:
        pb2, stub = self._stub()
        request = pb2.NodeUnprepareResourcesRequest(claims=[pb2.Claim(namespace=ns, name=n, uid=u)
                                                            for ns, n, u in claims])
        return stub.NodeUnprepareResources(request, timeout=CALL_TIMEOUT)
