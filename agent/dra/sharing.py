"""Whether the API server keeps a shared device's fields (consumable capacity, KEP-5075), so that
a device the catalogue shares N ways is published once (``agent.dra.slices.shared``) instead of
as N replica devices.

The fields belong to the ``DRAConsumableCapacity`` feature gate (alpha in 1.34, beta and on by
default in 1.36). A server with the gate off does not refuse them: its ResourceSlice strategy
drops ``allowMultipleAllocations`` and every capacity's ``requestPolicy`` on create and update
and keeps the capacity's ``value`` (``dropDisabledDRAConsumableCapacityFields``,
``pkg/registry/resource/resourceslice/strategy.go``), which leaves a device one claim can have.
Discovery does not tell either: the gate adds no resource to the group.

So the server is asked, once: a dry-run create (``?dryRun=All``) of a ResourceSlice of this node
and driver holding one shared device. A dry run passes through the same decoding,
``PrepareForCreate`` (where the fields are dropped), validation and admission as a real create
and stores nothing; an answer whose device still has ``allowMultipleAllocations: true`` means the
server keeps the fields. A create has no stored object, so the strategy's exception for a slice
that already uses the fields (``draConsumableCapacityFeatureInUse``: an update keeps them even
with the gate off) cannot make the answer say yes wrongly, as the answer of a real update could.

- yes: shared devices are published once; no: as replicas. The answer is kept for the life of
  the publisher (one probe per agent process and Node), and asked only when a device is shared;
- the request fails, or the answer is not that ResourceSlice: undetermined. ``ReadFailed`` is
  raised, so the sync is held (nothing written) and retried as a failed list is;
- a 422 (the server knows the fields but refuses the device): no, with a warning;
- ``verify``, after a write of the shared form: the slices read back must still carry the field.
  If they do not (the gate differs between the API servers of an HA control plane mid-upgrade,
  or was turned off after the probe), the answer becomes no and the caller writes the replicas,
  once.

Only ``resource.k8s.io/v1`` is asked: the writer uses ``v1beta1`` on Kubernetes 1.32-1.33 only,
which predate KEP-5075, so there the answer is no.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes.client.exceptions import ApiException

from agent.deviceplugin.model import ResourceDevices
from agent.dra.names import DRIVER
from agent.dra.slices import SHARES, Node, ReadFailed, shared

log = logging.getLogger(__name__)

Call = Callable[..., Any]  # SliceWriter._call: (method, path, body, query) -> the answer's JSON


class SharingProbe:
    def __init__(self, call: Call, node: Node, version: str) -> None:
        self.call = call
        self.node = node
        self.version = version
        self.answer: bool | None = None if version == "v1" else False

    def consumable(self, resources: Mapping[str, ResourceDevices]) -> bool:
        """Whether this pass publishes its shared devices once; asks the server the first time a
        device is shared. ``ReadFailed`` when that cannot be told now."""
        if not any(state.shares > 1 for state in resources.values()):
            return False
        if self.answer is None:
            self.answer = self._ask()
        return self.answer

    def _ask(self) -> bool:
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"generateName": f"{self.node.name}-{DRIVER}-"[:240]},
                "spec": {"driver": DRIVER, "nodeName": self.node.name,
                         "pool": {"name": self.node.name, "generation": 0, "resourceSliceCount": 1},
                         "devices": [{"name": "probe", **shared(2)}]}}
        try:
            answer = self.call("POST", "/apis/resource.k8s.io/v1/resourceslices", body, [("dryRun", "All")])
        except ApiException as exc:
            if exc.status == 422:
                log.warning("the API server refuses a shared device (%s); shared devices are published as replicas",
                            exc.body, extra={"node": self.node.name, "event": "dra-sharing"})
                return False
            raise ReadFailed(f"asking whether the API server keeps allowMultipleAllocations failed: {exc}") from exc
        except Exception as exc:  # unreachable, refused, garbage: undetermined
            raise ReadFailed(f"asking whether the API server keeps allowMultipleAllocations failed: {exc}") from exc
        spec = answer.get("spec") if isinstance(answer, dict) and answer.get("kind") == "ResourceSlice" else None
        devices = spec.get("devices") if isinstance(spec, dict) else None
        if not isinstance(devices, list) or len(devices) != 1 or not isinstance(devices[0], dict):
            raise ReadFailed("the answer to a dry-run ResourceSlice create was not that ResourceSlice")
        kept = devices[0].get("allowMultipleAllocations") is True
        log.info("the API server %s allowMultipleAllocations (DRAConsumableCapacity): a shared device is published "
                 "%s", "keeps" if kept else "drops", "once" if kept else "as one device per share",
                 extra={"node": self.node.name, "event": "dra-sharing"})
        return kept

    def verify(self, slices: Sequence[Mapping[str, Any]]) -> bool:
        """After a write of the shared form: whether the server kept it. A device with the
        ``shares`` capacity but without ``allowMultipleAllocations`` means it did not: the
        answer becomes no (the caller publishes the replicas)."""
        for item in slices:
            for device in (item.get("spec") or {}).get("devices") or []:
                body = device.get("basic", device) if isinstance(device, Mapping) else {}
                if SHARES in (body.get("capacity") or {}) and body.get("allowMultipleAllocations") is not True:
                    log.warning("the API server dropped allowMultipleAllocations from device %s after the probe said "
                                "it keeps it; shared devices are published as replicas from now on", device.get("name"),
                                extra={"node": self.node.name, "event": "dra-sharing"})
                    self.answer = False
                    return False
        return True
