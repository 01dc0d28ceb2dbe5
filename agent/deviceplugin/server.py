"""One resource's device plugin: the kubelet's ``DevicePlugin`` gRPC service on a unix socket.

The worker thread calls ``publish`` with the devices of this pass; ``ListAndWatch`` streams
send the new list at once (a condition variable, no polling), so a plugged device reaches
kubelet in the same pass that labels the node. ``Allocate`` answers from the last published
list only: an unknown or unhealthy device ID fails the call (as the API asks: "fail the
Allocation request"), the container never gets a node that is not there.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator
from concurrent import futures

import grpc

from agent.deviceplugin.model import PluginDevice, ResourceDevices, endpoint_name
from agent.deviceplugin.sockets import listen_private, socket_identity
from agent.deviceplugin.v1beta1 import HEALTHY, UNHEALTHY, api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

AllocationObserver = Callable[[str, str], None]  # (resource, result) -> None


def device_message(device: PluginDevice, advertised_id: str = "") -> api_pb2.Device:
    """``advertised_id``: the replica's ID when the device is shared (default: its own)."""
    message = api_pb2.Device(ID=advertised_id or device.id, health=HEALTHY if device.healthy else UNHEALTHY)
    if device.numa_node is not None:
        message.topology.nodes.add(ID=device.numa_node)
    return message


class AllocationError(Exception):
    """A request the plugin cannot honour (unknown or unhealthy device)."""


def container_response(state: ResourceDevices, ids: list[str]) -> api_pb2.ContainerAllocateResponse:
    """DeviceSpecs for every node of every requested device (any replica of a shared device
    hands out that device's nodes), plus the resource's env and mounts."""
    known = state.replicas()
    response = api_pb2.ContainerAllocateResponse()
    seen: set[str] = set()
    for device_id in ids:
        device = known.get(device_id)
        if device is None:
            raise AllocationError(f"{state.resource}: unknown device {device_id!r}")
        if not device.healthy:
            raise AllocationError(f"{state.resource}: device {device_id} is unhealthy: {device.why}")
        if not device.nodes:
            raise AllocationError(f"{state.resource}: device {device_id} has no device node to pass")
        for node in device.nodes:
            if node.host_path in seen:
                continue
            seen.add(node.host_path)
            response.devices.add(container_path=node.container_path, host_path=node.host_path,
                                 permissions=node.permissions)
    for key, value in sorted(state.env.items()):
        response.envs[key] = value
    for mount in state.mounts:
        response.mounts.add(container_path=mount.container_path, host_path=mount.host_path,
                            read_only=mount.read_only)
    return response


def preferred(state: ResourceDevices, available: list[str], must: list[str], size: int) -> list[str]:
    """``must`` first, then healthy devices on the NUMA node most of them share, by ID."""
    known = state.replicas()
    chosen = [d for d in must if d in available or d in known][:max(size, len(must))]
    numa = [known[d].numa_node for d in chosen if d in known and known[d].numa_node is not None]
    home = max(set(numa), key=numa.count) if numa else None
    rest = sorted((d for d in available if d not in chosen and d in known and known[d].healthy),
                  key=lambda d: (known[d].numa_node != home, d))
    return chosen + rest[:max(0, size - len(chosen))]


