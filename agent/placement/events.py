"""Kubernetes Events on pods, so ``kubectl describe pod`` says what placement did and why.

One POST per Event (core/v1, in the pod's namespace, ``involvedObject`` the pod with its uid).
An Event that cannot be posted is logged and dropped: Events never hold up a pod.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agent.kube.events import EventPoster, Involved, Reporter, event_body
from agent.placement.kube import PlacementApi

log = logging.getLogger(__name__)
COMPONENT = "node-feature-agent-placement"


class PodEvents:
    def __init__(self, api: PlacementApi, instance: str) -> None:
        self.api, self.instance = api, instance
        self._reporter = Reporter(COMPONENT, instance)
        self._poster = EventPoster(api.create_event)

    @property
    def posted(self) -> int:
        return self._poster.posted

    def post(self, pod: Mapping[str, Any], reason: str, message: str, event_type: str = "Normal") -> None:
        """Post the Event and log it at its own level: a Warning Event is a WARNING record."""
        body = event_body(Involved.of("Pod", pod), reason, message, event_type, self._reporter)
        involved = body["involvedObject"]
        log.log(logging.WARNING if event_type == "Warning" else logging.INFO, "pod %s/%s: %s: %s",
                involved["namespace"], involved["name"], reason, body["message"], extra={"event": reason})
        self._poster.post(body)
