"""Node validation as the real API server does it, with its field paths and messages.

Independent of ``agent/k8s_validation.py`` on purpose: the agent's own checks are what is
under test. Rules and wording follow apimachinery (``IsQualifiedName``, ``IsValidLabelValue``,
``ValidateAnnotations``) and core validation (``validateNodeTaints``,
``ValidateNodeResources``): ``staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go``,
``staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go`` and
``pkg/apis/core/validation/validation.go`` in kubernetes/kubernetes.

Each failure is a ``Cause`` (reason, message, field) exactly as it appears in a Status
``details.causes`` entry; ``status.invalid`` turns a list of them into the 422 body.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tests.support import quantity

_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_NAME_RE = re.compile(f"^{_NAME}$")
_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_VALUE_RE = re.compile(f"^{_VALUE}$")
_DNS1123 = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_DNS1123_RE = re.compile(f"^{_DNS1123}$")

QUALIFIED_NAME_MSG = ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
                      f"with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                      f"validation is '{_NAME}')")
QUALIFIED_FORM_MSG = ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
                      "end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
                      f"validation is '{_NAME}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')")
PREFIX_MSG = ("prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
              "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
              f"validation is '{_DNS1123}')")
LABEL_VALUE_MSG = ("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
                   "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
                   f"regex used for validation is '{_VALUE}')")
TOTAL_ANNOTATION_LIMIT = 256 * 1024
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
STANDARD_RESOURCES = {"cpu", "memory", "pods", "ephemeral-storage", "storage"}


@dataclass(frozen=True)
class Cause:
    """One ``details.causes`` entry."""

    reason: str
    message: str
    field: str

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _quote(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False) if isinstance(value, str) else str(value)


def invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {_quote(value)}: {detail}", field)


def qualified_name_problems(key: str) -> list[str]:
    """apimachinery ``IsQualifiedName`` messages for ``key``."""
    parts = key.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part must be non-empty"]
    else:
        return [QUALIFIED_FORM_MSG]
    problems = []
    if len(parts) == 2:
        if len(prefix) > 253:
            problems.append("prefix part must be no more than 253 characters")
        if not _DNS1123_RE.fullmatch(prefix):
            problems.append(PREFIX_MSG)
    if not name:
        problems.append("name part must be non-empty")
    else:
        if len(name) > 63:
            problems.append("name part must be no more than 63 characters")
        if not _NAME_RE.fullmatch(name):
            problems.append(QUALIFIED_NAME_MSG)
    return problems


def label_value_problems(value: str) -> list[str]:
    problems = []
    if len(value) > 63:
        problems.append("must be no more than 63 characters")
    if not _VALUE_RE.fullmatch(value):
        problems.append(LABEL_VALUE_MSG)
    return problems


def validate_labels(labels: Mapping[str, Any], field: str = "metadata.labels") -> list[Cause]:
    causes = []
    for key, value in labels.items():
        causes += [invalid(field, key, p) for p in qualified_name_problems(key)]
        causes += [invalid(field, value, p) for p in label_value_problems(value)]
    return causes


def validate_annotations(annotations: Mapping[str, Any], field: str = "metadata.annotations") -> list[Cause]:
    causes = []
    total = 0
    for key, value in annotations.items():
        causes += [invalid(field, key, p) for p in qualified_name_problems(key.lower())]
        total += len(key.encode()) + len(str(value).encode())  # Go's len(): bytes, not characters
    if total > TOTAL_ANNOTATION_LIMIT:
        causes.append(Cause("FieldValueTooLong", f"Too long: must have at most {TOTAL_ANNOTATION_LIMIT} bytes", field))
    return causes


def _go_taint(taint: Mapping[str, Any]) -> str:
    return (f'core.Taint{{Key:{_quote(taint.get("key", ""))}, Value:{_quote(taint.get("value", ""))}, '
            f'Effect:{_quote(taint.get("effect", ""))}, TimeAdded:<nil>}}')


def validate_taints(taints: list[Mapping[str, Any]]) -> list[Cause]:
    causes: list[Cause] = []
    seen: set[tuple[str, str]] = set()
    for index, taint in enumerate(taints):
        # kube-apiserver reports taint errors under metadata.taints[i], not spec.taints[i]:
        # pkg/apis/core/validation ValidateNode builds the path from field.NewPath("metadata")
        path = f"metadata.taints[{index}]"
        key, value, effect = taint.get("key", ""), taint.get("value", ""), taint.get("effect", "")
        causes += [invalid(f"{path}.key", key, p) for p in qualified_name_problems(key)]
        causes += [invalid(f"{path}.value", value, p) for p in label_value_problems(value)]
        if not effect:
            causes.append(Cause("FieldValueRequired", "Required value", f"{path}.effect"))
        elif effect not in TAINT_EFFECTS:
            causes.append(Cause("FieldValueNotSupported", f"Unsupported value: {_quote(effect)}: supported values: "
                                + ", ".join(f'"{e}"' for e in TAINT_EFFECTS), f"{path}.effect"))
        if (key, effect) in seen:
            causes.append(Cause("FieldValueDuplicate", f"Duplicate value: {_go_taint(taint)}: taints must be unique "
                                "by key and effect pair", path))
            continue
        seen.add((key, effect))
    return causes


def is_extended_resource_name(name: str) -> bool:
    """``IsExtendedResourceName``: qualified, not native (no ``kubernetes.io/``), not ``requests.``."""
    return ("/" in name and "kubernetes.io/" not in name and not name.startswith("requests.")
            and not qualified_name_problems("requests." + name))


INTEGER_RESOURCES = {"pods", "resourcequotas", "services", "replicationcontrollers", "secrets",
                     "configmaps", "persistentvolumeclaims", "services.nodeports", "services.loadbalancers"}


def is_integer_resource_name(name: str) -> bool:
    """``helper.IsIntegerResourceName``: the integer set (``pods`` among them) or extended."""
    return name in INTEGER_RESOURCES or is_extended_resource_name(name)


def _standard(name: str) -> bool:
    return name in STANDARD_RESOURCES or name.startswith(("hugepages-", "attachable-volumes-"))


def validate_resources(status: Mapping[str, Any], check_names: bool) -> list[Cause]:
    """``ValidateNodeResources`` (quantities >= 0, extended ones whole) plus, when
    ``check_names``, the resource-name rules pods are held to (``validateContainerResourceName``
    in ``pkg/apis/core/validation``: a prefixed name is either native, containing
    ``kubernetes.io/`` (``IsNativeResource``), or must be an extended resource name). The real
    server stores any name in node capacity; the fake refuses so a test notices the agent
    sending one no pod could request."""
    causes: list[Cause] = []
    for section in ("capacity", "allocatable"):
        for name, text in (status.get(section) or {}).items():
            path = f"status.{section}.{name}"
            if check_names:
                if "/" not in name:
                    if not _standard(name):
                        causes.append(invalid(path, name, "must be a standard resource type or fully qualified"))
                        continue
                elif qualified_name_problems(name):
                    causes += [invalid(path, name, p) for p in qualified_name_problems(name)]
                    continue
                elif "kubernetes.io/" not in name and not is_extended_resource_name(name):
                    causes.append(invalid(path, name, "doesn't follow extended resource name standard"))
                    continue
            try:
                value, _fmt = quantity.parse(text)
            except quantity.QuantityError:
                causes.append(invalid(path, text, "quantities must match the regular expression"))
                continue
            if value < 0:
                causes.append(invalid(path, quantity.canonical(text), "must be greater than or equal to 0"))
            if is_integer_resource_name(name):
                milli = value * 1000  # Quantity.MilliValue() rounds up; % 1000 on that
                if -((-milli.numerator) // milli.denominator) % 1000 != 0:
                    causes.append(invalid(path, quantity.canonical(text), "must be an integer"))
    return causes


def _object_meta(node: Mapping[str, Any]) -> list[Cause]:
    """``ValidateObjectMeta`` / ``ValidateObjectMetaAccessorUpdate``: both check labels, then
    annotations (apimachinery ``pkg/api/validation/objectmeta.go``)."""
    meta = node.get("metadata") or {}
    return validate_labels(meta.get("labels") or {}) + validate_annotations(meta.get("annotations") or {})


def validate_node(node: Mapping[str, Any], *, check_resource_names: bool = True) -> list[Cause]:
    """``ValidateNode``: metadata, taints (under ``metadata.taints``), resources."""
    causes = _object_meta(node)
    causes += validate_taints((node.get("spec") or {}).get("taints") or [])
    causes += validate_resources(node.get("status") or {}, check_resource_names)
    return causes


def validate_node_update_only(node: Mapping[str, Any], *, check_resource_names: bool = True) -> list[Cause]:
    """``ValidateNodeUpdate``: metadata again (``ValidateObjectMetaUpdate``) and resources
    again; no taints."""
    return _object_meta(node) + validate_resources(node.get("status") or {}, check_resource_names)


def validate_node_write(node: Mapping[str, Any], subresource: str | None, *,
                        check_resource_names: bool = True) -> list[Cause]:
    """Every cause the real server reports for an update, in its order and with its
    repetitions: the main resource's strategy runs ``ValidateNode`` and then
    ``ValidateNodeUpdate`` (``pkg/registry/core/node/strategy.go``), so a bad label or
    resource is reported twice; ``/status`` runs ``ValidateNodeUpdate`` alone."""
    update = validate_node_update_only(node, check_resource_names=check_resource_names)
    if subresource == "status":
        return update
    return validate_node(node, check_resource_names=check_resource_names) + update


def decode_problem(node: object) -> str | None:
    """What the server's JSON decoding into a typed Node would refuse (a 400, not a 422)."""
    if not isinstance(node, Mapping):
        return "the body must be a JSON object"
    meta = node.get("metadata")
    if not isinstance(meta, Mapping):
        return "json: cannot unmarshal into Go struct field Node.metadata of type v1.ObjectMeta"
    problem = _metadata_problem(meta)
    if problem is None:
        problem = _spec_problem(node.get("spec") or {})
    if problem is None:
        problem = _status_problem(node.get("status") or {})
    return problem