class _Service(api_pb2_grpc.DevicePluginServicer):
    """The DevicePlugin service; its method names are the gRPC service's."""

    def __init__(self, owner: ResourceServer) -> None:
        self.owner = owner

    def GetDevicePluginOptions(self, request: api_pb2.Empty,
                               context: grpc.ServicerContext) -> api_pb2.DevicePluginOptions:
        return api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(self, request: api_pb2.Empty,
                     context: grpc.ServicerContext) -> Iterator[api_pb2.ListAndWatchResponse]:
        return self.owner.stream(context)

    def GetPreferredAllocation(self, request: api_pb2.PreferredAllocationRequest,
                               context: grpc.ServicerContext) -> api_pb2.PreferredAllocationResponse:
        state = self.owner.state
        out = api_pb2.PreferredAllocationResponse()
        for req in request.container_requests:
            ids = preferred(state, list(req.available_deviceIDs), list(req.must_include_deviceIDs), req.allocation_size)
            out.container_responses.add(deviceIDs=ids)
        return out

    def Allocate(self, request: api_pb2.AllocateRequest, context: grpc.ServicerContext) -> api_pb2.AllocateResponse:
        state = self.owner.state
        out = api_pb2.AllocateResponse()
        try:
            for req in request.container_requests:
                out.container_responses.append(container_response(state, list(req.devices_ids)))
        except AllocationError as err:
            self.owner.observe_allocation(state.resource, "refused")
            log.warning("Allocate refused: %s", err, extra={"event": "device-plugin-allocate"})
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(err))
        self.owner.observe_allocation(state.resource, "allocated")
        log.info("Allocate %s: %s", state.resource,
                 "; ".join(",".join(r.devices_ids) for r in request.container_requests),
                 extra={"event": "device-plugin-allocate"})
        return out

    def PreStartContainer(self, request: api_pb2.PreStartContainerRequest,
                          context: grpc.ServicerContext) -> api_pb2.PreStartContainerResponse:
        return api_pb2.PreStartContainerResponse()


class ResourceServer:
    """The gRPC server of one resource, listening on ``<socket_dir>/<endpoint_name>``."""

    def __init__(self, resource: str, socket_dir: str, observe_allocation: AllocationObserver | None = None) -> None:
        self.resource = resource
        self.endpoint = endpoint_name(resource)
        self.socket_path = os.path.join(socket_dir, self.endpoint)
        self.observe_allocation = observe_allocation or (lambda _r, _x: None)
        self._cond = threading.Condition()
        self._state = ResourceDevices(resource)
        self._generation = 0
        self._stopped = False
        self._server: grpc.Server | None = None
        self._inode: tuple[int, int, int] | None = None

    @property
    def state(self) -> ResourceDevices:
        with self._cond:
            return self._state

    def publish(self, state: ResourceDevices) -> bool:
        """Make ``state`` current; wake every ListAndWatch stream if the device list changed."""
        with self._cond:
            changed = [(i, d.healthy, d.numa_node) for i, d in state.replicas().items()] != \
                      [(i, d.healthy, d.numa_node) for i, d in self._state.replicas().items()]
            self._state = state
            if changed:
                self._generation += 1
                self._cond.notify_all()
            return changed

    def stream(self, context: grpc.RpcContext) -> Iterator[api_pb2.ListAndWatchResponse]:
        sent = -1
        while True:
            with self._cond:
                while sent == self._generation and not self._stopped and context.is_active():
                    self._cond.wait(timeout=1.0)
                if self._stopped or not context.is_active():
                    return
                sent, state = self._generation, self._state
            yield api_pb2.ListAndWatchResponse(devices=[device_message(d, i) for i, d in state.replicas().items()])

    def start(self) -> ResourceServer:
        """Listen on a fresh socket (a stale file from an earlier run is removed first)."""
        try:
            os.unlink(self.socket_path)
        except FileNotFoundError:
            pass
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix=f"dp-{self.endpoint}"))
        api_pb2_grpc.add_DevicePluginServicer_to_server(_Service(self), server)
        listen_private(server, self.socket_path)
        server.start()
        with self._cond:
            self._stopped = False
        self._server = server
        self._inode = socket_identity(self.socket_path)
        return self

    def socket_intact(self) -> bool:
        """False once someone removed or replaced our socket (kubelet does on its start)."""
        return self._inode is not None and socket_identity(self.socket_path) == self._inode

    def stop(self, grace: float = 0.2, wait: float | None = None) -> None:
        """End the streams, stop serving (waiting at most ``wait`` seconds, default grace + 0.2)
        and remove our socket if it is still ours."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.stop(grace).wait(grace + 0.2 if wait is None else wait)
            self._server = None
        if self._inode is not None and socket_identity(self.socket_path) == self._inode:
            try:
                os.unlink(self.socket_path)
            except OSError:
                pass
        self._inode = None
