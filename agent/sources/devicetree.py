"""devicetree source: the board identity of ARM/RISC-V hosts, labelled like k8s-dt-node-labeller.

NFD has no device-tree source; Coral Dev Boards, Jetsons and Raspberry Pis are identified
by the root node's ``compatible`` list (``fsl,imx8mq-phanbell``, ``fsl,imx8mq``).  Every
string becomes ``beta.devicetree.org/<string with "," -> "-">=1``, the documented label form
of adaptant-labs' k8s-dt-node-labeller (which label files already depend on), and
``Config.extra_nodes`` (``nodeFeatureAgent.sources.devicetree.extraNodes``) adds further nodes' strings as its ``-n`` flag did.

Features:

- ``devicetree.compatible``: flags, the root's compatible strings;
- ``devicetree.model``: attributes ``model`` (+ ``serial-number`` when it is plain text);
- ``devicetree.node``: one instance per extra node found: ``name`` (``gpu@57000000``),
  ``path`` (``/gpu@57000000``), ``compatible`` (its first, most specific string),
  ``compatible.all`` (all strings, space-separated: compatible strings never contain
  whitespace, ones that do are rejected) and ``status`` when present.

Properties are NUL-separated string lists as the kernel exports them.  Anything that is
not (non-UTF-8, control bytes, empty entries, absurd sizes) is reported and skipped; a
string that is text but cannot form a label key stays in the features and gets no label.
No device tree at all (x86) is simply an empty result. A property that could not be read (not
absent: permissions, I/O), or was cut short (no final NUL), leaves its feature undetermined this pass, and with it every
``beta.devicetree.org/`` label, so the caller keeps its earlier answer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from agent.features import ElementNames, Feature, Instance, SourceResult
from agent.hostfs import HostFileError, HostFS, IncompleteFile
from agent.k8s_validation import qualified_name_errors
from agent.sources._config import agent_option
from agent.sources._sysfs import AttributeReader

NAME = "devicetree"
FEATURES: Mapping[str, ElementNames] = {
    "compatible": None,  # the root node's compatible strings, as flags
    "model": frozenset({"model", "serial-number"}),
    "node": frozenset({"name", "path", "compatible", "compatible.all", "status"}),
}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""

DT_BASES = ("/sys/firmware/devicetree/base", "/proc/device-tree")
"""Where the kernel exports the live tree; ``/proc/device-tree`` links to the first."""
LABEL_PREFIX = "beta.devicetree.org/"
LABEL_VALUE = "1"
UNDETERMINED_LABELS = LABEL_PREFIX + "*"
"""What an unreadable ``compatible`` decides: any device-tree label."""
MAX_PROPERTY_BYTES = 4096
"""Real ``compatible``/``model`` properties are well under 200 bytes; more is not a string list."""
MAX_NODES_SEARCHED = 4096


def split_string_list(data: bytes) -> tuple[list[str], list[str]]:
    """A DT string-list property -> ``(strings, problems)``.

    The kernel exports ``"a\\0b\\0"``; a missing final NUL is tolerated (and noted), empty
    entries are dropped, and an entry that is not printable UTF-8 text is dropped and named.
    """
    problems: list[str] = []
    if not data:
        return [], problems
    if data.endswith(b"\0"):
        data = data[:-1]
    else:
        problems.append("not NUL-terminated")
    strings: list[str] = []
    for piece in data.split(b"\0"):
        if not piece:
            problems.append("empty string in the list ignored")
            continue
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError:
            problems.append(f"entry {piece[:80]!r} is not UTF-8; ignored")
            continue
        if not text.isprintable():
            problems.append(f"entry {text[:80]!r} has control characters; ignored")
            continue
        strings.append(text)
    return strings, problems


def compatible_label(compatible: str) -> str:
    """``fsl,imx8mq-phanbell`` -> ``beta.devicetree.org/fsl-imx8mq-phanbell`` (may be invalid)."""
    return LABEL_PREFIX + compatible.replace(",", "-")


def find_base(reader: AttributeReader) -> str | None:
    for base in DT_BASES:
        if reader.is_dir(base):
            return base
    return None


@dataclass(frozen=True)
class Config:
    """Our own section (NFD has no device-tree source): ``nodeFeatureAgent.sources.devicetree``."""

    #: extra device-tree nodes whose ``compatible`` strings are labelled (dt-node-labeller ``-n``)
    extra_nodes: tuple[str, ...] = agent_option("extraNodes", ())


def discover(host: HostFS, config: Config = Config()) -> SourceResult:
    reader = AttributeReader(host, NAME)
    features: dict[str, Feature] = {}
    labels: dict[str, str] = {}
    origins: dict[str, str] = {}

    def label_all(strings: list[str], origin: str) -> None:
        for compatible in strings:
            key = compatible_label(compatible)
            problems = qualified_name_errors(key)
            if problems:
                reader.error(origin, f"compatible {compatible[:80]!r} cannot be a label key ({'; '.join(problems)}); not labelled")
                continue
            labels[key] = LABEL_VALUE
            origins.setdefault(key, origin)

    with reader.deciding("compatible", UNDETERMINED_LABELS):
        base = find_base(reader)
        root_compatible = read_compatible(reader, f"{base}/compatible") if base is not None else []
    if base is None:
        return SourceResult(NAME, errors=reader.errors, undetermined=reader.undetermined)
    if root_compatible:
        features["compatible"] = Feature(flags=root_compatible, origin=f"{base}/compatible")
        label_all(root_compatible, f"{base}/compatible")

    with reader.deciding("model"):
        model = read_identity(reader, base)
    if model is not None:
        features["model"] = model

    with reader.deciding("node", UNDETERMINED_LABELS):
        nodes = [read_node(reader, base, path) for path in find_extra_nodes(reader, base, config.extra_nodes)]
    for node in nodes:
        label_all(node_compatibles(node), f"{node.origin}/compatible")
    if nodes:
        features["node"] = Feature(instances=nodes, origin=base)
    return SourceResult(NAME, features, labels, reader.errors, origins, reader.undetermined)


def read_string_list(reader: AttributeReader, path: str) -> list[str]:
    """A string-list property; ``[]`` if missing, errors recorded for anything odd. One whose
    last string has no NUL was cut short (dtc stores every string of a list NUL-terminated and
    the kernel exports the property's bytes as they are): a failed read, so what it decides
    is undetermined, not a shorter string."""
    try:
        data = reader.host.read_bytes(path, MAX_PROPERTY_BYTES + 1)
    except HostFileError as exc:
        if not exc.missing:
            reader.failure(exc)
        return []
    if len(data) > MAX_PROPERTY_BYTES:
        reader.error(path, f"larger than {MAX_PROPERTY_BYTES} bytes, not a device-tree string list; ignored")
        return []
    if data and not data.endswith(b"\0"):
        reader.failure(IncompleteFile(path, "cut mid-string (no final NUL)"))
        return []
    strings, problems = split_string_list(data)
    for problem in problems:
        reader.error(path, problem)
    return strings


def read_compatible(reader: AttributeReader, path: str) -> list[str]:
    """A ``compatible`` list; entries with whitespace are not compatible strings and are dropped."""
    strings = []
    for text in read_string_list(reader, path):
        if any(ch.isspace() for ch in text):
            reader.error(path, f"compatible {text[:80]!r} contains whitespace; ignored")
        else:
            strings.append(text)
    return strings


def read_single_string(reader: AttributeReader, path: str) -> str | None:
    """A one-string property (``model``); ``None`` if missing or not one clean string."""
    strings = read_string_list(reader, path)
    if len(strings) > 1:
        reader.error(path, f"{len(strings)} strings where one was expected; using the first")
    return strings[0] if strings else None


def read_identity(reader: AttributeReader, base: str) -> Feature | None:
    """``model`` and, when present, ``serial-number`` of the root node."""
    attrs: dict[str, str] = {}
    origins: dict[str, str] = {}
    for prop in ("model", "serial-number"):
        value = read_single_string(reader, f"{base}/{prop}")
        if value is not None:
            attrs[prop] = value
            origins[prop] = f"{base}/{prop}"
    if not attrs:
        return None
    return Feature(attributes=attrs, origin=f"{base}/model", element_origins=origins)


def node_compatibles(node: Instance) -> list[str]:
    return node.attributes.get("compatible.all", "").split()


def read_node(reader: AttributeReader, base: str, dt_path: str) -> Instance:
    host_path = base + dt_path
    attrs = {"name": dt_path.rsplit("/", 1)[-1], "path": dt_path}
    strings = read_compatible(reader, f"{host_path}/compatible")
    if strings:
        attrs["compatible"] = strings[0]
        attrs["compatible.all"] = " ".join(strings)
    status = read_single_string(reader, f"{host_path}/status")
    if status is not None:
        attrs["status"] = status
    return Instance(attrs, host_path)


def find_extra_nodes(reader: AttributeReader, base: str, wanted: tuple[str, ...]) -> list[str]:
    """DT paths of the requested nodes, in request order.

    ``/a/b`` names an exact path; a bare name (``gpu``, ``pwm-fan``) matches every node of
    that name anywhere in the tree, with or without a unit address (``gpu@57000000``), as
    dt-node-labeller's ``-n`` did.  The walk is breadth-first and bounded.
    """
    if not wanted:
        return []
    found: list[str] = []
    names = [w for w in wanted if not w.startswith("/")]
    tree = walk_nodes(reader, base) if names else []
    for want in wanted:
        if want.startswith("/"):
            path = "/" + want.strip("/")
            matches = [path] if path != "/" and reader.is_dir(base + path) else []
        else:
            matches = [p for p in tree if p.rsplit("/", 1)[-1].split("@", 1)[0] == want or p.rsplit("/", 1)[-1] == want]
        if not matches:
            reader.error(base, f"device-tree node {want!r} not found")
        found.extend(m for m in matches if m not in found)
    return found


def walk_nodes(reader: AttributeReader, base: str) -> list[str]:
    """Every node path under ``base`` (breadth-first, at most ``MAX_NODES_SEARCHED``)."""
    nodes: list[str] = []
    queue = deque([""])
    while queue:
        current = queue.popleft()
        for child in reader.listdir(base + current or base):
            path = f"{current}/{child}"
            if reader.is_dir(base + path) and not reader.is_link(base + path):
                if len(nodes) >= MAX_NODES_SEARCHED:
                    reader.error(base, f"device tree has more than {MAX_NODES_SEARCHED} nodes; search stopped")
                    return nodes
                nodes.append(path)
                queue.append(path)
    return nodes
