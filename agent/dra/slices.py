"""The node's ResourceSlices, built from the catalogue's devices, and the writer that keeps
them on the API server with no write unless their content changed.

Shape (kubernetes/kubernetes ``staging/src/k8s.io/api/resource/v1/types.go``; the limits are
the API server's own, ``pkg/apis/resource/validation/validation.go``):

- ``spec.driver`` ``node-feature-agent.io``, ``spec.nodeName`` the node, ``spec.pool``
  ``{name: node, generation, resourceSliceCount}``; an ownerReference to the Node (its uid), so
  the slices go with the Node;
- one device per device instance, named by ``agent.dra.names.device_name``; a device the
  catalogue shares N ways (``ResourceDevices.shares``) is, where the server has consumable
  capacity (``consumable=True``, ``agent.dra.sharing``), that one device with
  ``allowMultipleAllocations: true`` and the capacity ``shares`` of value N whose
  ``requestPolicy`` makes every allocation take exactly 1 (``default: 1``, ``validValues:
  [1]``), so the scheduler gives it to at most N claims at once; elsewhere N devices, the
  replicas ``-r<k>``; at most 128 devices per slice (``ResourceSliceMaxDevices``), 64 when a
  device carries a taint (``ResourceSliceMaxDevicesWithAdvancedFeatures``);
- attributes: the standard ``resource.kubernetes.io/pciBusID``, ``pcieRoot``, ``numaNode``
  where the host tells them, and the driver's own (no domain: the driver's): ``class`` (the
  resource's last path segment, what the DeviceClasses select on), ``resource``, ``bus``,
  ``vendorID``, ``productID``, ``pciClass``, ``usbPort``, ``serial``, ``kernelDriver``,
  ``ready``, ``stableID``, ``replica``. Every name is a C identifier of at most 32 characters;
  a string the host gives that is longer than 64 bytes is left out (a truncated serial would
  name another device); at most 32 attributes and capacities per device;
- a device that is not ready (``PluginDevice.why``): with device taints (``taints=True``, the
  server's ``DRADeviceTaints``) published with the taint ``node-feature-agent.io/not-ready``
  (``NoSchedule``), so the scheduler does not allocate it; without them left out, and
  ``left_out`` says why (``explain`` prints it).

The writer (``SliceWriter.sync``) lists this node's slices of this driver (field selector
``spec.nodeName``, ``spec.driver``), compares their devices with the wanted ones (content, not
generation: a restarted agent finds its slices as it left them and writes nothing), and only
on a difference writes: the pool's generation one above the highest it read, each slice
replaced in place (resourceVersion precondition), new ones created, extra ones deleted. A slice
that names another driver or node is never touched, whatever the server answered. A failed
read, or an answer that is not a ResourceSlice list, holds: nothing is written or deleted on a
list the writer could not read.
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException

from agent.deviceplugin.model import PluginDevice, ResourceDevices
from agent.dra.names import DRIVER, device_name

log = logging.getLogger(__name__)

STANDARD = "resource.kubernetes.io"
MAX_DEVICES = 128
MAX_DEVICES_TAINTED = 64
MAX_ATTRIBUTES = 32
MAX_ID = 32
MAX_VALUE = 64
NOT_READY_TAINT = f"{DRIVER}/not-ready"
SHARES = "shares"
"""The capacity a shared device's allocations consume, one each (``DeviceCapacity``,
``CapacityRequestPolicy``; KEP-5075). Its name has no domain: the driver's."""
ONE_SHARE = {"default": "1", "validValues": ["1"]}
"""A request that names no ``shares`` capacity consumes ``default`` (the allocator's
``fillEmptyRequestQuantity``); one asking for more than 1 matches no valid value and the device
is not allocated to it (``roundUpValidValues``/``violatesPolicy``, k8s.io/dynamic-resource-
allocation ``structured/internal/*/consumable_capacity.go``)."""
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# the matched device's attribute -> the slice attribute it becomes (PluginDevice.attributes)
_HOST_NAMES = {"bus": "bus", "vendor": "vendorID", "device": "productID", "class": "pciClass",
               "sysfs_name": "usbPort", "serial": "serial", "driver": "kernelDriver"}


class ReadFailed(Exception):
    """The slices could not be read; nothing is written on what was not read."""


def _valid_name(name: str) -> bool:
    ident = name.rpartition("/")[2]
    return bool(_C_IDENTIFIER.fullmatch(ident)) and len(ident) <= MAX_ID


