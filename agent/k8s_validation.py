"""Kubernetes' own validation rules for what the agent may send, so nothing invalid is sent.

Ported from Kubernetes: apimachinery ``IsQualifiedName``, ``IsValidLabelValue``,
``IsDNS1123Subdomain`` (``staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go``),
``IsExtendedResourceName`` (``pkg/apis/core/helper/helpers.go``) and ``validateNodeTaints``
(``pkg/apis/core/validation/validation.go``).  Each check returns a list of reasons; an empty
list means valid.
"""

from __future__ import annotations

import re

_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUANTITY_INT_RE = re.compile(r"^\+?[0-9]+$")

NAME_MAX = 63
PREFIX_MAX = 253
ANNOTATIONS_TOTAL_MAX = 262144
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def qualified_name_errors(key: object) -> list[str]:
    """Why ``key`` is not a valid label/taint key (``[prefix/]name``); any value may be asked."""
    if not isinstance(key, str) or not key:
        return ["name part must be non-empty"]
    parts = key.split("/")
    if len(parts) > 2:
        return ["a qualified name must consist of an optional DNS subdomain prefix, '/', and a name"]
    errors: list[str] = []
    if len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errors.append("prefix part must be non-empty")
        else:
            if len(prefix) > PREFIX_MAX:
                errors.append(f"prefix part must be no more than {PREFIX_MAX} characters")
            if not _DNS1123_SUBDOMAIN_RE.fullmatch(prefix):
                errors.append("prefix part must be a lowercase RFC 1123 subdomain")
    else:
        name = parts[0]
    if not name:
        errors.append("name part must be non-empty")
    else:
        if len(name) > NAME_MAX:
            errors.append(f"name part must be no more than {NAME_MAX} characters")
        if not _NAME_RE.fullmatch(name):
            errors.append(
                "name part must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character"
            )
    return errors


def label_value_errors(value: object) -> list[str]:
    """Why ``value`` is not a valid label (or taint) value; the empty string is valid."""
    if not isinstance(value, str):
        return ["a label value must be a string"]
    errors: list[str] = []
    if len(value) > NAME_MAX:
        errors.append(f"must be no more than {NAME_MAX} characters")
    if not _VALUE_RE.fullmatch(value):
        errors.append(
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character"
        )
    return errors


def annotation_key_errors(key: object) -> list[str]:
    """Annotation keys are qualified names checked after lower-casing."""
    return qualified_name_errors(key.lower() if isinstance(key, str) else key)


def extended_resource_name_errors(name: object) -> list[str]:
    """Why ``name`` cannot be a node resource a pod requests and the scheduler counts.

    Kubernetes' own rules decide: a container may request a prefixed name that is native
    (contains ``kubernetes.io/``, ``IsNativeResource``) or extended (``IsExtendedResourceName``:
    not ``requests.``, qualified as ``requests.<name>``) (``validateContainerResourceName``,
    ``pkg/apis/core/validation``); the scheduler's fit filter counts both against allocatable
    (``IsScalarResourceName``: ``IsExtendedResourceName || IsPrefixedNativeResource || ...``).
    So ``feature.node.kubernetes.io/<name>``, NFD's default, is usable; which ``kubernetes.io``
    namespaces the agent may write is the namespace policy's answer
    (``agent.rules.namespaces.resource_problem``)."""
    if not isinstance(name, str) or "/" not in name:
        return ["an extended resource name must be fully qualified (domain/name)"]
    errors = qualified_name_errors(name)
    if "kubernetes.io/" in name:
        return errors
    if name.startswith("requests."):
        errors.append("must not start with 'requests.'")
    errors.extend(qualified_name_errors("requests." + name))
    return errors


#: longest quantity text read or sent: keeps a hostile value (``1e10000000``, a thousand digits)
#: cheap to reject; Kubernetes itself caps quantities at int64 scale (about 9.2e18), far inside
QUANTITY_MAX_CHARS = 64


def extended_resource_quantity_errors(quantity: object) -> list[str]:
    """Extended resources must be non-negative whole numbers."""
    if not isinstance(quantity, str) or not _QUANTITY_INT_RE.fullmatch(quantity.strip()) \
            or len(quantity.strip().lstrip("+")) > QUANTITY_MAX_CHARS:
        return ["extended resources must be a non-negative integer"]
    return []


def extended_resource_count(quantity: str) -> str:
    """A quantity ``extended_resource_quantity_errors`` accepts as the plain decimal count sent
    (``"+04"`` -> ``"4"``)."""
    return str(int(quantity.strip()))


def taint_errors(key: object, value: object, effect: object) -> list[str]:
    """Why a node taint is invalid (key qualified name, value label value, known effect)."""
    errors = [f"key: {e}" for e in qualified_name_errors(key)]
    errors += [f"value: {e}" for e in label_value_errors(value)]
    if not effect:
        errors.append("effect: Required value")
    elif effect not in TAINT_EFFECTS:
        errors.append(f'effect: Unsupported value: "{effect}": supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"')
    return errors


def label_namespace(key: str) -> str:
    """The prefix of a key, ``""`` when unprefixed."""
    return key.split("/", 1)[0] if "/" in key else ""


#: Kubernetes-reserved label/taint/resource domains; of these a node agent may only use the two
#: NFD-sanctioned ones. ``node-restriction.kubernetes.io`` is for cluster admins, never agents.
RESERVED_DOMAINS = ("kubernetes.io", "k8s.io")
AGENT_ALLOWED_RESERVED = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
ADMIN_ONLY_DOMAINS = ("node-restriction.kubernetes.io",)


def in_domain(namespace: str, domain: str) -> bool:
    """``namespace`` is ``domain`` or one of its subdomains."""
    return namespace == domain or namespace.endswith("." + domain)


def reserved_namespace_problem(key: str) -> str | None:
    """Why a node agent must never own ``key`` because of its namespace alone, or None."""
    namespace = label_namespace(key)
    if not namespace:
        return "key has no namespace (prefix/name required)"
    if any(in_domain(namespace, d) for d in ADMIN_ONLY_DOMAINS):
        return f"namespace {namespace!r} is reserved for cluster administrators"
    if any(in_domain(namespace, d) for d in RESERVED_DOMAINS) and not any(
            in_domain(namespace, d) for d in AGENT_ALLOWED_RESERVED):
        return f"namespace {namespace!r} is reserved by Kubernetes"
    return None
