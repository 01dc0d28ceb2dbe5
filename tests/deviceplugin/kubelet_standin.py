"""A kubelet stand-in for the device plugin tests, built from the same generated API.

It does what kubelet's device manager does on the wire (``pkg/kubelet/cm/devicemanager/
plugin/v1beta1/{server,handler,client}.go``), over real unix sockets:

- serves ``Registration`` on ``<dir>/kubelet.sock`` after wiping the directory's other
  files, as kubelet's start-up does (``CleanupPluginDirectory``);
- ``Register``: refuses a version not in ``SupportedVersions`` and a resource name that is
  not an extended resource name, then dials ``<dir>/<endpoint>`` and, only if that works,
  answers OK; then calls ``GetDevicePluginOptions`` and keeps one ``ListAndWatch`` stream
  per resource, recording every list it receives;
- ``allocate`` / ``preferred`` call the plugin as kubelet does at container creation.

It is not kubelet: there is no checkpoint, no pod admission, no node status. What only a
real kubelet can show is listed in deploy/device-plugin.md.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from concurrent import futures

import grpc

from agent.deviceplugin.v1beta1 import SUPPORTED_VERSIONS, api_pb2, api_pb2_grpc
from agent.k8s_validation import extended_resource_name_errors


class KubeletStandIn(api_pb2_grpc.RegistrationServicer):
    def __init__(self, socket_dir: str, on_register=None) -> None:
        self.dir = socket_dir
        self.on_register = on_register  # called with the request before it is accepted (a test's probe)
        self.socket = os.path.join(socket_dir, "kubelet.sock")
        self.registrations: list[api_pb2.RegisterRequest] = []
        self.options: dict[str, api_pb2.DevicePluginOptions] = {}
        self.lists: dict[str, list[list[tuple[str, str]]]] = {}
        self._channels: dict[str, grpc.Channel] = {}
        self._cond = threading.Condition()
        self._server: grpc.Server | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, wipe: bool = True, path: str | None = None) -> KubeletStandIn:
        """Listen on ``kubelet.sock`` (or on ``path``, to be renamed over it), after wiping the
        directory's sockets as kubelet's start-up does (``wipe``): every entry but the
        checkpoint, directories and files that are not sockets kept (kubernetes
        pkg/kubelet/cm/devicemanager/manager.go ``CleanupPluginDirectory``)."""
        if wipe:
            for name in os.listdir(self.dir):
                path_of = os.path.join(self.dir, name)
                try:
                    mode = os.lstat(path_of).st_mode
                except FileNotFoundError:
                    continue
                if name != "kubelet_internal_checkpoint" and stat.S_ISSOCK(mode):
                    os.unlink(path_of)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        api_pb2_grpc.add_RegistrationServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{path or self.socket}")
        server.start()
        self._server = server
        return self

    def _halt(self) -> None:
        """The kubelet process ends: its server and its connections to the plugins go."""
        if self._server is not None:
            self._server.stop(0).wait(2)
            self._server = None
        with self._cond:
            channels, self._channels = dict(self._channels), {}
        for channel in channels.values():
            channel.close()

    def stop(self) -> None:
        self._halt()
        try:
            os.unlink(self.socket)
        except FileNotFoundError:
            pass

    def restart(self, how: str = "emptied") -> None:
        """kubelet restarting, in the forms a real one takes (``pkg/kubelet/cm/devicemanager/
        plugin/v1beta1/server.go``):

        - ``emptied``: its start-up wipes the directory (``CleanupPluginDirectory``: every
          socket, ours too), then listens;
        - ``in-place``: ``kubelet.sock`` removed and listened on again at once (``listen``:
          ``cleanupSocket`` then ``net.Listen``), the plugins' sockets left; ext4 gives the new
          socket the inode just freed;
        - ``renamed``: a new socket renamed over ``kubelet.sock`` (an atomic replacement)."""
        if how == "emptied":
            self.stop()
            self.start(wipe=True)
        elif how == "in-place":
            self._halt()  # gRPC removes its socket file as it stops, as Go's listener does
            if os.path.exists(self.socket):
                os.unlink(self.socket)
            self.start(wipe=False)
        elif how == "renamed":
            self._halt()
            fresh = self.socket + ".new"
            self.start(wipe=False, path=fresh)
            os.rename(fresh, self.socket)
        else:
            raise ValueError(how)

    # -- Registration ---------------------------------------------------------------------
    def Register(self, request, context):
        if request.version not in SUPPORTED_VERSIONS:
            context.abort(grpc.StatusCode.UNKNOWN, f"unsupported API version {request.version}")
        # kubelet: v1helper.IsExtendedResourceName (no "kubernetes.io/" anywhere, pkg/kubelet/cm/devicemanager)
        if "kubernetes.io/" in request.resource_name or extended_resource_name_errors(request.resource_name):
            context.abort(grpc.StatusCode.UNKNOWN, f"invalid resource name {request.resource_name}")
        if self.on_register is not None:
            self.on_register(request)
        path = os.path.join(self.dir, request.endpoint)
        channel = grpc.insecure_channel(f"unix://{path}")
        try:
            grpc.channel_ready_future(channel).result(timeout=5)
        except grpc.FutureTimeoutError:
            channel.close()
            context.abort(grpc.StatusCode.UNKNOWN, f"cannot dial {path}")
        stub = api_pb2_grpc.DevicePluginStub(channel)
        options = stub.GetDevicePluginOptions(api_pb2.Empty(), timeout=5)
        with self._cond:
            old = self._channels.pop(request.resource_name, None)
            self._channels[request.resource_name] = channel
            self.registrations.append(request)
            self.options[request.resource_name] = options
            self._cond.notify_all()
        if old is not None:
            old.close()
        threading.Thread(target=self._watch, args=(request.resource_name, stub), daemon=True).start()
        return api_pb2.Empty()

    def _watch(self, resource: str, stub) -> None:
        try:
            for response in stub.ListAndWatch(api_pb2.Empty()):
                with self._cond:
                    self.lists.setdefault(resource, []).append(
                        sorted((d.ID, d.health) for d in response.devices))
                    self._cond.notify_all()
        except grpc.RpcError:
            pass  # plugin or stand-in went away, as kubelet's client.Run ends

    # -- what the tests look at -----------------------------------------------------------
    def registered(self) -> list[str]:
        with self._cond:
            return [r.resource_name for r in self.registrations]

    def latest(self, resource: str) -> list[tuple[str, str]] | None:
        with self._cond:
            seen = self.lists.get(resource)
            return seen[-1] if seen else None

    def wait_for(self, predicate, timeout: float = 20.0):  # generous: shared, loaded CPUs
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                value = predicate()
                if value:
                    return value
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("kubelet stand-in: condition not reached in time")
                self._cond.wait(min(left, 0.2))

    def wait_list(self, resource: str, expected, timeout: float = 20.0):
        return self.wait_for(lambda: self.latest(resource) == sorted(expected), timeout)

    def stub(self, resource: str):
        with self._cond:
            return api_pb2_grpc.DevicePluginStub(self._channels[resource])

    def allocate(self, resource: str, *containers: list[str]) -> api_pb2.AllocateResponse:
        request = api_pb2.AllocateRequest(
            container_requests=[api_pb2.ContainerAllocateRequest(devices_ids=ids) for ids in containers])
        return self.stub(resource).Allocate(request, timeout=5)
