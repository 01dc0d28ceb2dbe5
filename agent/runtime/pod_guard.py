"""Optional pod guard (``--pod-guard``, ``--evict-orphans``): hardware left, what about its pods?

When a label this agent owned disappears after rediscovery (the device was unplugged), pods
already running here that *required* it keep running: nodeAffinity is
IgnoredDuringExecution. The guard lists the pods bound to this node
(``fieldSelector=spec.nodeName=<node>``), keeps those whose required placement mentions a
removed label and no longer matches the node's labels (``affinity.pod_fits_node``), records
a Warning Event on each, and with ``evict_orphans`` asks the Eviction API (policy/v1) to
evict them, so PodDisruptionBudgets are honoured (a 429 from a PDB is logged, not retried
here; the next hotplug or resync checks again).

Finished pods (Succeeded/Failed), pods being deleted and pods with a spec the scheduler
would not accept are left alone. Needs ``deploy/pod-guard-rbac.yaml``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.kube.affinity import pod_fits_node, referenced_label_keys
from agent.kube.events import EventPoster, Involved, Reporter, event_body
from agent.reconcile.events import COMPONENT
from agent.reconcile.node_api import DEFAULT_REQUEST_TIMEOUT, NodeApi, NodeApiError, classify

log = logging.getLogger(__name__)

REASON_ORPHANED = "NodeFeatureLost"
REASON_EVICTED = "EvictedNodeFeatureLost"


@dataclass(frozen=True)
class Orphan:
    namespace: str
    name: str
    uid: str
    missing: tuple[str, ...]
    evicted: bool = False
    error: str = ""


class PodGuard:
    def __init__(self, api: NodeApi, node_name: str, *, evict: bool = False) -> None:
        self.api = api
        self.node_name = node_name
        self.evict = evict
        self._reporter = Reporter(COMPONENT, node_name, host=node_name)
        self._events = EventPoster(api.create_event, node=node_name)

    def _pods(self) -> list[dict[str, Any]]:
        try:
            # the raw urllib3 response (``_preload_content=False``), not the model the stubs name
            response: Any = self.api.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={self.node_name}", _preload_content=False,
                _request_timeout=DEFAULT_REQUEST_TIMEOUT)
            body = json.loads(response.data)
        except Exception as exc:
            raise classify(f"LIST pods on {self.node_name}", exc) from exc
        items = body.get("items") if isinstance(body, dict) else None
        return [p for p in items or [] if isinstance(p, dict)]

    def check(self, removed_labels: Iterable[str], node_labels: Mapping[str, str]) -> list[Orphan]:
        """Find, report (and maybe evict) pods that depended on ``removed_labels``. Never raises."""
        removed = frozenset(removed_labels)
        if not removed:
            return []
        try:
            pods = self._pods()
        except (NodeApiError, TypeError) as err:
            log.error("pod guard: cannot list pods on node %s: %s", self.node_name, err,
                      extra={"node": self.node_name, "event": "pod-guard-error"})
            return []
        orphans = []
        for pod in pods:
            meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed") or meta.get("deletionTimestamp"):
                continue
            if spec.get("nodeName") != self.node_name:
                continue  # a server ignoring the field selector
            missing = sorted(referenced_label_keys(spec) & removed)
            if not missing or pod_fits_node(spec, node_labels, self.node_name) is not False:
                continue
            orphans.append(self._handle(str(meta.get("namespace") or "default"), str(meta.get("name") or ""),
                                        str(meta.get("uid") or ""), tuple(missing)))
        return orphans

    def _handle(self, namespace: str, name: str, uid: str, missing: tuple[str, ...]) -> Orphan:
        text = (f"pod {namespace}/{name} requires node label(s) {', '.join(missing)}, which node "
                f"{self.node_name} lost (hardware removed)")
        log.warning("pod guard: %s", text, extra={"node": self.node_name, "event": "pod-orphaned", "change": f"{namespace}/{name}"})
        evicted, error = False, ""
        if self.evict:
            try:
                eviction: Any = {"apiVersion": "policy/v1", "kind": "Eviction",  # the client sends dicts as they are
                                 "metadata": {"name": name, "namespace": namespace}}
                self.api.core.create_namespaced_pod_eviction(
                    name, namespace, eviction,
                    _preload_content=False, _request_timeout=DEFAULT_REQUEST_TIMEOUT)
                evicted = True
                log.warning("pod guard: evicted %s/%s", namespace, name,
                            extra={"node": self.node_name, "event": "pod-evicted", "change": f"{namespace}/{name}"})
            except Exception as exc:  # noqa: BLE001 - classified when an API error, reported either way
                err = classify(f"EVICT pod {namespace}/{name}", exc) if _api_error(exc) else exc
                error = str(err)
                log.error("pod guard: eviction of %s/%s failed: %s", namespace, name, error,
                          extra={"node": self.node_name, "event": "pod-evict-failed"})
        reason = REASON_EVICTED if evicted else REASON_ORPHANED
        self._event(namespace, name, uid, reason, text + ("; evicted" if evicted else ""))
        return Orphan(namespace, name, uid, missing, evicted, error)

    def _event(self, namespace: str, name: str, uid: str, reason: str, message: str) -> None:
        self._events.post(event_body(Involved("Pod", name, namespace, uid), reason, message, "Warning", self._reporter))


def _api_error(exc: BaseException) -> bool:
    try:
        classify("x", exc)
        return True
    except TypeError:
        return False