def device_attributes(resource: str, device: PluginDevice, replica: int,
                      room: int = MAX_ATTRIBUTES) -> dict[str, dict[str, Any]]:
    """The attributes of one published device (each valid by the API's rules), at most ``room``
    (what its capacities leave of the 32)."""
    host = dict(device.attributes)
    attrs: dict[str, dict[str, Any]] = {
        "class": {"string": resource.rsplit("/", 1)[-1]},
        "resource": {"string": resource},
        "stableID": {"string": device.id},
        "ready": {"bool": device.healthy},
        "replica": {"int": replica},
    }
    if host.get("bus") == "usb":
        host.pop("class", None)  # a USB class is the interface's; the catalogue matches on ids
    for key, name in _HOST_NAMES.items():
        if host.get(key):
            attrs[name] = {"string": host[key]}
    if host.get("address"):
        attrs[f"{STANDARD}/pciBusID"] = {"string": host["address"]}
    if host.get("pcie_root"):
        attrs[f"{STANDARD}/pcieRoot"] = {"string": host["pcie_root"]}
    if device.numa_node is not None:
        attrs[f"{STANDARD}/numaNode"] = {"int": device.numa_node}
    kept = {k: v for k, v in attrs.items()
            if _valid_name(k) and len(str(v.get("string", "")).encode()) <= MAX_VALUE}
    return dict(sorted(kept.items())[:room])


@dataclass(frozen=True)
class Published:
    """What one pass publishes: the devices, and those left out with the reason."""

    devices: tuple[dict[str, Any], ...]
    left_out: Mapping[str, str]  # device name -> why
    where: Mapping[str, str]  # device name -> resource


def shared(shares: int) -> dict[str, Any]:
    """The fields that make one device allocatable to ``shares`` claims at once."""
    return {"allowMultipleAllocations": True,
            "capacity": {SHARES: {"value": str(shares), "requestPolicy": dict(ONE_SHARE)}}}


def published_devices(resources: Mapping[str, ResourceDevices], *, taints: bool,
                      consumable: bool = False) -> Published:
    """``consumable``: the server keeps ``allowMultipleAllocations`` (``agent.dra.sharing``)."""
    devices: list[dict[str, Any]] = []
    left_out: dict[str, str] = {}
    where: dict[str, str] = {}
    for resource in sorted(resources):
        state = resources[resource]
        sharing = shared(state.shares) if consumable and state.shares > 1 else {}
        for device in state.devices:
            for replica in range(1 if sharing else max(1, state.shares)):
                name = device_name(resource, device.id, replica)
                where[name] = resource
                room = MAX_ATTRIBUTES - len(sharing.get("capacity", {}))
                entry: dict[str, Any] = {"name": name, "attributes": device_attributes(resource, device, replica, room),
                                         **copy.deepcopy(sharing)}
                if not device.healthy:
                    if not taints:
                        left_out[name] = device.why
                        continue
                    entry["taints"] = [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]
                devices.append(entry)
    devices.sort(key=lambda d: d["name"])
    return Published(tuple(devices), left_out, where)


