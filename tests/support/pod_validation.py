"""Pod create and update validation as kube-apiserver does it, for the fields placement touches.

Read from kubernetes/kubernetes ``pkg/apis/core/validation/validation.go`` at 000f2605
(``ValidatePodCreate``, ``ValidatePodUpdate``, ``validateSchedulingGates``,
``validateOnlyDeletedSchedulingGates``, ``validateOnlyAddedTolerations``,
``validateNodeSelectorMutation``, ``validateNodeAffinityMutation``,
``validateNodeSelectorTermHasOnlyAdditions``, ``ValidateNodeSelector``,
``ValidateNodeSelectorRequirement``, ``ValidateNodeFieldSelectorRequirement``) and the
scheduling-readiness KEPs (kubernetes/enhancements ``keps/sig-scheduling/3521-pod-scheduling-readiness``
and ``3838-pod-mutable-scheduling-directives``). Kubernetes' own ``TestValidatePodUpdate``
cases for gated pods run against it in ``tests/support_tests/test_pod_validation.py``.

Pods are plain JSON dicts (the v1 wire form); "equal" is Kubernetes' semantic equality, under
which a missing, null and empty list or map are the same.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from tests.support.validation import (
    Cause,
    label_value_problems,
    qualified_name_problems,
    validate_annotations,
    validate_labels,
)

Json = dict[str, Any]

UPDATABLE = ("`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
             "`spec.tolerations` (only additions to existing tolerations),"
             "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)")
NODE_OPS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
TERMS = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def forbidden(field: str, detail: str) -> Cause:
    return Cause("FieldValueForbidden", f"Forbidden: {detail}", field)


def required(field: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", f"Required value: {detail}" if detail else "Required value", field)


def invalid(field: str, value: Any, detail: str) -> Cause:
    """``field.Invalid``: strings quoted, anything else as Go's ``json.Marshal`` of the
    internal (untagged) struct, so keys are Go field names (``MatchExpressions``)."""
    return Cause("FieldValueInvalid", f"Invalid value: {go_value(value)}: {detail}", field)


def go_value(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(_internal(value), separators=(",", ":"))


def _internal(value: Any, in_map: bool = False) -> Any:
    """The internal Go struct's JSON: field names capitalised; a map's keys stay as they are."""
    if isinstance(value, Mapping):
        if in_map:
            return dict(sorted(value.items()))
        return {k[:1].upper() + k[1:]: _internal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_internal(v) for v in value]
    return value


def empty(value: Any) -> bool:
    return value is None or value == [] or value == {}


def semantic(value: Any) -> Any:
    """Drop missing/null/empty lists and maps: Kubernetes' semantic equality does not tell
    a nil slice or map from an empty one."""
    if isinstance(value, Mapping):
        return {k: semantic(v) for k, v in value.items() if not empty(semantic(v))}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def _spec(pod: Mapping[str, Any]) -> Json:
    spec = pod.get("spec")
    return dict(spec) if isinstance(spec, Mapping) else {}


# -- pieces of validatePodMetadataAndSpec used by placement --------------------------------------
def scheduling_gates(gates: list[Mapping[str, Any]]) -> list[Cause]:
    """``validateSchedulingGates``: qualified names, no duplicates."""
    causes: list[Cause] = []
    seen: set[str] = set()
    for index, gate in enumerate(gates):
        name = str(gate.get("name", ""))
        path = f"spec.schedulingGates[{index}]"
        causes += [invalid(path, name, p) for p in qualified_name_problems(name)]
        if name in seen:
            causes.append(Cause("FieldValueDuplicate", f"Duplicate value: {json.dumps(name)}", path))
        seen.add(name)
    return causes


def _requirement(req: Mapping[str, Any], path: str) -> list[Cause]:
    """``ValidateNodeSelectorRequirement``."""
    causes: list[Cause] = []
    op, values = req.get("operator", ""), list(req.get("values") or [])
    if op in ("In", "NotIn"):
        if not values:
            causes.append(required(f"{path}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif op in ("Exists", "DoesNotExist"):
        if values:
            causes.append(forbidden(f"{path}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"))
    elif op in ("Gt", "Lt"):
        if len(values) != 1:
            causes.append(required(f"{path}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'"))
    else:
        causes.append(invalid(f"{path}.operator", op, "not a valid selector operator"))
    key = str(req.get("key", ""))
    causes += [invalid(f"{path}.key", key, p) for p in qualified_name_problems(key)]
    for index, value in enumerate(values):
        causes += [invalid(f"{path}.values[{index}]", value, p) for p in label_value_problems(str(value))]
    return causes


def _field_requirement(req: Mapping[str, Any], path: str) -> list[Cause]:
    """``ValidateNodeFieldSelectorRequirement``: only ``metadata.name``, In/NotIn one value."""
    causes: list[Cause] = []
    if req.get("operator") in ("In", "NotIn"):
        if len(req.get("values") or []) != 1:
            causes.append(required(f"{path}.values",
                                   "must be only one value when `operator` is 'In' or 'NotIn' for node field selector"))
    else:
        causes.append(invalid(f"{path}.operator", req.get("operator", ""), "not a valid selector operator"))
    if req.get("key") != "metadata.name":
        causes.append(invalid(f"{path}.key", req.get("key", ""), "not a valid field selector key"))
    return causes


def node_selector_term(term: Mapping[str, Any], path: str) -> list[Cause]:
    causes: list[Cause] = []
    for index, req in enumerate(term.get("matchExpressions") or []):
        causes += _requirement(req, f"{path}.matchExpressions[{index}]")
    for index, req in enumerate(term.get("matchFields") or []):
        causes += _field_requirement(req, f"{path}.matchFields[{index}]")
    return causes


def node_affinity(spec: Mapping[str, Any]) -> list[Cause]:
    """``validateNodeAffinity``: a required selector has at least one term; preferred weights 1-100."""
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    causes: list[Cause] = []
    required_selector = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required_selector is not None:
        terms = required_selector.get("nodeSelectorTerms") or []
        if not terms:
            causes.append(required(TERMS, "must have at least one node selector term"))
        for index, term in enumerate(terms):
            causes += node_selector_term(term, f"{TERMS}[{index}]")
    preferred_path = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
    for index, term in enumerate(affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []):
        weight = term.get("weight", 0)
        if not isinstance(weight, int) or not 0 < weight <= 100:
            causes.append(invalid(f"{preferred_path}[{index}].weight", weight, "must be in the range 1-100"))
    return causes


def tolerations(items: list[Mapping[str, Any]], path: str = "spec.tolerations") -> list[Cause]:
    """The parts of ``ValidateTolerations`` a placement toleration can meet: key, operator,
    value, effect."""
    causes: list[Cause] = []
    for index, tol in enumerate(items):
        where = f"{path}[{index}]"
        key, op, value = str(tol.get("key", "")), tol.get("operator", "Equal") or "Equal", str(tol.get("value", ""))
        if key:
            causes += [invalid(f"{where}.key", key, p) for p in qualified_name_problems(key)]
        if op == "Exists" and value:
            causes.append(invalid(f"{where}.operator", tol, "value must be empty when `operator` is 'Exists'"))
        elif op == "Equal":
            causes += [invalid(f"{where}.value", value, p) for p in label_value_problems(value)]
        elif op != "Exists":
            causes.append(Cause("FieldValueNotSupported", f'Unsupported value: {json.dumps(op)}: supported values: '
                                '"Equal", "Exists"', f"{where}.operator"))
        effect = tol.get("effect", "")
        if effect and effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
            causes.append(Cause("FieldValueNotSupported", f'Unsupported value: {json.dumps(effect)}: supported values: '
                                '"NoSchedule", "PreferNoSchedule", "NoExecute"', f"{where}.effect"))
    return causes


def metadata_and_spec(pod: Mapping[str, Any]) -> list[Cause]:
    """The slice of ``validatePodMetadataAndSpec`` this server checks."""
    meta = pod.get("metadata") or {}
    spec = _spec(pod)
    causes = validate_labels(meta.get("labels") or {}) + validate_annotations(meta.get("annotations") or {})
    if not spec.get("containers"):
        causes.append(required("spec.containers"))
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(kind) or []):
            if not container.get("name"):
                causes.append(required(f"spec.{kind}[{index}].name"))
            if not container.get("image"):
                causes.append(required(f"spec.{kind}[{index}].image"))
    causes += node_affinity(spec)
    causes += tolerations(spec.get("tolerations") or [])
    causes += scheduling_gates(spec.get("schedulingGates") or [])
    for key, value in (spec.get("nodeSelector") or {}).items():
        causes += [invalid("spec.nodeSelector", key, p) for p in qualified_name_problems(key)]
        causes += [invalid("spec.nodeSelector", value, p) for p in label_value_problems(str(value))]
    return causes


def validate_create(pod: Mapping[str, Any]) -> list[Cause]:
    """``ValidatePodCreate``: a pod may not name a node while it still has scheduling gates,
    and ephemeral containers cannot be set on create."""
    spec = _spec(pod)
    causes = metadata_and_spec(pod)
    if spec.get("ephemeralContainers"):
        causes.append(forbidden("spec.ephemeralContainers", "cannot be set on create"))
    if spec.get("nodeName") and spec.get("schedulingGates"):
        causes.append(forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared"))
    return causes


# -- ValidatePodUpdate ----------------------------------------------------------------------------
def _only_added_tolerations(new: list[Any], old: list[Any]) -> list[Cause]:
    """``validateOnlyAddedTolerations``: every old toleration is still there (only its
    ``tolerationSeconds`` may change)."""
    def bare(tol: Mapping[str, Any]) -> Any:
        return semantic({k: v for k, v in tol.items() if k != "tolerationSeconds"})

    kept = [bare(t) for t in new]
    for tol in old:
        if bare(tol) not in kept:
            return [forbidden("spec.tolerations", "existing toleration can not be modified except its tolerationSeconds")]
    return tolerations(new)


def _only_deleted_gates(new: list[Mapping[str, Any]], old: list[Mapping[str, Any]]) -> list[Cause]:
    """``validateOnlyDeletedSchedulingGates``."""
    old_names = {g.get("name") for g in old}
    return [forbidden(f"spec.schedulingGates[{i}].name", f"only deletion is allowed, but found new scheduling gate '{g.get('name')}'")
            for i, g in enumerate(new) if g.get("name") not in old_names]


def _term_only_adds(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    """``validateNodeSelectorTermHasOnlyAdditions``: the old requirements are a prefix of the
    new ones (order matters); an empty term (it selects nothing) must stay empty."""
    old_exprs, old_fields = old.get("matchExpressions") or [], old.get("matchFields") or []
    new_exprs, new_fields = new.get("matchExpressions") or [], new.get("matchFields") or []
    if not old_exprs and not old_fields and (new_exprs or new_fields):
        return False
    for old_list, new_list in ((old_exprs, new_exprs), (old_fields, new_fields)):
        if old_list and (len(new_list) < len(old_list) or semantic(new_list[:len(old_list)]) != semantic(old_list)):
            return False
    return True


def _node_affinity_mutation(new: Mapping[str, Any] | None, old: Mapping[str, Any] | None) -> list[Cause]:
    """``validateNodeAffinityMutation``: a nil old required selector (or one without terms)
    takes anything; otherwise the same number of terms, each only added to."""
    if not old or old.get("requiredDuringSchedulingIgnoredDuringExecution") is None:
        return []
    old_terms = old["requiredDuringSchedulingIgnoredDuringExecution"].get("nodeSelectorTerms") or []
    new_terms = ((new or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    if old_terms and len(old_terms) != len(new_terms):
        return [invalid(TERMS, new_terms, "no additions/deletions to non-empty NodeSelectorTerms list are allowed")]
    return [invalid(f"{TERMS}[{i}]", new_terms[i], "only additions are allowed (no mutations or deletions)")
            for i in range(len(old_terms)) if not _term_only_adds(new_terms[i], old_terms[i])]


def _munge_gated(munged: Json, old_spec: Mapping[str, Any]) -> list[Cause]:
    """The gated-pod branch of ``ValidatePodUpdate``: nodeSelector additions and node-affinity
    tightening are checked, then taken back to the old values before the final comparison."""
    causes: list[Cause] = []
    old_selector = old_spec.get("nodeSelector") or {}
    if semantic(munged.get("nodeSelector")) != semantic(old_selector):
        new_selector = munged.get("nodeSelector") or {}
        if any(new_selector.get(k) != v for k, v in old_selector.items()):
            value = json.dumps(dict(sorted(new_selector.items())), separators=(",", ":"))
            causes.append(Cause("FieldValueInvalid", f"Invalid value: {value}: only additions to spec.nodeSelector "
                                "are allowed (no mutations or deletions)", "spec.nodeSelector"))
        munged["nodeSelector"] = copy.deepcopy(old_spec.get("nodeSelector"))
    old_affinity = old_spec.get("affinity")
    old_node = (old_affinity or {}).get("nodeAffinity")
    new_affinity = munged.get("affinity")
    new_node = (new_affinity or {}).get("nodeAffinity")
    if semantic(old_node) != semantic(new_node):
        causes += _node_affinity_mutation(new_node, old_node)
        if new_affinity is None:
            if old_node is not None:
                munged["affinity"] = {"nodeAffinity": copy.deepcopy(old_node)}
        elif old_affinity is None and not new_affinity.get("podAffinity") and not new_affinity.get("podAntiAffinity"):
            munged["affinity"] = None
        else:
            munged["affinity"] = dict(new_affinity, nodeAffinity=copy.deepcopy(old_node))
    return causes


def validate_update(new: Mapping[str, Any], old: Mapping[str, Any]) -> list[Cause]:
    """``ValidatePodUpdate`` for the spec; metadata as ``validatePodMetadataAndSpec`` checks it."""
    new_spec, old_spec = _spec(new), _spec(old)
    causes = metadata_and_spec(new)
    for kind in ("containers", "initContainers"):
        if len(new_spec.get(kind) or []) != len(old_spec.get(kind) or []):
            return causes + [forbidden(f"spec.{kind}", "pod updates may not add or remove containers")]
    causes += _only_added_tolerations(new_spec.get("tolerations") or [], old_spec.get("tolerations") or [])
    causes += _only_deleted_gates(new_spec.get("schedulingGates") or [], old_spec.get("schedulingGates") or [])
    if semantic(new_spec) == semantic(old_spec):
        return causes
    munged = copy.deepcopy(new_spec)
    for kind in ("containers", "initContainers"):
        munged[kind] = [dict(c, image=o.get("image")) for c, o in zip(munged.get(kind) or [], old_spec.get(kind) or [], strict=False)]
    for name in ("activeDeadlineSeconds", "schedulingGates", "tolerations"):
        munged[name] = copy.deepcopy(old_spec.get(name))
    grace = old_spec.get("terminationGracePeriodSeconds")
    if isinstance(grace, int) and grace < 0 and munged.get("terminationGracePeriodSeconds") == 1:
        munged["terminationGracePeriodSeconds"] = grace
    if old_spec.get("schedulingGates"):
        causes += _munge_gated(munged, old_spec)
    if semantic(munged) != semantic(old_spec):
        causes.append(forbidden("spec", f"pod updates may not change fields other than {UPDATABLE}\n{_diff(old_spec, munged)}"))
    return causes


def _diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """Which top-level spec fields differ (the real server prints ``cmp.Diff``; not reproduced)."""
    keys = sorted(k for k in set(old) | set(new) if semantic(old.get(k)) != semantic(new.get(k)))
    return "  core.PodSpec{ changed: " + ", ".join(keys) + " }"