def _metadata_problem(meta: Mapping[str, Any]) -> str | None:
    for name in ("labels", "annotations"):
        values = meta.get(name)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            return f"json: cannot unmarshal into Go struct field ObjectMeta.metadata.{name} of type map[string]string"
        for value in values.values():
            if not isinstance(value, str):
                return (f"json: cannot unmarshal {type(value).__name__} into Go struct field "
                        f"ObjectMeta.metadata.{name} of type string")
    return None


def _spec_problem(spec: object) -> str | None:
    if not isinstance(spec, Mapping):
        return "json: cannot unmarshal into Go struct field Node.spec of type v1.NodeSpec"
    taints = spec.get("taints")
    if taints is not None:
        if not isinstance(taints, list):
            return "json: cannot unmarshal into Go struct field NodeSpec.spec.taints of type []v1.Taint"
        for taint in taints:
            if not isinstance(taint, Mapping) or any(
                    not isinstance(taint.get(f, ""), str) for f in ("key", "value", "effect")):
                return "json: cannot unmarshal into Go struct field NodeSpec.spec.taints of type v1.Taint"
    return None


def _status_problem(status: object) -> str | None:
    if not isinstance(status, Mapping):
        return "json: cannot unmarshal into Go struct field Node.status of type v1.NodeStatus"
    for section in ("capacity", "allocatable"):
        values = status.get(section)
        if values is None:
            continue
        if not isinstance(values, Mapping):
            return f"json: cannot unmarshal into Go struct field NodeStatus.status.{section} of type v1.ResourceList"
        for value in values.values():
            try:
                quantity.parse(value)
            except quantity.QuantityError as err:
                return str(err)
    return None