def chunks(devices: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Devices in slices of at most 128 (64 when one carries a taint); none -> no slice."""
    size = MAX_DEVICES_TAINTED if any(d.get("taints") for d in devices) else MAX_DEVICES
    return [list(devices[i:i + size]) for i in range(0, len(devices), size)]


def _no_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _no_nulls(v) for k, v in value.items() if v is not None}
    return value


def _normal_device(device: Any) -> dict[str, Any]:
    """A device as compared: name, attributes, taints by (key, value, effect), whether it allows
    multiple allocations and its capacities; ``basic`` (v1beta1) unwrapped; anything the server
    adds (a taint's ``timeAdded``) ignored."""
    if not isinstance(device, Mapping):
        return {}
    body: Mapping[str, Any] = device["basic"] if isinstance(device.get("basic"), Mapping) else device
    attrs = _no_nulls({k: v for k, v in (body.get("attributes") or {}).items() if isinstance(v, Mapping)})
    taints = sorted((str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                    for t in body.get("taints") or [] if isinstance(t, Mapping))
    capacity = _no_nulls({k: v for k, v in (body.get("capacity") or {}).items() if isinstance(v, Mapping)})
    return {"name": device.get("name"), "attributes": attrs, "taints": taints,
            "allowMultipleAllocations": body.get("allowMultipleAllocations") is True, "capacity": capacity}


def _to_version(device: dict[str, Any], version: str) -> dict[str, Any]:
    if version == "v1beta1":
        return {"name": device["name"], "basic": {k: v for k, v in device.items() if k != "name"}}
    return device


@dataclass(frozen=True)
class Node:
    name: str
    uid: str


class SliceWriter:
    """Keeps one node's ResourceSlices of this driver equal to what ``sync`` is given.

    ``api_client``: a ``kubernetes.client.ApiClient``; ``version``: ``v1`` or ``v1beta1``.
    ``on_write(op)`` is told of each write (create, update, delete)."""

    def __init__(self, api_client: Any, node: Node, version: str, *,
                 on_write: Callable[[str], None] = lambda _op: None, timeout: float = 10.0) -> None:
        if version not in ("v1", "v1beta1"):
            raise ValueError(f"resource.k8s.io version {version!r} is not served by this writer")
        self.api_client = api_client
        self.node = node
        self.version = version
        self.on_write = on_write
        self.timeout = timeout
        self._base = f"/apis/resource.k8s.io/{version}/resourceslices"

    # -- the API ----------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None, query: list[tuple[str, str]] | None = None) -> Any:
        """One request as the generated client builds it (``param_serialize``: auth, headers,
        TLS from the same Configuration) without importing the generated ``ResourceV1Api``
        (memory, as ``agent.kube.light_core``); the answer's JSON, ``ApiException`` on non-2xx."""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        request = self.api_client.param_serialize(
            method=method, resource_path=path, path_params={}, query_params=query or [], header_params=headers,
            body=body, post_params=[], files={}, auth_settings=["BearerToken"], collection_formats={})
        response = self.api_client.call_api(*request, _request_timeout=self.timeout)
        data = response.read()
        if not 200 <= response.status <= 299:
            raise ApiException(status=response.status, reason=response.reason, body=data)
        return json.loads(data) if data else None

    def read(self) -> list[dict[str, Any]]:
        """This node's slices of this driver (others in the answer are dropped, never touched).
        ``ReadFailed`` when the server did not answer with a ResourceSlice list."""
        selector = f"spec.nodeName={self.node.name},spec.driver={DRIVER}"
        try:
            answer = self._call("GET", self._base, query=[("fieldSelector", selector)])
        except Exception as exc:
            raise ReadFailed(f"listing ResourceSlices failed: {exc}") from exc
        if not isinstance(answer, dict) or answer.get("kind") != "ResourceSliceList" \
                or not isinstance(answer.get("items"), list):
            raise ReadFailed("the answer to a ResourceSlice list was not a ResourceSliceList")
        mine = []
        for item in answer["items"]:
            spec = item.get("spec") if isinstance(item, dict) else None
            name = ((item or {}).get("metadata") or {}).get("name") if isinstance(item, dict) else None
            if not isinstance(spec, dict) or not isinstance(name, str):
                raise ReadFailed("a ResourceSlice in the list has no name or spec")
            if spec.get("driver") == DRIVER and spec.get("nodeName") == self.node.name:
                mine.append(item)
        return sorted(mine, key=lambda s: s["metadata"]["name"])

    # -- the sync ---------------------------------------------------------------------------
    def _slice(self, devices: list[dict[str, Any]], generation: int, count: int) -> dict[str, Any]:
        prefix = f"{self.node.name}-{DRIVER}-"[:240]
        return {"apiVersion": f"resource.k8s.io/{self.version}", "kind": "ResourceSlice",
                "metadata": {"generateName": prefix,
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.node.name,
                                                  "uid": self.node.uid, "controller": True}]},
                "spec": {"driver": DRIVER, "nodeName": self.node.name,
                         "pool": {"name": self.node.name, "generation": generation, "resourceSliceCount": count},
                         "devices": [_to_version(d, self.version) for d in devices]}}

    def _pool_whole(self, current: list[dict[str, Any]], count: int) -> bool:
        """One pool generation, the right slice count, every slice owned by this Node."""
        pools = [s["spec"].get("pool") or {} for s in current]
        if len({p.get("generation") for p in pools}) > 1 or any(p.get("resourceSliceCount") != count for p in pools):
            return False
        owners = [{o.get("uid") for o in (s["metadata"].get("ownerReferences") or [])} for s in current]
        return all(self.node.uid in uids for uids in owners)

    def unchanged(self, current: list[dict[str, Any]], wanted: list[list[dict[str, Any]]]) -> bool:
        """Whether the slices read hold exactly the wanted devices (content, not generation)
        in one whole pool."""
        if len(current) != len(wanted) or not self._pool_whole(current, len(wanted)):
            return False

        def content(devices: list[Any]) -> list[str]:
            return sorted(json.dumps(_normal_device(d), sort_keys=True) for d in devices)

        have = sorted(content(s["spec"].get("devices") or []) for s in current)
        return have == sorted(content(chunk) for chunk in wanted)

    def sync(self, devices: Sequence[dict[str, Any]]) -> int:
        """Make the node's slices hold ``devices``; returns the writes made (0 when unchanged).
        ``ReadFailed`` (nothing written) when the slices could not be read."""
        current = self.read()
        wanted = chunks(devices)
        if self.unchanged(current, wanted):
            return 0
        generation = max([int((s["spec"].get("pool") or {}).get("generation") or 0) for s in current] + [-1]) + 1
        writes = 0
        for index, chunk in enumerate(wanted):
            body = self._slice(chunk, generation, len(wanted))
            if index < len(current):
                old = current[index]["metadata"]
                body["metadata"] = dict(body["metadata"], name=old["name"], resourceVersion=old["resourceVersion"])
                del body["metadata"]["generateName"]
                self._call("PUT", f"{self._base}/{old['name']}", body)
                self.on_write("update")
            else:
                self._call("POST", self._base, body)
                self.on_write("create")
            writes += 1
        for extra in current[len(wanted):]:
            self.delete(extra)
            writes += 1
        return writes

    def delete(self, item: dict[str, Any]) -> None:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRIVER or spec.get("nodeName") != self.node.name:
            raise ValueError("refusing to delete a ResourceSlice of another driver or node")
        self._call("DELETE", f"{self._base}/{item['metadata']['name']}")
        self.on_write("delete")

    def delete_all(self) -> int:
        """``clean``: delete every slice of this node and driver; returns how many."""
        current = self.read()
        for item in current:
            self.delete(item)
        return len(current)
