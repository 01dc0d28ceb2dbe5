"""Pod writes as kube-apiserver's pod registry makes them: create, PATCH (all three patch
types) and PUT of ``/api/v1/namespaces/{ns}/pods/{name}``.

Each behaviour and its source (kubernetes/kubernetes):

* create: system fields (uid, resourceVersion, creationTimestamp) are the server's
  (apiserver ``rest.FillObjectMetaSystemFields``); the strategy's ``PrepareForCreate`` (``pkg/registry/core/pod/strategy.go``, 008b3652)
  resets ``status`` to ``phase: Pending``, sets ``metadata.generation: 1`` and, when the pod has
  scheduling gates, the condition ``PodScheduled=False`` reason ``SchedulingGated``
  (``applySchedulingGatedCondition``); then ``ValidatePodCreate`` (``pod_validation``);
* defaults (``pkg/apis/core/v1/defaults.go``): ``imagePullPolicy`` ``Always`` for a ``:latest``
  or untagged image without digest, else ``IfNotPresent``; ``restartPolicy: Always``,
  ``dnsPolicy: ClusterFirst``, ``schedulerName: default-scheduler``,
  ``terminationGracePeriodSeconds: 30``;
* update: ``PrepareForUpdate`` keeps the stored ``status`` and bumps ``metadata.generation``
  when the spec changed (``updatePodGeneration``); ``ValidatePodUpdate`` (``pod_validation``);
* ``metadata.resourceVersion`` in the body is a precondition: 409 Conflict.

Not modelled: ``status.qosClass``, the status, binding, ephemeral-container and resize
subresources, and every defaulted field not listed above.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tests.support import patching, pod_validation, schema
from tests.support.apiserver import ApiError, decode_error, invalid_error, status_body
from tests.support.store import Conflict, now_stamp

if TYPE_CHECKING:
    from tests.support.apiserver import FakeApiServer

Json = dict[str, Any]
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def default_pull_policy(image: str) -> str:
    """``SetDefaults_Container``: ``Always`` when ``parsers.ParseImageName`` gives the tag
    ``latest`` (an image without tag and digest gets ``latest``), else ``IfNotPresent``."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    tag = last.rpartition(":")[2] if ":" in last else ""
    if not tag and not digest:
        tag = "latest"
    return "Always" if tag == "latest" else "IfNotPresent"


def apply_defaults(pod: Json) -> Json:
    spec = pod.setdefault("spec", {})
    for key, value in (("restartPolicy", "Always"), ("dnsPolicy", "ClusterFirst"),
                       ("schedulerName", "default-scheduler"), ("terminationGracePeriodSeconds", 30)):
        spec.setdefault(key, value)
    for kind in ("containers", "initContainers"):
        for container in spec.get(kind) or []:
            if isinstance(container, dict) and not container.get("imagePullPolicy"):
                container["imagePullPolicy"] = default_pull_policy(str(container.get("image", "")))
    return pod


def _decoded(pod: Any, put_body: Any = None) -> Json:
    if not isinstance(pod, dict) or not isinstance(pod.get("metadata", {}), dict):
        raise ApiError(400, status_body(400, "the body of the request must be a Pod object"))
    problem = schema.type_problem(pod, "V1Pod")
    if problem:
        raise decode_error(problem, pod, put_body=put_body)
    pruned: Json = schema.prune(pod, "V1Pod")
    pruned["kind"], pruned["apiVersion"] = "Pod", "v1"
    spec = pruned.get("spec") or {}
    for key in [k for k, v in spec.items() if v is None or v == [] or (v == {} and k in ("nodeSelector", "overhead"))]:
        del spec[key]  # Go omitempty: nil pointers, empty slices and maps vanish (an empty struct stays)
    return apply_defaults(pruned)


def prepare_create(pod: Json) -> Json:
    """``PrepareForCreate``: status reset, generation 1, the ``SchedulingGated`` condition."""
    pod["metadata"]["generation"] = 1
    status: Json = {"phase": "Pending"}
    if (pod.get("spec") or {}).get("schedulingGates"):
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                 "message": GATED_MESSAGE, "lastProbeTime": None, "lastTransitionTime": now_stamp()}]
    pod["status"] = status
    return pod


def create(server: FakeApiServer, namespace: str, body: Any, dry_run: bool) -> tuple[int, Json]:
    pod = _decoded(copy.deepcopy(body), put_body=body)
    meta = pod.setdefault("metadata", {})
    if meta.get("namespace") not in (None, "", namespace):
        raise ApiError(400, status_body(400, "the namespace of the provided object does not match the namespace "
                                             "sent on the request"))
    meta["namespace"] = namespace
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = server.generated_name(str(meta["generateName"]))
    if not meta.get("name"):
        raise invalid_error("Pod", "", [pod_validation.required("metadata.name", "name or generateName is required")])
    for key in ("resourceVersion", "uid", "creationTimestamp"):
        meta.pop(key, None)  # FillObjectMetaSystemFields: the server sets them
    prepare_create(pod)
    causes = pod_validation.validate_create(pod)
    if causes:
        raise invalid_error("Pod", meta["name"], causes)
    if dry_run:
        return 201, pod
    return 201, server.store.create("pods", pod)


def update(server: FakeApiServer, namespace: str, name: str, compute: Callable[[Json], Any], dry_run: bool,
           put_body: Any = None) -> tuple[int, Json]:
    """One update through the strategy: ``compute`` turns the stored pod into the wanted one."""
    def mutate(current: Json) -> Json:
        before = copy.deepcopy(current)
        candidate = _decoded(compute(current), put_body)
        wanted_rv = (candidate.get("metadata") or {}).get("resourceVersion")
        if wanted_rv not in (None, "") and str(wanted_rv) != before["metadata"]["resourceVersion"]:
            raise Conflict("pods", name)
        if candidate["metadata"].get("name", name) != name:
            raise ApiError(400, status_body(400, f"the name of the object ({candidate['metadata']['name']}) does not "
                                                 f"match the name on the URL ({name})"))
        candidate["status"] = copy.deepcopy(before.get("status") or {})
        generation = int(before["metadata"].get("generation") or 1)
        changed = pod_validation.semantic(candidate.get("spec")) != pod_validation.semantic(before.get("spec"))
        candidate["metadata"]["generation"] = generation + 1 if changed else generation
        causes = pod_validation.validate_update(candidate, before)
        if causes:
            raise invalid_error("Pod", name, causes)
        return candidate

    try:
        if dry_run:
            with server.store.lock:
                return 200, mutate(server.store.get("pods", name, namespace))
        return 200, server.store.update("pods", name, mutate, namespace)[0]
    except Conflict as err:
        raise ApiError(409, status_body(409, str(err), name=name, kind="pods")) from err


def route(server: FakeApiServer, method: str, parts: list[str], query: Mapping[str, str], body: Any,
          content_type: str) -> tuple[int, Any] | None:
    """Pod create/PATCH/PUT; everything else about pods is served by the generic handler."""
    if len(parts) < 5 or parts[:3] != ["api", "v1", "namespaces"] or parts[4] != "pods":
        return None
    namespace, rest, dry_run = parts[3], parts[5:], query.get("dryRun") == "All"
    if not rest and method == "POST":
        return create(server, namespace, body, dry_run)
    if len(rest) == 1 and method == "PATCH":
        return update(server, namespace, rest[0], lambda current: patching.apply(content_type, current, body), dry_run)
    if len(rest) == 1 and method == "PUT":
        return update(server, namespace, rest[0], lambda _current: copy.deepcopy(body), dry_run, put_body=body)
    return None
