"""Kubernetes Events on pods, so ``kubectl describe pod`` says what placement did and why.

One POST per Event (core/v1, in the pod's namespace, ``involvedObject`` the pod with its uid).
An Event that cannot be posted is logged and dropped: Events never hold up a pod.
"""

from __future__ import annotations

import datetime as _dt
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from agent.placement.kube import PlacementApi

log = logging.getLogger(__name__)
COMPONENT = "node-feature-agent-placement"
MAX_MESSAGE = 1024


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(pod: Mapping[str, Any], reason: str, message: str, event_type: str, instance: str) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    stamp = _now()
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta.get('name', 'pod')}.{secrets.token_hex(8)}", "namespace": meta.get("namespace", "")},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": meta.get("namespace", ""),
                           "name": meta.get("name", ""), "uid": meta.get("uid", "")},
        "reason": reason, "message": message[:MAX_MESSAGE], "type": event_type,
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT, "reportingInstance": instance,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


class PodEvents:
    def __init__(self, api: PlacementApi, instance: str) -> None:
        self.api, self.instance = api, instance
        self.posted = 0

    def post(self, pod: Mapping[str, Any], reason: str, message: str, event_type: str = "Normal") -> None:
        """Post the Event and log it at its own level: a Warning Event is a WARNING record."""
        body = event_body(pod, reason, message, event_type, self.instance)
        namespace, name = body["involvedObject"]["namespace"], body["involvedObject"]["name"]
        log.log(logging.WARNING if event_type == "Warning" else logging.INFO, "pod %s/%s: %s: %s", namespace, name,
                reason, body["message"], extra={"event": reason})
        try:
            self.api.create_event(str(body["metadata"]["namespace"]), body)
            self.posted += 1
        except Exception as exc:  # noqa: BLE001 - an Event is never worth failing a pod for
            log.warning("event %s on pod %s/%s not posted: %s", reason, body["involvedObject"]["namespace"],
                        body["involvedObject"]["name"], " ".join(str(exc).split())[:200])
