"""``clean --pods``: remove our scheduling gate (and our selector label) from every pod that
carries it, and nothing else: other gates stay, no pod is deleted, no affinity is touched.

For uninstalling, or for releasing pods by hand while the controller is down (the watchdog
does the same at the deadline). All pods are listed (500 a page), not only labelled ones, so
a pod whose label was removed by hand is found too. Each write is the conditional merge patch
the controller uses; a 409 re-reads the pod and tries again (5 times).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from agent.placement import podspec
from agent.placement.kube import PlacementApi

log = logging.getLogger(__name__)
PAGE = 500
ATTEMPTS = 5


@dataclass
class CleanResult:
    released: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def gated_pods(api: PlacementApi) -> list[dict[str, object]]:
    pods: list[dict[str, object]] = []
    token = ""
    while True:
        page = api.list_pods(limit=PAGE, continue_token=token)
        pods += [p for p in page.get("items") or [] if isinstance(p, dict) and podspec.has_gate(p)]
        token = str((page.get("metadata") or {}).get("continue") or "")
        if not token:
            return pods


def release(api: PlacementApi, namespace: str, name: str) -> bool:
    """Remove our gate from one pod; True when it no longer has it."""
    from kubernetes.client.exceptions import ApiException

    for _ in range(ATTEMPTS):
        try:
            pod = api.get_pod(namespace, name)
            if not podspec.has_gate(pod):
                return True
            api.patch_pod(namespace, name, podspec.ungate_patch(pod))
            return True
        except ApiException as exc:
            if exc.status == 404:
                return True
            if exc.status != 409:
                log.warning("pod %s/%s: gate not removed (%s)", namespace, name, exc.status)
                return False
    return False


def clean_pods(api: PlacementApi) -> CleanResult:
    result = CleanResult()
    for pod in gated_pods(api):
        meta = pod.get("metadata") or {}
        assert isinstance(meta, dict)
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        (result.released if release(api, namespace, name) else result.failed).append(f"{namespace}/{name}")
    return result
