"""Parse a rule's ``devices:`` section (our extension; ``labels/README.md``, "Devices for the
device plugin") into ``DeviceDeclaration``s.

Strict, as the rest of the parser: an unknown field, a node kind we do not know, a
permission other than r/w/m, a relative path or a resource the rule does not count with
``@count`` is a ``DeviceSpecError`` naming the line, and the whole rule is skipped (a
half-understood declaration could hand a container the wrong node).
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

from agent.device_claims import DeviceDeclaration, MountSpec, NodeSpec, NotReadySpec
from agent.rules.model import COUNT_REFERENCE, OutputItem
from agent.rules.yaml_lines import LineList, LineMap

FIELDS = {"deviceNodes", "permissions", "env", "mounts", "notReady", "shares"}
KINDS = ("class", "path", "glob")
MODIFIERS = {"containerPath", "optional", "group"}
MAX_SHARES = 1000
"""Largest sharing count: kubelet lists every replica ID in its checkpoint and in each
ListAndWatch update (generic-device-plugin's docs suggest counts up to 1000 for /dev/fuse)."""
_GLOB_CHARS = set("*?[")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLASS_NAME = re.compile(r"[A-Za-z0-9_.:-]+")


class DeviceSpecError(ValueError):
    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.line = line


def _text(value: Any, what: str, line: int) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise DeviceSpecError(f"{what} must be a string", line)
    return str(value)


def _absolute(value: Any, what: str, line: int) -> str:
    path = _text(value, what, line)
    if not path.startswith("/") or posixpath.normpath(path) != path or "\x00" in path:
        raise DeviceSpecError(f"{what} must be a normalised absolute path, not {path!r}", line)
    return path


def _node(item: Any, line: int) -> NodeSpec:
    if item == "usb":
        return NodeSpec("usb")
    kinds = [k for k in KINDS if isinstance(item, LineMap) and k in item]
    if not isinstance(item, LineMap) or len(kinds) != 1 or set(item) - {kinds[0]} - MODIFIERS:
        raise DeviceSpecError("a deviceNodes entry is 'usb', {class: <sysfs class>}, {path: /dev/...} or "
                              "{glob: /dev/...}, with optional containerPath, optional (path, glob) and "
                              "group (glob)", line)
    kind = kinds[0]
    container = _absolute(item["containerPath"], "deviceNodes containerPath", line) if "containerPath" in item else ""
    if container and not container.startswith("/dev/"):
        raise DeviceSpecError(f"deviceNodes containerPath {container!r} must be under /dev/", line)
    optional, group = _flag(item, "optional", line), _flag(item, "group", line)
    if kind == "class":
        return _class_node(_text(item[kind], "deviceNodes class", line), container, optional or group, line)
    return _dev_node(kind, _absolute(item[kind], f"deviceNodes {kind}", line), container, optional, group, line)


def _class_node(name: str, container: str, modified: bool, line: int) -> NodeSpec:
    if not _CLASS_NAME.fullmatch(name) or set(name) == {"."}:
        raise DeviceSpecError(f"deviceNodes class {name!r} is not a sysfs class name", line)
    if modified:
        raise DeviceSpecError("deviceNodes class takes containerPath only (optional and group are for "
                              "path and glob)", line)
    return NodeSpec("class", name, container)


def _dev_node(kind: str, path: str, container: str, optional: bool, group: bool, line: int) -> NodeSpec:
    """A ``path`` or ``glob`` entry: under /dev, a path without wildcards, a glob with them."""
    if not path.startswith("/dev/"):
        raise DeviceSpecError(f"deviceNodes {kind} {path!r} must be under /dev/ (nothing else is handed to a "
                              "container)", line)
    if kind == "path":
        if _GLOB_CHARS & set(path):
            raise DeviceSpecError(f"deviceNodes path {path!r} has wildcards; use glob", line)
        if group:
            raise DeviceSpecError("deviceNodes path is one node; group is for glob", line)
        return NodeSpec("path", path, container, optional)
    problem = glob_problem(path)
    if problem:
        raise DeviceSpecError(f"deviceNodes glob {path!r}: {problem}", line)
    if group and container:
        raise DeviceSpecError("deviceNodes glob with group: every match keeps its own name, so containerPath "
                              "cannot be given", line)
    return NodeSpec("glob", path, container, optional, group)


def glob_problem(pattern: str) -> str:
    """Why ``pattern`` is no glob the resolver takes ("" if it is one): wildcards (``*``, ``?``,
    ``[...]``) only in the last component, brackets closed and not empty, at least one wildcard."""
    directory, last = posixpath.split(pattern)
    if _GLOB_CHARS & set(directory) or "]" in directory:
        return "wildcards are allowed in the last path component only"
    if not _GLOB_CHARS & set(last):
        return "no wildcard; use path"
    depth, body = 0, 0
    for char in last:
        if char == "[":
            if depth:
                return "'[' inside a bracket expression"
            depth, body = 1, 0
        elif char == "]" and depth:
            if not body:
                return "an empty bracket expression '[]'"
            depth = 0
        elif char == "]":
            return "']' without '['"
        elif depth:
            body += 1
    if depth:
        return "a '[' that is never closed"
    return ""


def _flag(item: LineMap, key: str, line: int) -> bool:
    value = item.get(key, False)
    if not isinstance(value, bool):
        raise DeviceSpecError(f"deviceNodes {key} must be true or false", line)
    return value


def _mount(item: Any, line: int) -> MountSpec:
    if not isinstance(item, LineMap) or set(item) - {"hostPath", "containerPath", "readOnly"} or "hostPath" not in item:
        raise DeviceSpecError("a mounts entry is {hostPath, containerPath (default: hostPath), readOnly (default: true)}", line)
    host = _absolute(item["hostPath"], "mounts hostPath", line)
    container = _absolute(item.get("containerPath", host), "mounts containerPath", line)
    read_only = item.get("readOnly", True)
    if not isinstance(read_only, bool):
        raise DeviceSpecError("mounts readOnly must be true or false", line)
    return MountSpec(host, container, read_only)


def _not_ready(item: Any, line: int) -> NotReadySpec:
    if not isinstance(item, LineMap) or set(item) != {"match", "reason"} or not isinstance(item["match"], LineMap) \
            or not item["match"]:
        raise DeviceSpecError("a notReady entry is {match: {<attribute>: <value>, ...}, reason: <text>}", line)
    attributes = {str(k): _text(v, f"notReady match {k!r}", line) for k, v in item["match"].items()}
    return NotReadySpec(attributes, _text(item["reason"], "notReady reason", line))


def _list(spec: LineMap, key: str) -> LineList:
    value = spec.get(key)
    if value is None:
        return LineList()
    if not isinstance(value, LineList):
        raise DeviceSpecError(f"devices {key} must be a list", spec.line_of(key))
    return value


def parse_devices(spec: Any, line: int, path: str, resources: tuple[OutputItem, ...]) -> tuple[DeviceDeclaration, ...]:
    """``devices: {<resource>: {deviceNodes, shares, permissions, env, mounts, notReady}}``."""
    if spec is None:
        return ()
    if not isinstance(spec, LineMap):
        raise DeviceSpecError("devices must be a mapping of resource name to its device declaration", line)
    counted = {item.key for item in resources if item.value == COUNT_REFERENCE}
    out = []
    for resource, body in spec.items():
        at = spec.line_of(resource)
        if resource not in counted:
            raise DeviceSpecError(f"devices {resource!r}: the rule must count it (extendedResources {resource}: "
                                  f"\"{COUNT_REFERENCE}\")", at)
        if "/" not in str(resource) or "kubernetes.io/" in str(resource):
            # kubelet's device manager registers only IsExtendedResourceName names (unprefixed
            # names are auto-prefixed feature.node.kubernetes.io/, a native one)
            raise DeviceSpecError(f"devices {resource!r}: a device plugin's resource must be an extended resource "
                                  "name (domain/name outside kubernetes.io); kubelet refuses any other", at)
        if not isinstance(body, LineMap):
            raise DeviceSpecError(f"devices {resource!r} must be a mapping", at)
        unknown = set(body) - FIELDS
        if unknown:
            raise DeviceSpecError(f"devices {resource!r}: unknown field(s) {sorted(unknown)}", body.line)
        nodes = _device_nodes(resource, body)
        shares = _shares(resource, body)
        permissions = _permissions(resource, body)
        env = _env(resource, body)
        mounts_raw, ready_raw = _list(body, "mounts"), _list(body, "notReady")
        out.append(DeviceDeclaration(
            resource, nodes, permissions, env,
            tuple(_mount(m, mounts_raw.line_of(i)) for i, m in enumerate(mounts_raw)),
            tuple(_not_ready(n, ready_raw.line_of(i)) for i, n in enumerate(ready_raw)),
            f"{path}:{at}", shares))
    return tuple(out)


def _device_nodes(resource: object, body: LineMap) -> tuple[NodeSpec, ...]:
    nodes_raw = _list(body, "deviceNodes")
    if not nodes_raw:
        raise DeviceSpecError(f"devices {resource!r}: deviceNodes is required", body.line)
    nodes = tuple(_node(item, nodes_raw.line_of(i)) for i, item in enumerate(nodes_raw))
    if any(n.per_instance for n in nodes) and any(n.per_match for n in nodes):
        raise DeviceSpecError(f"devices {resource!r}: a glob without group makes a device of each match, usb and "
                              "class a device of each matched instance; one declaration takes one of the two",
                              nodes_raw.line_of(next(i for i, n in enumerate(nodes) if n.per_match)))
    return nodes


def _shares(resource: object, body: LineMap) -> int:
    """How many containers may hold one device at once: an integer 1..MAX_SHARES (default 1)."""
    value = body.get("shares", 1)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SHARES:
        raise DeviceSpecError(f"devices {resource!r}: shares {value!r} must be a whole number from 1 to "
                              f"{MAX_SHARES}", body.line_of("shares"))
    return value


def _permissions(resource: object, body: LineMap) -> str:
    """The cgroup device access: letters of "rwm", each at most once (default "rw")."""
    permissions = _text(body.get("permissions", "rw"), "permissions", body.line_of("permissions"))
    if not permissions or set(permissions) - set("rwm") or len(set(permissions)) != len(permissions):
        raise DeviceSpecError(f"devices {resource!r}: permissions {permissions!r} must be letters of 'rwm'",
                              body.line_of("permissions"))
    return permissions


def _env(resource: object, body: LineMap) -> dict[str, str]:
    env_raw = body.get("env") or LineMap()
    if not isinstance(env_raw, LineMap):
        raise DeviceSpecError(f"devices {resource!r}: env must be a mapping", body.line_of("env"))
    env = {}
    for key, value in env_raw.items():
        if not _ENV_NAME.fullmatch(str(key)):
            raise DeviceSpecError(f"devices {resource!r}: env name {key!r} is not a valid variable name",
                                  env_raw.line_of(key))
        env[str(key)] = _text(value, f"env {key}", env_raw.line_of(key))
    return env
