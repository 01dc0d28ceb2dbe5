"""The kubelet DRA plugin of driver ``node-feature-agent.io``: registration, NodePrepareResources
and NodeUnprepareResources, CDI specs and a checkpoint of prepared claims.

Threads: the agent's worker only calls ``publish`` (in memory, never waits); gRPC's pool answers
kubelet; one ``dra-plugin`` thread keeps both sockets served. The sockets (kubelet's plugin
watcher, ``pkg/kubelet/pluginmanager``; kubelet's DRA client, ``pkg/kubelet/cm/dra/plugin``):

- ``<registry dir>/node-feature-agent.io-reg.sock``: pluginregistration ``Registration``.
  kubelet finds it by watching the directory (and by walking it when kubelet starts), calls
  ``GetInfo`` (type ``DRAPlugin``, name = driver, endpoint = the DRA socket, the service names
  of ``supported_versions``) and reports with ``NotifyRegistrationStatus``;
- ``<plugin dir>/dra.sock``: the ``DRAPlugin`` service, v1 and v1beta1 (kubelet picks the
  first it supports).

kubelet restarting: a kubelet that comes back walks the registry directory and registers
every socket it finds, so nothing is needed from us while our sockets stay; a socket removed
or replaced (a wiped directory, a node re-provisioned under us) is noticed at the next check
(``check_interval`` seconds, or at once on ``wake``) and served again on a fresh socket, whose
creation kubelet's watcher sees.

Preparing a claim (the contract of ``dra/v1/api.proto``: every claim of the request answered,
an error string per claim, idempotent):

1. a claim prepared by this process answers from memory; otherwise it is read from the API
   server (``agent.dra.claims``);
2. only results of ``status.allocation.devices.results`` whose driver is ours are served (a
   claim with none gets an empty answer); each must be in this node's pool and name a device
   published in this pass (``agent.dra.names``) that is healthy and ready, else the claim fails
   saying which device and why. A shared device is one device several claims hold at once,
   each result with its ``shareID`` (published with ``allowMultipleAllocations``,
   ``agent.dra.slices``), or a replica ``-r<k>`` of it: both are prepared the same way, each
   claim with its own CDI spec, so unpreparing one claim leaves the others' devices as they are;
3. a claim the checkpoint already records with other devices (its allocation changed while we
   were not running) fails: kubelet must unprepare it first;
4. the CDI spec is written (``agent.dra.cdi``), then the checkpoint (both atomic); the answer
   lists the CDI IDs.

Unpreparing removes the spec and the checkpoint entry; a claim we do not know (a restart with a
lost checkpoint, a repeated call) is unprepared already: success. At start, specs of ours that
the checkpoint does not list (a crash between the two writes) are removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

from agent.deviceplugin.model import PluginDevice, ResourceDevices
from agent.deviceplugin.server import listen_private, remove_stale_staging, socket_identity
from agent.dra import cdi
from agent.dra.api import PLUGIN_TYPE, PLUGINS_DIR, REGISTRY_DIR, SERVICES
from agent.dra.api.registration import api_pb2 as reg_pb2
from agent.dra.api.registration import api_pb2_grpc as reg_grpc
from agent.dra.api.v1 import api_pb2 as v1_pb2
from agent.dra.api.v1 import api_pb2_grpc as v1_grpc
from agent.dra.api.v1beta1 import api_pb2 as v1beta1_pb2
from agent.dra.api.v1beta1 import api_pb2_grpc as v1beta1_grpc
from agent.dra.claims import ClaimGone, ClaimSource, ClaimTooLarge, ClaimUnreadable
from agent.dra.names import DRIVER, device_name

log = logging.getLogger(__name__)

PLUGIN_DIR = os.path.join(PLUGINS_DIR, DRIVER)
CDI_DIR = "/var/run/cdi"
SOCKET_NAME = "dra.sock"
REGISTRATION_SOCKET = f"{DRIVER}-reg.sock"
CHECKPOINT = "checkpoint.json"
MAX_CHECKPOINT_BYTES = 16 * 1024 * 1024
"""A checkpoint larger than this was not written by us; it is set aside, not parsed."""

Observer = Callable[[str, str], None]  # (operation, result) -> None
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,127}")
"""A claim UID as kubelet sends it (``metadata.uid``, a UUID); it names our files, so anything
else (a path, ``..``) is refused before it is used."""


class ClaimError(Exception):
    """One claim cannot be prepared; ``str()`` is the error kubelet records."""


@dataclass(frozen=True)
class Prepared:
    """What the checkpoint keeps of a prepared claim: its identity, the devices of ours in its
    allocation as (request, pool, device, share ID or ""), and the CDI spec written for it."""

    namespace: str
    name: str
    results: tuple[tuple[str, str, str, str], ...]
    spec: Mapping[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "name": self.name, "results": [list(r) for r in self.results],
                "spec": dict(self.spec)}

    @staticmethod
    def from_dict(data: Any) -> Prepared:
        """An entry as ``as_dict`` wrote it; one of three fields per result (written before
        share IDs were kept) has none."""
        results = tuple((*(str(x) for x in r), "")[:4] for r in data["results"])
        if any(len(r) not in (3, 4) for r in data["results"]) or not isinstance(data["spec"], dict):
            raise ValueError("malformed entry")
        return Prepared(str(data["namespace"]), str(data["name"]), results, data["spec"])  # type: ignore[arg-type]


def load_checkpoint(path: str, bounded: Callable[[str], None] = lambda _text: None) -> dict[str, Prepared]:
    """The prepared claims recorded at ``path`` (none if there is no file). A file that cannot
    be used is renamed aside (``.bad``) and logged: the CDI specs it would have listed are then
    removed at start, and kubelet prepares those claims again. One past ``MAX_CHECKPOINT_BYTES``
    is also told to ``bounded`` (the bound's metric and Warning)."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_CHECKPOINT_BYTES + 1)
    except FileNotFoundError:
        return {}
    try:
        if len(raw) > MAX_CHECKPOINT_BYTES:
            bounded(f"DRA checkpoint {path} is larger than {MAX_CHECKPOINT_BYTES} bytes; set aside as {path}.bad, "
                    "not read: kubelet prepares its claims again")
            raise ValueError(f"larger than {MAX_CHECKPOINT_BYTES} bytes")
        data = json.loads(raw)
        return {str(uid): Prepared.from_dict(entry) for uid, entry in data["claims"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        log.warning("DRA checkpoint %s is unusable (%s); set aside as %s.bad", path, err, path,
                    extra={"event": "dra-checkpoint"})
        with contextlib.suppress(OSError):
            os.replace(path, path + ".bad")
        return {}


def allocation_results(claim: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    """(request, pool, device, share ID or "") of every allocation result of our driver;
    ClaimError when the claim is not allocated or its allocation is not the API's shape."""
    allocation = (claim.get("status") or {}).get("allocation") if isinstance(claim.get("status"), dict) else None
    if not isinstance(allocation, dict):
        raise ClaimError("the claim is not allocated (no status.allocation): kubelet prepares only allocated claims")
    results = (allocation.get("devices") or {}).get("results") if isinstance(allocation.get("devices"), dict) else None
    if not isinstance(results, list):
        raise ClaimError("status.allocation.devices.results is missing or not a list")
    ours = []
    for index, result in enumerate(results):
        if not isinstance(result, dict) or not all(isinstance(result.get(k), str)
                                                   for k in ("request", "driver", "pool", "device")):
            raise ClaimError(f"status.allocation.devices.results[{index}] is not a device allocation result")
        share = result.get("shareID")
        if share is not None and not isinstance(share, str):
            raise ClaimError(f"status.allocation.devices.results[{index}].shareID is not a string")
        if result["driver"] == DRIVER:
            ours.append((result["request"], result["pool"], result["device"], share or ""))
    return ours


class KubeletPlugin:
    """The DRA plugin of this node. ``claims`` reads ResourceClaims (``agent.dra.claims``)."""

    def __init__(self, node_name: str, claims: ClaimSource, *, plugin_dir: str = PLUGIN_DIR,
                 registry_dir: str = REGISTRY_DIR, cdi_dir: str = CDI_DIR, check_interval: float = 2.0,
                 observe: Observer | None = None, warn: Callable[[str], None] | None = None) -> None:
        self.node_name = node_name
        self.claims = claims
        self.plugin_dir = plugin_dir
        self.registry_dir = registry_dir
        self.cdi_dir = cdi_dir
        self.check_interval = check_interval
        self.socket_path = os.path.join(plugin_dir, SOCKET_NAME)
        self.registration_path = os.path.join(registry_dir, REGISTRATION_SOCKET)
        self.checkpoint_path = os.path.join(plugin_dir, CHECKPOINT)
        self._observe = observe or (lambda _o, _r: None)
        #: a read bound passed (a claim answer, the checkpoint): a Warning Event in ``run``
        self._warn = warn or (lambda _text: None)
        self._lock = threading.Lock()  # guards the devices, the prepared claims and the checkpoint file
        self._devices: dict[str, tuple[ResourceDevices, PluginDevice]] = {}
        self._prepared: dict[str, Prepared] = {}
        self._verified: set[str] = set()  # prepared by this process: answered without a read
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._servers: dict[str, tuple[grpc.Server, tuple[int, int, int] | None]] = {}
        self.registration_status: list[tuple[bool, str]] = []  # what kubelet reported, in order
        self._thread = threading.Thread(target=self._run, name="dra-plugin", daemon=True)

    # -- the worker's side ------------------------------------------------------------------
    def publish(self, resources: Mapping[str, ResourceDevices]) -> None:
        """This pass's devices per resource, under their DRA names. Never blocks on gRPC."""
        devices: dict[str, tuple[ResourceDevices, PluginDevice]] = {}
        for resource, state in resources.items():
            for device in state.devices:
                for replica in range(max(1, state.shares)):
                    devices[device_name(resource, device.id, replica)] = (state, device)
        with self._lock:
            self._devices = devices

    def wake(self) -> None:
        """Look at the sockets now (something in their directories changed)."""
        self._wake.set()

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> KubeletPlugin:
        for directory in (self.plugin_dir, self.registry_dir):
            os.makedirs(directory, mode=0o750, exist_ok=True)
            remove_stale_staging(directory)
        os.makedirs(self.cdi_dir, mode=0o755, exist_ok=True)  # the container runtime reads it, as /var/run/cdi is
        with self._lock:
            self._prepared = load_checkpoint(self.checkpoint_path, lambda text: self._bounded("checkpoint", text))
            for uid in cdi.claim_specs(self.cdi_dir) - set(self._prepared):
                with contextlib.suppress(OSError):
                    cdi.remove_spec(self.cdi_dir, uid)
                    log.info("removed CDI spec of claim %s, which no checkpoint lists", uid,
                             extra={"event": "dra-cdi"})
        self._serve_missing()
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 1.0) -> None:
        """Within about ``timeout`` seconds: the upkeep thread ends, both servers stop and our
        sockets go (kubelet's watcher then unregisters the driver). Specs and checkpoint stay:
        the claims remain prepared for their running containers."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout / 2)
        for path in list(self._servers):
            self._stop_server(path, max(0.0, deadline - time.monotonic()) / 2)

    # -- sockets ----------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(self.check_interval)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self._serve_missing()
            except Exception:  # one bad check must not end the plugin
                log.exception("DRA plugin upkeep failed", extra={"event": "dra-plugin-error"})

    def _serve_missing(self) -> None:
        """(Re)serve each socket that is not ours any more: the DRA service first, so kubelet
        never finds a registration whose endpoint does not answer."""
        for path, add in ((self.socket_path, self._add_dra), (self.registration_path, self._add_registration)):
            entry = self._servers.get(path)
            if entry is not None and socket_identity(path) == entry[1]:
                continue
            if entry is not None:
                log.info("DRA plugin socket %s was removed or replaced; serving it again", path,
                         extra={"event": "dra-plugin-socket"})
                self._stop_server(path, 0.2)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            os.makedirs(os.path.dirname(path), mode=0o750, exist_ok=True)
            server = grpc.server(futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="dra"))
            add(server)
            listen_private(server, path)
            server.start()
            self._servers[path] = (server, socket_identity(path))
            log.info("DRA plugin serving %s", path, extra={"event": "dra-plugin-serving"})

    def _add_dra(self, server: grpc.Server) -> None:
        v1_grpc.add_DRAPluginServicer_to_server(_V1(self), server)
        v1beta1_grpc.add_DRAPluginServicer_to_server(_V1beta1(self), server)

    def _add_registration(self, server: grpc.Server) -> None:
        reg_grpc.add_RegistrationServicer_to_server(_Registration(self), server)

    def _stop_server(self, path: str, wait: float) -> None:
        entry = self._servers.pop(path, None)
        if entry is None:
            return
        server, identity = entry
        server.stop(0.05).wait(wait)
        if identity is not None and socket_identity(path) == identity:
            with contextlib.suppress(OSError):
                os.unlink(path)

    def registered(self) -> bool:
        """Whether kubelet's last report said the driver is registered."""
        return bool(self.registration_status) and self.registration_status[-1][0]

    def _bounded(self, bound: str, text: str) -> None:
        """A read bound passed: ``observe("bounded", bound)`` (the metric) and a Warning."""
        self._observe("bounded", bound)
        self._warn(text)

    # -- NodePrepareResources / NodeUnprepareResources --------------------------------------
    def prepare(self, request: v1_pb2.NodePrepareResourcesRequest) -> v1_pb2.NodePrepareResourcesResponse:
        out = v1_pb2.NodePrepareResourcesResponse()
        for claim in request.claims:
            answer = out.claims[claim.uid]
            try:
                if not _UID.fullmatch(claim.uid):
                    raise ClaimError("the claim UID is not a Kubernetes UID; nothing prepared")
                for request_name, pool, device, ids in self._prepare_one(claim.namespace, claim.name, claim.uid):
                    answer.devices.add(request_names=[request_name], pool_name=pool, device_name=device,
                                       cdi_device_ids=ids)
            except ClaimError as err:
                del answer.devices[:]
                answer.error = f"ResourceClaim {claim.namespace}/{claim.name} ({claim.uid}): {err}"
                self._observe("prepare", "error")
                log.warning("NodePrepareResources: %s", answer.error, extra={"event": "dra-prepare"})
            else:
                self._observe("prepare", "prepared")
        return out

    def _prepare_one(self, namespace: str, name: str, uid: str) -> list[tuple[str, str, str, list[str]]]:
        with self._lock:
            known = self._prepared.get(uid) if uid in self._verified else None
            if known is not None:
                self._ensure_spec(uid, known)
                return self._answer(uid, known)
        try:
            claim = self.claims.get(namespace, name)
        except ClaimGone as err:
            raise ClaimError(f"{err}: it was deleted after kubelet asked for it; nothing prepared") from err
        except ClaimUnreadable as err:
            if isinstance(err, ClaimTooLarge):
                self._bounded("claim", f"{err}; nothing prepared, kubelet retries")
            raise ClaimError(f"{err}; nothing prepared, kubelet retries") from err
        actual = (claim.get("metadata") or {}).get("uid")
        if actual != uid:
            raise ClaimError(f"the API server's claim of that name has UID {actual}: the claim kubelet asked for was "
                             "deleted (and re-created); nothing prepared")
        results = tuple(allocation_results(claim))
        with self._lock:
            earlier = self._prepared.get(uid)
            if earlier is not None and earlier.results != results:
                raise ClaimError(f"its allocation changed since it was prepared (prepared {_shown(earlier.results)}, "
                                 f"now {_shown(results)}); kubelet must unprepare it first")
            # one CDI device per device: two shares of one device in a claim pass the same nodes
            devices = {device: self._device_for(request_name, pool, device)
                       for request_name, pool, device, _share in results}
            entry = Prepared(namespace, name, results, cdi.spec(
                cdi.CdiDevice(cdi.cdi_name(uid, dev_name), d.nodes, state.env, state.mounts)
                for dev_name, (state, d) in devices.items()))
            if results:
                self._write_spec(uid, entry)
                self._prepared[uid] = entry
                self._save_checkpoint(uid)
            self._verified.add(uid)
            return self._answer(uid, entry)

    def _device_for(self, request_name: str, pool: str, device: str) -> tuple[ResourceDevices, PluginDevice]:
        if pool != self.node_name:
            raise ClaimError(f"device {device} (request {request_name}) is in pool {pool!r}, another node's; this "
                             f"node's pool is {self.node_name!r}: the claim was allocated for another node")
        found = self._devices.get(device)
        if found is None:
            raise ClaimError(f"device {device} (request {request_name}) is not among this node's devices now (unplugged, "
                             "or renamed: a USB device that re-enumerated on another port); delete the pod to "
                             "have a device allocated again")
        state, plugin_device = found
        if not plugin_device.healthy:
            raise ClaimError(f"device {device} (request {request_name}) is not ready: {plugin_device.why}")
        if not plugin_device.nodes:
            raise ClaimError(f"device {device} (request {request_name}) has no device node to pass")
        return state, plugin_device

    def _answer(self, uid: str, entry: Prepared) -> list[tuple[str, str, str, list[str]]]:
        return [(request_name, pool, device, [cdi.qualified(cdi.cdi_name(uid, device))])
                for request_name, pool, device, _share in entry.results]

    def _write_spec(self, uid: str, entry: Prepared) -> None:
        path = cdi.spec_path(self.cdi_dir, uid)
        try:
            cdi.write_atomic(path, json.dumps(entry.spec, indent=1, sort_keys=True).encode())
        except OSError as err:
            raise ClaimError(f"cannot write its CDI spec {path}: {err.strerror or err} (is {self.cdi_dir} read-only "
                             "or full?); nothing prepared, kubelet retries") from err

    def _ensure_spec(self, uid: str, entry: Prepared) -> None:
        if entry.results and not os.path.exists(cdi.spec_path(self.cdi_dir, uid)):
            self._write_spec(uid, entry)

    def _save_checkpoint(self, uid: str) -> None:
        data = {"claims": {u: p.as_dict() for u, p in sorted(self._prepared.items())}}
        try:
            cdi.write_atomic(self.checkpoint_path, json.dumps(data, sort_keys=True).encode(), mode=0o600)
        except OSError as err:
            self._prepared.pop(uid, None)
            with contextlib.suppress(OSError):
                cdi.remove_spec(self.cdi_dir, uid)
            raise ClaimError(f"cannot write the checkpoint {self.checkpoint_path}: {err.strerror or err}; nothing "
                             "prepared, kubelet retries") from err

    def unprepare(self, request: v1_pb2.NodeUnprepareResourcesRequest) -> v1_pb2.NodeUnprepareResourcesResponse:
        out = v1_pb2.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer = out.claims[claim.uid]
            if not _UID.fullmatch(claim.uid):  # no file of ours can carry it: nothing to undo
                self._observe("unprepare", "unprepared")
                continue
            with self._lock:
                try:
                    cdi.remove_spec(self.cdi_dir, claim.uid)
                except OSError as err:
                    answer.error = (f"ResourceClaim {claim.namespace}/{claim.name} ({claim.uid}): cannot remove its "
                                    f"CDI spec: {err.strerror or err}; kubelet retries")
                    self._observe("unprepare", "error")
                    continue
                self._verified.discard(claim.uid)
                if self._prepared.pop(claim.uid, None) is not None:
                    data = {"claims": {u: p.as_dict() for u, p in sorted(self._prepared.items())}}
                    try:
                        cdi.write_atomic(self.checkpoint_path, json.dumps(data, sort_keys=True).encode(), mode=0o600)
                    except OSError as err:  # the spec is gone; a stale entry only costs a re-read on prepare
                        log.warning("cannot write the DRA checkpoint %s: %s", self.checkpoint_path, err,
                                    extra={"event": "dra-checkpoint"})
            self._observe("unprepare", "unprepared")
        return out

    def prepared(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._prepared)


def _shown(results: tuple[tuple[str, str, str, str], ...]) -> str:
    return ", ".join(f"{pool}/{device}" + (f" (share {share})" if share else "")
                     for _r, pool, device, share in results) or "none of ours"


class _Registration(reg_grpc.RegistrationServicer):
    def __init__(self, owner: KubeletPlugin) -> None:
        self.owner = owner

    def GetInfo(self, request: reg_pb2.InfoRequest, context: grpc.ServicerContext) -> reg_pb2.PluginInfo:
        return reg_pb2.PluginInfo(type=PLUGIN_TYPE, name=DRIVER, endpoint=self.owner.socket_path,
                                  supported_versions=list(SERVICES))

    def NotifyRegistrationStatus(self, request: reg_pb2.RegistrationStatus,
                                 context: grpc.ServicerContext) -> reg_pb2.RegistrationStatusResponse:
        self.owner.registration_status.append((request.plugin_registered, request.error))
        if request.plugin_registered:
            log.info("kubelet registered DRA driver %s", DRIVER, extra={"event": "dra-plugin-registered"})
            self.owner._observe("registration", "registered")
        else:
            log.warning("kubelet refused DRA driver %s: %s", DRIVER, request.error,
                        extra={"event": "dra-plugin-registered"})
            self.owner._observe("registration", "failed")
        return reg_pb2.RegistrationStatusResponse()


class _V1(v1_grpc.DRAPluginServicer):
    def __init__(self, owner: KubeletPlugin) -> None:
        self.owner = owner

    def NodePrepareResources(self, request: v1_pb2.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext) -> v1_pb2.NodePrepareResourcesResponse:
        return self.owner.prepare(request)

    def NodeUnprepareResources(self, request: v1_pb2.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext) -> v1_pb2.NodeUnprepareResourcesResponse:
        return self.owner.unprepare(request)


class _V1beta1(v1beta1_grpc.DRAPluginServicer):
    """v1beta1's messages are v1's on the wire (same fields and numbers, tests/dra/plugin/test_api.py)."""

    def __init__(self, owner: KubeletPlugin) -> None:
        self.owner = owner

    def NodePrepareResources(self, request: v1beta1_pb2.NodePrepareResourcesRequest,
                             context: grpc.ServicerContext) -> v1beta1_pb2.NodePrepareResourcesResponse:
        answer = self.owner.prepare(v1_pb2.NodePrepareResourcesRequest.FromString(request.SerializeToString()))
        return v1beta1_pb2.NodePrepareResourcesResponse.FromString(answer.SerializeToString())

    def NodeUnprepareResources(self, request: v1beta1_pb2.NodeUnprepareResourcesRequest,
                               context: grpc.ServicerContext) -> v1beta1_pb2.NodeUnprepareResourcesResponse:
        answer = self.owner.unprepare(v1_pb2.NodeUnprepareResourcesRequest.FromString(request.SerializeToString()))
        return v1beta1_pb2.NodeUnprepareResourcesResponse.FromString(answer.SerializeToString())
