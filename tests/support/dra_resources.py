"""``resource.k8s.io``: ResourceSlices and DeviceClasses as kube-apiserver serves and validates
them, in ``v1`` (1.34+) and ``v1beta1`` (1.32-1.33; a device's fields sit under ``basic``).

Served versions are chosen per server (``FakeApiServer(dra_versions=...)``: ``("v1",
"v1beta1")`` by default, ``("v1beta1",)`` for a 1.32-1.33 cluster, ``()`` for none) and listed
in discovery (``/apis``, ``/apis/resource.k8s.io``). Objects are stored once, in the ``v1``
shape, and converted on the way in and out as the real server converts between versions.
``device_taints`` says whether the server has the ``DRADeviceTaints`` feature: when off, a
device's ``taints`` are dropped on write (``dropDisabledFields`` in the registry strategy)
and ``devicetaintrules`` is not in discovery. ``consumable_capacity`` (``FakeApiServer(
dra_consumable_capacity=...)``) is the ``DRAConsumableCapacity`` gate (KEP-5075: alpha 1.34,
beta and on by default 1.36; off here by default, as ``device_taints``): when off, a device's
``allowMultipleAllocations`` and each capacity's ``requestPolicy`` are dropped on create and on
an update whose stored slice uses neither (``dropDisabledDRAConsumableCapacityFields`` and
``draConsumableCapacityFeatureInUse``, ``pkg/registry/resource/resourceslice/strategy.go``);
the capacity's ``value`` stays. ``?dryRun=All`` on a ResourceSlice POST or PUT runs all of it
(conversion, dropping, validation) and answers what would be stored without storing it
(apiserver ``handlers/create.go``/``update.go``; any other ``dryRun`` value is a 422 on
``CreateOptions``/``UpdateOptions``, ``ValidateDryRun``).

Rules (kubernetes/kubernetes ``pkg/apis/resource/validation/validation.go``, constants from
``staging/src/k8s.io/api/resource/v1/types.go``; each is in tests/support/README.md):

- ``spec.driver``: ``ValidateCSIDriverName`` (required, <= 63, a DNS subdomain once lower-cased);
- ``spec.pool``: name required, <= 253 (``PoolNameMaxLength``), each ``/`` part a DNS
  subdomain; ``resourceSliceCount`` > 0; ``generation`` >= 0; pool name, driver and nodeName
  immutable on update;
- exactly one of ``nodeName`` / ``nodeSelector`` / ``allNodes`` / ``perDeviceNodeSelection``;
  ``allNodes: false`` and ``nodeName: ""`` are invalid;
- ``spec.devices``: at most 128 (``ResourceSliceMaxDevices``), 64 when a device has taints
  (``ResourceSliceMaxDevicesWithAdvancedFeatures``); names unique DNS labels;
- per device: attributes + capacities <= 32; an attribute name is a C identifier of at most
  32 characters (``DeviceMaxIDLength``), optionally after a domain checked as a driver name
  (<= 63, ``DeviceMaxDomainLength``); a value sets exactly one of ``bool``, ``int``, ``string``
  (<= 64 bytes, ``DeviceAttributeMaxValueLength``), ``version`` (semver 2.0.0, <= 64);
- device taints: key a label name, value a label value, effect ``NoSchedule``, ``NoExecute``
  or ``None``;
- consumable capacity (``validateDevice``, ``validateMultiAllocatableDeviceCapacity``,
  ``validateSingleAllocatableDeviceCapacity``, ``validateRequestPolicy``,
  ``validateRequestPolicyValidValues``, ``validateRequestPolicyRange``): capacity names are
  qualified names; a ``requestPolicy`` without ``allowMultipleAllocations: true`` is
  Forbidden; ``validValues`` and ``validRange`` together are Forbidden; either needs a
  ``default``; ``validValues`` ascending, unique, at most 10 (``CapacityRequestPolicy`` in
  types.go), none above the capacity's value, the default among them; ``validRange`` needs
  ``min`` <= value, default >= min, and with ``max``: min <= max <= value, default <= max;
  with ``step``: min + step <= value, default and max whole steps from min. Quantities are
  stored canonical; one that does not parse is a 400 (decoding);
- DeviceClass: name a DNS subdomain, at most 32 selectors (``DeviceSelectorsMaxSize``), each
  with a non-empty ``cel.expression``; ``extendedResourceName`` an extended resource name.
  CEL is not compiled here (the agent's ``validate`` compiles the shipped classes).
- field selectors on ResourceSlices: ``spec.nodeName``, ``spec.driver``, ``spec.pool.name``
  (``ResourceSliceToSelectableFields``, ``pkg/registry/resource/resourceslice/strategy.go``).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tests.support import patching, quantity, selectors, validation
from tests.support.apiserver import ApiError, invalid_error, status_body
from tests.support.store import AlreadyExists, Conflict

if TYPE_CHECKING:
    from tests.support.apiserver import FakeApiServer

GROUP = "resource.k8s.io"
SLICES = "resourceslices.resource.k8s.io"
CLASSES = "deviceclasses.resource.k8s.io"
MAX_DEVICES = 128
MAX_DEVICES_ADVANCED = 64
MAX_ATTRIBUTES = 32
MAX_ID = 32
MAX_DOMAIN = 63
MAX_VALUE = 64
MAX_POOL_NAME = 253
MAX_SELECTORS = 32
MAX_VALID_VALUES = 10  # CapacityRequestPolicy.validValues: "Must not contain more than 10 entries"
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NUM = r"(0|[1-9]\d*)"
_PRE = r"(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)"
_BUILD = r"[0-9a-zA-Z-]+"
_SEMVER = re.compile(rf"{_NUM}\.{_NUM}\.{_NUM}(-{_PRE}(\.{_PRE})*)?(\+{_BUILD}(\.{_BUILD})*)?")
SELECTABLE = {"spec.nodeName", "spec.driver", "spec.pool.name", "metadata.name", "metadata.namespace"}


def _subdomain_problem(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.fullmatch(value):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                "and must start and end with an alphanumeric character")
    return None


def _driver_name(value: Any, field: str) -> list[validation.Cause]:
    if not isinstance(value, str) or not value:
        return [validation.Cause("FieldValueRequired", "Required value", field)]
    causes = []
    if len(value) > 63:
        causes.append(validation.Cause("FieldValueTooLong", "Too long: may not be more than 63 bytes", field))
    problem = _subdomain_problem(value.lower())
    if problem:
        causes.append(validation.invalid(field, value, problem))
    return causes


def _pool(pool: Any, field: str) -> list[validation.Cause]:
    pool = pool if isinstance(pool, Mapping) else {}
    name = pool.get("name")
    causes: list[validation.Cause] = []
    if not isinstance(name, str) or not name:
        causes.append(validation.Cause("FieldValueRequired", "Required value", f"{field}.name"))
    else:
        if len(name) > MAX_POOL_NAME:
            causes.append(validation.Cause("FieldValueTooLong", f"Too long: may not be more than {MAX_POOL_NAME} bytes",
                                           f"{field}.name"))
        for part in name.split("/"):
            problem = _subdomain_problem(part)
            if problem:
                causes.append(validation.invalid(f"{field}.name", part, problem))
    count, generation = pool.get("resourceSliceCount", 0), pool.get("generation", 0)
    if not isinstance(count, int) or count <= 0:
        causes.append(validation.invalid(f"{field}.resourceSliceCount", count, "must be greater than zero"))
    if not isinstance(generation, int) or generation < 0:
        causes.append(validation.invalid(f"{field}.generation", generation, "must be greater than or equal to zero"))
    return causes


def _c_identifier(value: str, field: str) -> list[validation.Cause]:
    causes = []
    if len(value) > MAX_ID:
        causes.append(validation.Cause("FieldValueTooLong", f"Too long: may not be more than {MAX_ID} bytes", field))
    if not _C_IDENTIFIER.fullmatch(value):
        causes.append(validation.Cause("FieldValueTypeInvalid", f'Invalid value: "{value}": a valid C identifier must '
                                       "start with alphabetic character or '_', followed by a string of alphanumeric "
                                       "characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
                                       "validation is '[A-Za-z_][A-Za-z0-9_]*')", field))
    return causes


def qualified_name(name: str, field: str) -> list[validation.Cause]:
    """``validateQualifiedName``: ``id`` or ``domain/id``."""
    if not name:
        return [validation.Cause("FieldValueRequired", "Required value: name required", field)]
    parts = name.split("/")
    if len(parts) == 1:
        return _c_identifier(parts[0], field)
    if len(parts) != 2:
        return [validation.invalid(field, name, "a qualified name must have at most one '/'")]
    causes: list[validation.Cause] = []
    if not parts[0]:
        causes.append(validation.Cause("FieldValueRequired", "Required value: the domain must not be empty", field))
    else:
        causes += _driver_name(parts[0], field)
    if not parts[1]:
        causes.append(validation.Cause("FieldValueRequired", "Required value: the name must not be empty", field))
    else:
        causes += _c_identifier(parts[1], field)
    return causes


def _attribute(value: Any, field: str) -> list[validation.Cause]:
    value = value if isinstance(value, Mapping) else {}
    kinds = [k for k in ("bool", "int", "string", "version") if value.get(k) is not None]
    causes: list[validation.Cause] = []
    if len(kinds) != 1:
        causes.append(validation.invalid(field, "" if not kinds else "{...}", "exactly one value must be specified"))
    if isinstance(value.get("string"), str) and len(value["string"].encode()) > MAX_VALUE:
        causes.append(validation.Cause("FieldValueTooLong", f"Too long: may not be more than {MAX_VALUE} bytes",
                                       f"{field}.string"))
    version = value.get("version")
    if version is not None:
        if not isinstance(version, str) or not _SEMVER.fullmatch(version):
            causes.append(validation.invalid(f"{field}.version", version,
                                             "must be a string compatible with semver.org spec 2.0.0"))
        elif len(version) > MAX_VALUE:
            causes.append(validation.Cause("FieldValueTooLong", f"Too long: may not be more than {MAX_VALUE} bytes",
                                           f"{field}.version"))
    if "bool" in kinds and not isinstance(value["bool"], bool):
        causes.append(validation.invalid(f"{field}.bool", value["bool"], "must be a boolean"))
    if "int" in kinds and (isinstance(value["int"], bool) or not isinstance(value["int"], int)):
        causes.append(validation.invalid(f"{field}.int", value["int"], "must be an integer"))
    return causes


def _taints(taints: Any, field: str) -> list[validation.Cause]:
    causes: list[validation.Cause] = []
    for i, taint in enumerate(taints if isinstance(taints, list) else []):
        taint = taint if isinstance(taint, Mapping) else {}
        key, value, effect = str(taint.get("key") or ""), str(taint.get("value") or ""), taint.get("effect")
        if not key:
            causes.append(validation.Cause("FieldValueRequired", "Required value", f"{field}[{i}].key"))
        else:
            causes += [validation.invalid(f"{field}[{i}].key", key, p) for p in validation.qualified_name_problems(key)]
        if value:
            causes += [validation.invalid(f"{field}[{i}].value", value, p) for p in validation.label_value_problems(value)]
        if not effect:
            causes.append(validation.Cause("FieldValueRequired", "Required value", f"{field}[{i}].effect"))
        elif effect not in TAINT_EFFECTS:
            supported = ", ".join(f'"{e}"' for e in TAINT_EFFECTS)
            causes.append(validation.Cause("FieldValueNotSupported",
                                           f'Unsupported value: "{effect}": supported values: {supported}',
                                           f"{field}[{i}].effect"))
    return causes


def _q(value: Any) -> Any:
    return quantity.parse(value)[0]


def _request_policy(value: Any, policy: Mapping[str, Any], field: str) -> list[validation.Cause]:
    """``validateRequestPolicy`` for one capacity of ``value`` (quantities already parsed)."""
    valid_values, valid_range, default = policy.get("validValues") or [], policy.get("validRange"), policy.get("default")
    if valid_values and valid_range is not None:
        return [validation.Cause("FieldValueForbidden", 'Forbidden: exactly one policy can be specified, cannot '
                                 'specify "validValues" and "validRange" at the same time', field)]
    causes: list[validation.Cause] = []
    if valid_values:
        if default is None:
            return [validation.Cause("FieldValueRequired", "Required value: required when validValues is defined",
                                     f"{field}.default")]
        at = f"{field}.validValues"
        options = [_q(v) for v in valid_values]
        for i in range(len(options) - 1):
            if options[i] > options[i + 1]:
                causes.append(validation.invalid(f"{at}[{i + 1}]", quantity.canonical(valid_values[i + 1]),
                                                 "values must be sorted in ascending order"))
        if len(options) > MAX_VALID_VALUES:
            return causes + [validation.Cause("FieldValueTooMany", f"Too many: {len(options)}: must have at most "
                                              f"{MAX_VALID_VALUES} items", at)]
        seen: set[Any] = set()
        for i, option in enumerate(options):
            if option > _q(value):
                causes.append(validation.invalid(f"{at}[{i}]", quantity.canonical(valid_values[i]),
                                                 f"option is larger than capacity value: {quantity.canonical(value)}"))
            if option in seen:
                causes.append(validation.Cause("FieldValueDuplicate",
                                               f'Duplicate value: "{quantity.canonical(valid_values[i])}"', f"{at}[{i}]"))
            seen.add(option)
        if _q(default) not in seen:
            causes.append(validation.invalid(at, quantity.canonical(default),
                                             "default value is not valid according to the requestPolicy"))
    elif valid_range is not None:
        if default is None:
            return [validation.Cause("FieldValueRequired", "Required value: required when validRange is defined",
                                     f"{field}.default")]
        causes += _range(_q(value), _q(default), valid_range if isinstance(valid_range, Mapping) else {},
                         f"{field}.validRange")
    return causes


def _range(value: Any, default: Any, valid_range: Mapping[str, Any], at: str) -> list[validation.Cause]:
    """``validateRequestPolicyRange`` (``validateRequestPolicyRangeStep`` on whole values)."""
    if valid_range.get("min") is None:
        return [validation.Cause("FieldValueRequired", "Required value: required when validRange is defined",
                                 f"{at}.min")]
    low, causes = _q(valid_range["min"]), []

    def text(value: Any) -> str:  # a parsed quantity as the server prints it
        return quantity.canonical(value if isinstance(value, str) else
                                  str(value.numerator) if value.denominator == 1 else float(value))

    if low > value:
        causes.append(validation.invalid(f"{at}.min", text(valid_range["min"]), f"min is larger than capacity value: {text(value)}"))
    if default < low:
        causes.append(validation.invalid(f"{at}.min", text(default), f"default is less than min: {text(low)}"))
    high = _q(valid_range["max"]) if valid_range.get("max") is not None else None
    if high is not None:
        if low > high:
            causes.append(validation.invalid(f"{at}.max", text(low), f"min is larger than max: {text(high)}"))
        if high > value:
            causes.append(validation.invalid(f"{at}.max", text(high), f"max is larger than capacity value: {text(value)}"))
        if default > high:
            causes.append(validation.invalid(f"{at}.max", text(default), f"default is more than max: {text(high)}"))
    if valid_range.get("step") is not None:
        step = _q(valid_range["step"])
        if low + step > value:
            causes.append(validation.invalid(f"{at}.step", text(step),
                                             f"one step {text(low + step)} is larger than capacity value: {text(value)}"))
        for checked in [default] + ([high] if high is not None else []):
            if step and (int(checked) - int(low)) % int(step or 1):
                causes.append(validation.invalid(f"{at}.step", text(checked), f"value is not a multiple of a given "
                                                 f"step ({text(step)}) from ({text(low)})"))
    return causes


def _capacity(device: Mapping[str, Any], field: str) -> list[validation.Cause]:
    multiple = device.get("allowMultipleAllocations") is True
    causes: list[validation.Cause] = []
    capacity = device.get("capacity") or {}
    for key in sorted(capacity):
        causes += qualified_name(key, f"{field}.capacity")
        entry = capacity[key] if isinstance(capacity[key], Mapping) else {}
        policy = entry.get("requestPolicy")
        if policy is None:
            continue
        at = f"{field}.capacity[{key}].requestPolicy"
        if not multiple:
            causes.append(validation.Cause("FieldValueForbidden", "Forbidden: allowMultipleAllocations must be true", at))
        elif isinstance(policy, Mapping):
            causes += _request_policy(entry.get("value", "0"), policy, at)
    return causes


def _canonical_capacity(obj: dict[str, Any]) -> None:
    """Each capacity quantity as the server stores it; one that does not parse is a 400, as
    decoding the body into ``resource.Quantity`` fails."""
    for device in (obj.get("spec") or {}).get("devices") or []:
        capacity = device.get("capacity") if isinstance(device, dict) else None
        for entry in (capacity.values() if isinstance(capacity, dict) else []):
            if not isinstance(entry, dict):
                continue
            try:
                entry["value"] = quantity.canonical(entry.get("value", "0"))
                policy = entry.get("requestPolicy")
                if isinstance(policy, dict):
                    if policy.get("default") is not None:
                        policy["default"] = quantity.canonical(policy["default"])
                    if isinstance(policy.get("validValues"), list):
                        policy["validValues"] = [quantity.canonical(v) for v in policy["validValues"]]
                    if isinstance(policy.get("validRange"), dict):
                        policy["validRange"] = {k: quantity.canonical(v) for k, v in policy["validRange"].items()
                                                if v is not None}
            except quantity.QuantityError as err:
                raise ApiError(400, status_body(400, f"ResourceSlice in version \"v1\" cannot be handled as a "
                                                     f"ResourceSlice: {err}")) from err


def _device(device: Any, field: str) -> list[validation.Cause]:
    device = device if isinstance(device, Mapping) else {}
    name = device.get("name")
    causes: list[validation.Cause] = []
    if not isinstance(name, str) or not name:
        causes.append(validation.Cause("FieldValueRequired", "Required value", f"{field}.name"))
    elif len(name) > 63 or not _DNS_LABEL.fullmatch(name):
        causes.append(validation.invalid(f"{field}.name", name, "a lowercase RFC 1123 label must consist of lower "
                                         "case alphanumeric characters or '-', and must start and end with an "
                                         "alphanumeric character"))
    attributes = device.get("attributes") or {}
    capacity = device.get("capacity") or {}
    total = len(attributes) + len(capacity)
    if total > MAX_ATTRIBUTES:
        causes.append(validation.invalid(field, total, "the total number of attributes and capacities must not "
                                         f"exceed {MAX_ATTRIBUTES}"))
    for key in sorted(attributes):
        causes += qualified_name(key, f"{field}.attributes")
        causes += _attribute(attributes[key], f"{field}.attributes[{key}]")
    if device.get("allowMultipleAllocations") is not None and not isinstance(device["allowMultipleAllocations"], bool):
        causes.append(validation.invalid(f"{field}.allowMultipleAllocations", device["allowMultipleAllocations"],
                                         "must be a boolean"))
    causes += _capacity(device, field)
    causes += _taints(device.get("taints"), f"{field}.taints")
    return causes


def _node_selection(spec: Mapping[str, Any]) -> list[validation.Cause]:
    """Exactly one of ``nodeName`` / ``nodeSelector`` / ``allNodes`` / ``perDeviceNodeSelection``."""
    causes: list[validation.Cause] = []
    chosen = []
    if spec.get("nodeName") is not None:
        if spec["nodeName"] == "":
            causes.append(validation.invalid("spec.nodeName", "", "must be either unset or set to a non-empty string"))
        else:
            chosen.append("`nodeName`")
            problem = _subdomain_problem(str(spec["nodeName"]))
            if problem:
                causes.append(validation.invalid("spec.nodeName", spec["nodeName"], problem))
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
    for key in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(key) is not None:
            if spec[key] is True:
                chosen.append(f"`{key}`")
            else:
                causes.append(validation.invalid(f"spec.{key}", spec[key], "must be either unset or set to true"))
    options = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
    if not chosen:
        causes.append(validation.Cause("FieldValueRequired", f"Required value: {options}", "spec"))
    elif len(chosen) > 1:
        causes.append(validation.invalid("spec", "{" + ", ".join(chosen) + "}", f"{options}, but multiple fields are set"))
    return causes


def validate_slice(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[validation.Cause]:
    """``ValidateResourceSlice`` / ``ValidateResourceSliceUpdate`` on the ``v1`` shape."""
    spec: Mapping[str, Any] = obj["spec"] if isinstance(obj.get("spec"), Mapping) else {}
    causes = _driver_name(spec.get("driver"), "spec.driver") + _pool(spec.get("pool"), "spec.pool")
    if old is not None:
        old_spec = old.get("spec") or {}
        for path, new_value, old_value in (("spec.pool.name", (spec.get("pool") or {}).get("name"),
                                            (old_spec.get("pool") or {}).get("name")),
                                           ("spec.driver", spec.get("driver"), old_spec.get("driver")),
                                           ("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName"))):
            if new_value != old_value:
                causes.append(validation.invalid(path, new_value, "field is immutable"))
    causes += _node_selection(spec)
    devices = spec.get("devices") or []
    if not isinstance(devices, list):
        return causes + [validation.invalid("spec.devices", "", "must be a list")]
    limit = MAX_DEVICES_ADVANCED if any(isinstance(d, Mapping) and d.get("taints") for d in devices) else MAX_DEVICES
    if len(devices) > limit:
        return causes + [validation.Cause("FieldValueTooMany", f"Too many: {len(devices)}: must have at most {limit} "
                                          "items", "spec.devices")]
    seen: set[str] = set()
    for i, device in enumerate(devices):
        causes += _device(device, f"spec.devices[{i}]")
        name = device.get("name") if isinstance(device, Mapping) else None
        if isinstance(name, str) and name in seen:
            causes.append(validation.Cause("FieldValueDuplicate", f'Duplicate value: "{name}"', f"spec.devices[{i}]"))
        seen.add(str(name))
    return causes


def validate_class(obj: Mapping[str, Any]) -> list[validation.Cause]:
    """``ValidateDeviceClass``: selectors and ``extendedResourceName``."""
    spec: Mapping[str, Any] = obj["spec"] if isinstance(obj.get("spec"), Mapping) else {}
    selectors_ = spec.get("selectors") or []
    causes: list[validation.Cause] = []
    if len(selectors_) > MAX_SELECTORS:
        return [validation.Cause("FieldValueTooMany", f"Too many: {len(selectors_)}: must have at most {MAX_SELECTORS} "
                                 "items", "spec.selectors")]
    for i, selector in enumerate(selectors_):
        expression = ((selector or {}).get("cel") or {}).get("expression") if isinstance(selector, Mapping) else None
        if not isinstance(expression, str) or not expression.strip():
            causes.append(validation.Cause("FieldValueRequired", "Required value", f"spec.selectors[{i}].cel.expression"))
    name = spec.get("extendedResourceName")
    if name is not None and not validation.is_extended_resource_name(str(name)):
        causes.append(validation.invalid("spec.extendedResourceName", name, "must be a valid extended resource name"))
    return causes


# -- versions -------------------------------------------------------------------------------
def to_stored(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """A request body of ``version`` -> the ``v1`` shape stored (v1beta1: a slice device's
    ``basic`` unwrapped; a claim request's fields wrapped in ``exactly``)."""
    obj = copy.deepcopy(obj)
    spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    if version == "v1beta1" and isinstance(spec.get("devices"), list):
        spec["devices"] = [{"name": d.get("name"), **(d.get("basic") or {})} if isinstance(d, dict) else d
                           for d in spec["devices"]]
    if version == "v1beta1" and isinstance(spec.get("devices"), dict) and isinstance(spec["devices"].get("requests"), list):
        spec["devices"]["requests"] = [_claim_request_v1(r) for r in spec["devices"]["requests"]]
    return obj


def _claim_request_v1(request: Any) -> Any:
    """v1beta1's ``DeviceRequest`` has the exact request's fields inline beside ``name`` and
    ``firstAvailable``; v1 nests them in ``exactly`` (k8s.io/api resource/v1beta1 and v1 types.go)."""
    if not isinstance(request, dict) or "firstAvailable" in request:
        return request
    exact = {k: v for k, v in request.items() if k != "name"}
    return {"name": request.get("name"), **({"exactly": exact} if exact else {})}


def from_stored(obj: dict[str, Any], version: str, kind: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["apiVersion"], obj["kind"] = f"{GROUP}/{version}", kind
    spec: dict[str, Any] = obj["spec"] if isinstance(obj.get("spec"), dict) else {}
    if version == "v1beta1" and isinstance(spec.get("devices"), list) and spec["devices"]:
        spec["devices"] = [{"name": d["name"], "basic": {k: v for k, v in d.items() if k != "name"}}
                           for d in spec["devices"]]
    if version == "v1beta1" and isinstance(spec.get("devices"), dict):
        spec["devices"]["requests"] = [{"name": r.get("name"), **(r.get("exactly") or {})}
                                       if isinstance(r, dict) and "exactly" in r else r
                                       for r in spec["devices"].get("requests") or []]
    return obj


def _consumable_in_use(old: Mapping[str, Any] | None) -> bool:
    """``draConsumableCapacityFeatureInUse``: the stored slice has a device with
    ``allowMultipleAllocations`` set or a capacity with a ``requestPolicy``."""
    for device in ((old or {}).get("spec") or {}).get("devices") or []:
        if isinstance(device, Mapping) and (device.get("allowMultipleAllocations") is not None or any(
                isinstance(c, Mapping) and c.get("requestPolicy") is not None
                for c in (device.get("capacity") or {}).values())):
            return True
    return False


def _drop_disabled(obj: dict[str, Any], device_taints: bool, consumable_capacity: bool = True,
                   old: Mapping[str, Any] | None = None) -> dict[str, Any]:
    drop_consumable = not consumable_capacity and not _consumable_in_use(old)
    for device in (obj.get("spec") or {}).get("devices") or []:
        if not isinstance(device, dict):
            continue
        if not device_taints:
            device.pop("taints", None)
        if drop_consumable:
            device.pop("allowMultipleAllocations", None)
            for entry in (device.get("capacity") or {}).values():
                if isinstance(entry, dict):
                    entry.pop("requestPolicy", None)
    return obj


# -- discovery ------------------------------------------------------------------------------
_RW = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]


def resources(version: str, device_taints: bool) -> list[dict[str, Any]]:
    found = [{"name": "resourceslices", "singularName": "resourceslice", "namespaced": False, "kind": "ResourceSlice",
              "verbs": _RW},
             {"name": "deviceclasses", "singularName": "deviceclass", "namespaced": False, "kind": "DeviceClass",
              "verbs": _RW},
             {"name": "resourceclaims", "singularName": "resourceclaim", "namespaced": True, "kind": "ResourceClaim",
              "verbs": _RW}]
    if device_taints:
        found.append({"name": "devicetaintrules", "singularName": "devicetaintrule", "namespaced": False,
                      "kind": "DeviceTaintRule", "verbs": _RW})
    return [dict(r, storageVersionHash="fake") for r in found]


def group(versions: tuple[str, ...]) -> dict[str, Any] | None:
    if not versions:
        return None
    listed = [{"groupVersion": f"{GROUP}/{v}", "version": v} for v in versions]
    return {"name": GROUP, "versions": listed, "preferredVersion": listed[0]}


# -- routing --------------------------------------------------------------------------------
def _kind(plural: str) -> tuple[str, str]:
    return ("ResourceSlice", SLICES) if plural == "resourceslices" else ("DeviceClass", CLASSES)


def _list(server: FakeApiServer, plural: str, version: str, query: Mapping[str, str], handler: Any) -> Any:
    kind, store_key = _kind(plural)
    field = query.get("fieldSelector")
    for term in selectors._split(field or ""):
        label = re.split(r"!=|==|=", term, maxsplit=1)[0].strip()
        if label not in (SELECTABLE if plural == "resourceslices" else {"metadata.name"}):
            raise ApiError(400, status_body(400, f'field label not supported: {label}'))
    match = selectors.selector(field, query.get("labelSelector"))
    if query.get("watch") in ("true", "1"):
        server._watch(store_key, None, match, dict(query), handler, lambda obj: from_stored(obj, version, kind))
        return None
    items, rv = server.store.list(store_key, None, match)
    out = []
    for item in items:
        converted = from_stored(item, version, kind)
        converted.pop("apiVersion", None)
        converted.pop("kind", None)
        out.append(converted)
    return 200, {"kind": f"{kind}List", "apiVersion": f"{GROUP}/{version}", "metadata": {"resourceVersion": str(rv)},
                 "items": out}


def _dry_run(query: Mapping[str, str], method: str) -> bool:
    """``dryRun=All`` (the one value ``ValidateDryRun`` accepts) or nothing."""
    value = query.get("dryRun")
    if value is None:
        return False
    if value != "All":
        options = "CreateOptions" if method == "POST" else "UpdateOptions"
        raise invalid_error(f"{options}.meta.k8s.io", "", [validation.Cause(
            "FieldValueNotSupported", f'Unsupported value: "{value}": supported values: "All"', "dryRun")])
    return True


def _write(server: FakeApiServer, plural: str, version: str, name: str | None, body: Any,
           current: dict[str, Any] | None, dry_run: bool = False) -> dict[str, Any]:
    kind, store_key = _kind(plural)
    if not isinstance(body, dict):
        raise ApiError(400, status_body(400, f"the body of the request must be a {kind} object"))
    obj = _drop_disabled(to_stored(body, version), server.dra_device_taints, server.dra_consumable_capacity, current)
    if plural == "resourceslices":
        _canonical_capacity(obj)
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise ApiError(400, status_body(400, "metadata must be an object"))
    meta.pop("namespace", None)
    if current is None and not meta.get("name") and meta.get("generateName"):
        meta["name"] = server.generated_name(str(meta["generateName"]))
    obj_name = str(meta.get("name") or name or "")
    causes: list[validation.Cause] = []
    if not obj_name:
        causes.append(validation.Cause("FieldValueRequired", "Required value: name or generateName is required",
                                       "metadata.name"))
    elif _subdomain_problem(obj_name):
        causes.append(validation.invalid("metadata.name", obj_name, str(_subdomain_problem(obj_name))))
    causes += validate_slice(obj, current) if plural == "resourceslices" else validate_class(obj)
    if causes:
        raise invalid_error(f"{kind}.{GROUP}", obj_name, causes)
    obj["apiVersion"], obj["kind"] = f"{GROUP}/v1", kind
    if dry_run:  # everything a write does, nothing stored
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return obj
    if current is None:
        try:
            return server.store.create(store_key, obj)
        except AlreadyExists as err:
            raise ApiError(409, status_body(409, f'{store_key} "{obj_name}" already exists', reason="AlreadyExists",
                                            name=obj_name, kind=plural)) from err
    wanted = meta.get("resourceVersion")

    def replace(stored: dict[str, Any]) -> dict[str, Any]:
        if wanted not in (None, "") and str(wanted) != stored["metadata"]["resourceVersion"]:
            raise Conflict(store_key, obj_name)
        return obj

    try:
        return server.store.update(store_key, obj_name, replace)[0]
    except Conflict as err:
        raise ApiError(409, status_body(409, str(err), name=obj_name, kind=plural)) from err


def route(server: FakeApiServer, method: str, parts: list[str], query: Mapping[str, str], body: Any,
          content_type: str, handler: Any = None) -> tuple[int, Any] | None:
    if parts[:2] != ["apis", GROUP] or len(parts) < 3:
        return None
    version = parts[2]
    if version not in server.dra_versions:
        raise ApiError(404, status_body(404, "the server could not find the requested resource"))
    rest = parts[3:]
    if rest[:1] == ["watch"]:
        rest, query = rest[1:], dict(query, watch="true")
    if not rest or rest[0] not in ("resourceslices", "deviceclasses") or len(rest) > 2:
        raise ApiError(404, status_body(404, "the server could not find the requested resource"))
    plural = rest[0]
    kind, store_key = _kind(plural)
    if len(rest) == 1:
        if method == "GET":
            return _list(server, plural, version, query, handler)  # type: ignore[no-any-return]
        if method == "POST":
            written = _write(server, plural, version, None, body, None, _dry_run(query, method))
            return 201, from_stored(written, version, kind)
        raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))
    name = rest[1]
    if method == "GET":
        return 200, from_stored(server.store.get(store_key, name), version, kind)
    if method == "DELETE":
        return 200, from_stored(server.store.delete(store_key, name), version, kind)
    current = server.store.get(store_key, name)
    if method == "PATCH":
        body = patching.apply(content_type, from_stored(current, version, kind), body)
    elif method != "PUT":
        raise ApiError(405, status_body(405, "the server does not allow this method on the requested resource"))
    return 200, from_stored(_write(server, plural, version, name, body, current, _dry_run(query, method)), version, kind)
