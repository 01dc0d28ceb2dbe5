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
  name another device); at most 32 attributes + capacities per device (``ResourceSliceMaxAttributesAndCapacitiesPerDevice``):
  past it the last in ``KEEP_ORDER`` go (``bounded``). What is left out, and why, is in
  ``Published.dropped`` (the publisher logs it once per change, a metric and a Warning);
- a device that is not ready (``PluginDevice.why``): with device taints (``taints=True``, the
  server's ``DRADeviceTaints``) published with the taint ``node-feature-agent.io/not-ready``
  (``NoSchedule``), so the scheduler does not allocate it; without them left out, and
  ``left_out`` says why (``explain`` prints it).

The writer (``SliceWriter.sync``) compares the wanted devices with this node's slices of this
driver as the watch holds them (``agent.dra.watched``: LIST + WATCH with the field selector
``spec.nodeName``, ``spec.driver``), by content, not generation: a restarted agent finds its
slices as it left them and writes nothing, and a sync with nothing changed makes no request.
Only on a difference it writes: the pool's generation one above the highest it saw, each slice
replaced in place with the resourceVersion it watched (a 409 or 404: ``Refused``, retried once
the watch shows the slice's newer version), new ones created, extra ones deleted. A slice that
names another driver or node is never touched, whatever the server sent. Before the first LIST,
while the watch cannot be read, or while a write of ours has not come back through it, nothing
is written (``NotYet``, ``ReadFailed``).
"""

from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubernetes.client.exceptions import ApiException

from agent.deviceplugin.model import PluginDevice, ResourceDevices
from agent.dra.names import DRIVER, device_name
from agent.dra.watched import NotYet, ReadFailed, WatchedSlices, slices_path

__all__ = ["NotYet", "ReadFailed", "Refused", "SliceWriter", "chunks", "published_devices"]

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


def _valid_name(name: str) -> bool:
    ident = name.rpartition("/")[2]
    return bool(_C_IDENTIFIER.fullmatch(ident)) and len(ident) <= MAX_ID


#: which attributes a device keeps first when it has more than 32 attributes + capacities: what
#: the DeviceClasses select on and the plugin names devices by, then the capacities (by name),
#: then the standard attributes, then the host's; any other attribute after these, by name
KEEP_ORDER = ("class", "resource", "stableID", "ready", "replica", "@capacity", f"{STANDARD}/pciBusID",
              f"{STANDARD}/pcieRoot", f"{STANDARD}/numaNode", *_HOST_NAMES.values())
TOO_LONG = "too-long"
PAST_BOUND = "bound"
INVALID_NAME = "invalid-name"
#: why an attribute was left out, as the operator reads it (log, Event, ``explain``)
DROP_WHY = {TOO_LONG: "a value longer than 64 bytes", PAST_BOUND: "past 32 attributes + capacities",
            INVALID_NAME: "not a valid attribute name"}


def dropped_text(lost: Mapping[str, str]) -> str:
    return ", ".join(f"{name} ({DROP_WHY.get(why, why)})" for name, why in sorted(lost.items()))


def device_attributes(resource: str, device: PluginDevice, replica: int,
                      dropped: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """The attributes of one published device (each valid by the API's rules); those left out
    go to ``dropped`` (name -> ``TOO_LONG``, ``INVALID_NAME``)."""
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
    kept = {}
    for key, value in attrs.items():
        why = INVALID_NAME if not _valid_name(key) else \
            TOO_LONG if len(str(value.get("string", "")).encode()) > MAX_VALUE else None
        if why is None:
            kept[key] = value
        elif dropped is not None:
            dropped[key] = why
    return dict(sorted(kept.items()))


def bounded(entry: dict[str, Any], dropped: dict[str, str]) -> dict[str, Any]:
    """``entry`` with at most 32 attributes + capacities: the last in ``KEEP_ORDER`` go (into
    ``dropped`` as ``PAST_BOUND``), the same ones every time for the same device."""
    attrs, capacity = entry.get("attributes") or {}, entry.get("capacity") or {}
    if len(attrs) + len(capacity) <= MAX_ATTRIBUTES:
        return entry

    def rank(item: tuple[str, str]) -> tuple[int, str]:
        kind, name = item
        key = "@capacity" if kind == "capacity" else name
        return (KEEP_ORDER.index(key) if key in KEEP_ORDER else len(KEEP_ORDER), name)

    ranked = sorted([("attributes", n) for n in attrs] + [("capacity", n) for n in capacity], key=rank)
    for _kind, name in ranked[MAX_ATTRIBUTES:]:
        dropped[name] = PAST_BOUND
    keep = ranked[:MAX_ATTRIBUTES]
    out = dict(entry, attributes={n: attrs[n] for k, n in sorted(keep) if k == "attributes"})
    if capacity:
        out["capacity"] = {n: capacity[n] for k, n in sorted(keep) if k == "capacity"}
    return out


@dataclass(frozen=True)
class Published:
    """What one pass publishes: the devices, and those left out with the reason."""

    devices: tuple[dict[str, Any], ...]
    left_out: Mapping[str, str]  # device name -> why
    where: Mapping[str, str]  # device name -> resource
    dropped: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # device -> {attribute: why}


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
    dropped: dict[str, dict[str, str]] = {}
    for resource in sorted(resources):
        state = resources[resource]
        sharing = shared(state.shares) if consumable and state.shares > 1 else {}
        for device in state.devices:
            for replica in range(1 if sharing else max(1, state.shares)):
                name = device_name(resource, device.id, replica)
                where[name] = resource
                lost: dict[str, str] = {}
                entry: dict[str, Any] = {"name": name, "attributes": device_attributes(resource, device, replica, lost),
                                         **copy.deepcopy(sharing)}
                if not device.healthy:
                    if not taints:
                        left_out[name] = device.why
                        continue
                    entry["taints"] = [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]
                devices.append(bounded(entry, lost))
                if lost:
                    dropped[name] = lost
    devices.sort(key=lambda d: d["name"])
    return Published(tuple(devices), left_out, where, dropped)


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


class Refused(Exception):
    """A write on the version watched was refused (409 Conflict, 404): the watch is behind the
    server; the sync is retried once it shows the slice's newer version."""


class SliceWriter:
    """Keeps one node's ResourceSlices of this driver equal to what ``sync`` is given.

    ``api_client``: a ``kubernetes.client.ApiClient``; ``version``: ``v1`` or ``v1beta1``;
    ``watched``: the node's slices as a watch holds them (one is made, not started, when not
    given). ``on_write(op)`` is told of each write (create, update, delete)."""

    def __init__(self, api_client: Any, node: Node, version: str, watched: WatchedSlices | None = None, *,
                 on_write: Callable[[str], None] = lambda _op: None, timeout: float = 10.0) -> None:
        if version not in ("v1", "v1beta1"):
            raise ValueError(f"resource.k8s.io version {version!r} is not served by this writer")
        self.api_client = api_client
        self.node = node
        self.version = version
        self.watched = watched if watched is not None else WatchedSlices(api_client, node.name, version)
        self.on_write = on_write
        self.timeout = timeout
        self._base = slices_path(version)

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
        owners = [{o.get("uid") for o in (s["metadata"].get("ownerReferences") or []) if isinstance(o, Mapping)}
                  for s in current]
        return all(self.node.uid in uids for uids in owners)

    def unchanged(self, current: list[dict[str, Any]], wanted: list[list[dict[str, Any]]]) -> bool:
        """Whether the slices hold exactly the wanted devices (content, not generation) in one
        whole pool."""
        if len(current) != len(wanted) or not self._pool_whole(current, len(wanted)):
            return False

        def content(devices: Any) -> list[str]:
            return sorted(json.dumps(_normal_device(d), sort_keys=True)
                          for d in (devices if isinstance(devices, list) else []))

        have = sorted(content(s["spec"].get("devices")) for s in current)
        return have == sorted(content(chunk) for chunk in wanted)

    def differs(self, devices: Sequence[dict[str, Any]]) -> bool:
        """Whether a sync of ``devices`` would write (no request); ``NotYet``, ``ReadFailed``."""
        return not self.unchanged(self.watched.state(), chunks(devices))

    def sync(self, devices: Sequence[dict[str, Any]]) -> int:
        """Make the node's slices hold ``devices``; returns the writes made (0 when unchanged:
        no request). ``NotYet``/``ReadFailed`` (nothing written) when the watched slices cannot
        be relied on; ``Refused`` when a write met a newer version than the watch had."""
        current = self.watched.state()
        wanted = chunks(devices)
        if self.unchanged(current, wanted):
            return 0
        generation = max([_int((s["spec"].get("pool") or {}).get("generation")) for s in current] + [-1]) + 1
        writes = 0
        for index, chunk in enumerate(wanted):
            body = self._slice(chunk, generation, len(wanted))
            if index < len(current):
                old = current[index]["metadata"]
                body["metadata"] = dict(body["metadata"], name=old["name"], resourceVersion=old["resourceVersion"])
                del body["metadata"]["generateName"]
                answer = self._replace(old, body)
                self.watched.wrote(old["name"], answer)
                self.on_write("update")
            else:
                answer = self._call("POST", self._base, body)
                self.watched.wrote(str(((answer or {}).get("metadata") or {}).get("name") or ""), answer)
                self.on_write("create")
            writes += 1
        for extra in current[len(wanted):]:
            self.delete(extra)
            writes += 1
        return writes

    def _replace(self, old: Mapping[str, Any], body: Any) -> Any:
        """A PUT on the version watched; 409/404 -> ``Refused`` (the watch is behind)."""
        try:
            return self._call("PUT", f"{self._base}/{old['name']}", body)
        except ApiException as exc:
            if exc.status in (404, 409):
                self.watched.refused(str(old["name"]), str(old.get("resourceVersion") or ""))
                raise Refused(f"updating ResourceSlice {old['name']}: HTTP {exc.status}; "
                              "waiting for the watch to show its current version") from exc
            raise

    def delete(self, item: dict[str, Any]) -> None:
        spec = item.get("spec") or {}
        if spec.get("driver") != DRIVER or spec.get("nodeName") != self.node.name:
            raise ValueError("refusing to delete a ResourceSlice of another driver or node")
        meta = item["metadata"]
        try:
            self._call("DELETE", f"{self._base}/{meta['name']}")
        except ApiException as exc:
            if exc.status != 404:
                raise  # 404: gone already, as wanted
        self.watched.wrote(str(meta["name"]), None, deleted=True)
        self.on_write("delete")

    def delete_all(self) -> int:
        """``clean``: one LIST, then delete every slice of this node and driver; returns how many."""
        current = self.watched.list_once()
        for item in current:
            self.delete(item)
        return len(current)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
