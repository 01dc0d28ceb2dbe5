"""Every resource's plugin server, registration with kubelet, and kubelet restarts.

Threads: the agent's worker only calls ``publish`` (in memory: it never waits on gRPC or on
kubelet); one ``device-plugins`` thread starts and stops servers and registers them. That
thread wakes on ``publish``, on ``wake`` (the runtime calls it when the directory changes:
inotify through watchfiles) and every ``check_interval`` seconds as a safety net, and looks
at the directory:

- ``kubelet.sock`` absent: nothing to register with; the servers keep serving and the
  thread keeps looking (kubelet may start after the agent);
- ``kubelet.sock`` created again (the directory watch saw it: ``kubelet_started``) or
  replaced (another inode or ctime: ``sockets.socket_identity``), i.e. kubelet restarted, or a
  resource not registered yet: register again;
- our own socket removed (kubelet's start-up wipes the directory) or replaced: restart that
  server on a fresh socket, then register it.

A device that leaves is reported ``Unhealthy`` (so kubelet marks the pods that hold it) for
``vanished_grace`` seconds, then dropped from the list (kubelet lowers the capacity).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace

import grpc

from agent.deviceplugin.model import PluginDevice, ResourceDevices
from agent.deviceplugin.server import ResourceServer
from agent.deviceplugin.sockets import remove_stale_staging, socket_identity
from agent.deviceplugin.v1beta1 import KUBELET_SOCKET_NAME, VERSION, api_pb2, api_pb2_grpc

log = logging.getLogger(__name__)

VANISHED = "device removed (no longer on the host)"


def register(kubelet_socket: str, resource: str, endpoint: str, timeout: float) -> None:
    """One ``Registration.Register`` call; raises ``grpc.RpcError`` when kubelet refuses."""
    with grpc.insecure_channel(f"unix://{kubelet_socket}") as channel:
        stub = api_pb2_grpc.RegistrationStub(channel)
        options = api_pb2.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)
        stub.Register(api_pb2.RegisterRequest(version=VERSION, endpoint=endpoint, resource_name=resource,
                                              options=options), timeout=timeout)


def with_vanished(current: ResourceDevices, previous: ResourceDevices, since: dict[str, float], now: float,
                  grace: float) -> ResourceDevices:
    """``current`` plus the devices of ``previous`` that left less than ``grace`` seconds ago,
    as Unhealthy; ``since`` (id -> time first seen gone) is updated in place."""
    present = current.by_id()
    for device_id in list(since):
        if device_id in present:
            del since[device_id]
    kept: list[PluginDevice] = []
    for device in previous.devices:
        if device.id in present:
            continue
        gone_at = since.setdefault(device.id, now)
        if now - gone_at < grace:
            kept.append(replace(device, why=VANISHED) if device.why != VANISHED else device)
        else:
            since.pop(device.id, None)
    return replace(current, devices=current.devices + tuple(kept)) if kept else current


class DevicePlugins:
    """The plugin endpoints of this node, one per resource the catalogue declares devices for."""

    def __init__(self, socket_dir: str, *, on_registration: Callable[[str, str], None] | None = None,
                 on_allocation: Callable[[str, str], None] | None = None,
                 on_devices: Callable[[ResourceDevices], None] | None = None,
                 check_interval: float = 1.0, register_timeout: float = 5.0, vanished_grace: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.socket_dir = socket_dir
        self.kubelet_socket = os.path.join(socket_dir, KUBELET_SOCKET_NAME)
        self.check_interval = check_interval
        self.register_timeout = register_timeout
        self.vanished_grace = vanished_grace
        self._clock = clock
        self._on_registration = on_registration or (lambda _r, _x: None)
        self._on_allocation = on_allocation
        self._on_devices = on_devices or (lambda _s: None)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._wanted: dict[str, ResourceDevices] = {}
        self._servers: dict[str, ResourceServer] = {}
        self._registered: dict[str, tuple[int, ...]] = {}  # resource -> the kubelet it registered with
        self._kubelet_starts = 0  # kubelet.sock creations seen by the directory watch
        self._vanished: dict[str, dict[str, float]] = {}
        self._last_error: dict[str, str] = {}
        self._thread = threading.Thread(target=self._run, name="device-plugins", daemon=True)

    # -- the worker's side ------------------------------------------------------------------
    def publish(self, resources: Mapping[str, ResourceDevices]) -> None:
        """This pass's devices per resource. Never blocks on gRPC or kubelet.

        A resource is served from its first device on and until it leaves ``resources`` (the
        catalogue no longer declares it, or the agent still owns its capacity entry)."""
        now = self._clock()
        with self._lock:
            for name in list(self._wanted):
                if name not in resources:
                    del self._wanted[name]
            for name, state in resources.items():
                previous = self._wanted.get(name)
                if previous is None and not state.devices:
                    continue
                merged = with_vanished(state, previous or ResourceDevices(name), self._vanished.setdefault(name, {}),
                                       now, self.vanished_grace)
                self._wanted[name] = merged
                server = self._servers.get(name)
                if server is not None:
                    server.publish(merged)
                self._on_devices(merged)
        self._wake.set()

    def wake(self) -> None:
        """Look at the directory now (something in it changed)."""
        self._wake.set()

    def kubelet_started(self) -> None:
        """``kubelet.sock`` was created: every registration was made with an earlier kubelet,
        however alike the new socket looks to ``stat``."""
        with self._lock:
            self._kubelet_starts += 1
        self._wake.set()

    def _kubelet(self) -> tuple[int, ...] | None:
        """Which kubelet listens now (None: none): its socket's identity and how many times the
        directory watch saw the socket created."""
        identity = socket_identity(self.kubelet_socket)
        with self._lock:
            return None if identity is None else (*identity, self._kubelet_starts)

    def served(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._servers)

    def registered(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._registered)

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> DevicePlugins:
        remove_stale_staging(self.socket_dir)
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 1.0) -> None:
        """Within about ``timeout`` seconds: the thread is told to end (a Register call in flight
        is abandoned), every server stops at once and the sockets go."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout / 2)
        with self._lock:
            servers, self._servers = dict(self._servers), {}
            self._registered.clear()
        for server in servers.values():  # grpc's stop does not block; the waits share the deadline
            server.stop(grace=0.05, wait=max(0.0, deadline - time.monotonic()) / max(1, len(servers)))

    # -- the device-plugins thread ----------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._tick()
            except Exception:  # one bad tick must not end device plugin service
                log.exception("device plugin upkeep failed", extra={"event": "device-plugin-error"})
            self._wake.wait(self.check_interval)
            self._wake.clear()

    def _tick(self) -> None:
        wanted, gone = self._age_out_vanished(self._clock())
        for name in gone:
            self._stop_server(name)
        for name, state in wanted.items():
            self._ensure_server(name, state)
        self._register_with_kubelet(wanted)

    def _age_out_vanished(self, now: float) -> tuple[dict[str, ResourceDevices], list[str]]:
        """Drop devices past their vanished grace (without waiting for a pass) and republish; returns
        the resources wanted now and the names of servers no longer wanted."""
        with self._lock:
            wanted = dict(self._wanted)
            for name, state in wanted.items():
                pruned = with_vanished(replace(state, devices=tuple(d for d in state.devices if d.why != VANISHED)),
                                       state, self._vanished.setdefault(name, {}), now, self.vanished_grace)
                if pruned.devices != state.devices:
                    self._wanted[name] = wanted[name] = pruned
                    if name in self._servers:
                        self._servers[name].publish(pruned)
            gone = [n for n in self._servers if n not in wanted]
        return wanted, gone

    def _register_with_kubelet(self, wanted: dict[str, ResourceDevices]) -> None:
        """Register each served resource with the running kubelet once (again after it restarts)."""
        kubelet = self._kubelet()
        for name in sorted(wanted):
            if self._stopping.is_set():
                return
            with self._lock:
                server = self._servers.get(name)
                done = self._registered.get(name)
            if server is None or kubelet is None or done == kubelet:
                continue
            if not server.socket_intact():  # wiped by a starting kubelet: serve anew first (next tick)
                self._wake.set()
                continue
            self._register(name, server, kubelet)

    def _ensure_server(self, name: str, state: ResourceDevices) -> None:
        with self._lock:
            server = self._servers.get(name)
        if server is not None and server.socket_intact():
            return
        if server is not None:
            log.info("device plugin socket %s was removed (kubelet restarted?); serving it again",
                     server.socket_path, extra={"event": "device-plugin-socket"})
            server.stop(grace=0.1)
        fresh = ResourceServer(name, self.socket_dir, self._on_allocation)
        fresh.publish(state)
        try:
            fresh.start()
        except (OSError, RuntimeError) as err:
            self._note_error(name, f"cannot serve {name} on {fresh.socket_path}: {err}")
            with self._lock:
                self._servers.pop(name, None)
                self._registered.pop(name, None)
            return
        with self._lock:
            self._servers[name] = fresh
            self._registered.pop(name, None)
            current = self._wanted.get(name)
        if current is not None:
            fresh.publish(current)
        log.info("device plugin for %s listening on %s", name, fresh.socket_path,
                 extra={"event": "device-plugin-serving"})

    def _stop_server(self, name: str) -> None:
        with self._lock:
            server = self._servers.pop(name, None)
            self._registered.pop(name, None)
        if server is not None:
            server.stop(grace=0.1)
            log.info("device plugin for %s stopped", name, extra={"event": "device-plugin-stopped"})

    def _register(self, name: str, server: ResourceServer, kubelet: tuple[int, ...]) -> None:
        try:
            register(self.kubelet_socket, name, server.endpoint, self.register_timeout)
        except grpc.RpcError as err:
            if self._stopping.is_set():
                return  # shutting down: the call was cut short on purpose
            self._on_registration(name, "failed")
            detail = f"{err.code().name}: {err.details()}" if hasattr(err, "code") else str(err)
            self._note_error(name, f"kubelet refused or did not answer the registration of {name}: {detail}")
            return
        with self._lock:
            if self._servers.get(name) is server:
                self._registered[name] = kubelet
        self._last_error.pop(name, None)
        self._on_registration(name, "registered")
        log.info("registered %s with kubelet (%s)", name, self.kubelet_socket,
                 extra={"event": "device-plugin-registered"})

    def _note_error(self, name: str, text: str) -> None:
        """Log a problem once until it changes; the next tick retries."""
        if self._last_error.get(name) != text:
            self._last_error[name] = text
            log.warning("%s; retrying every %.0fs", text, self.check_interval, extra={"event": "device-plugin-error"})
