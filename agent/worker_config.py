"""``--config FILE``: NFD's worker configuration (``nfd-worker.conf``) read into a ``DiscoveryConfig``.

The file NFD users already have works unchanged (NFD ``pkg/nfd-worker/nfd-worker.go``
``configure``, ``configureCore``; ``docs/reference/worker-configuration-reference.md``):

- ``core.featureSources`` / ``core.labelSources``: ``all``, names, ``-name`` to drop one,
  processed in order as NFD does; ``core.sources`` is NFD's deprecated alias of labelSources;
- ``core.labelWhiteList``: a Go (RE2) regexp matched against each raw label's name without
  its ``<prefix>/``;
- ``sources.<name>``: each source's own section, parsed from the fields its ``Config``
  declares (``agent/sources/_config.py``): ``pci``/``usb`` ``deviceClassWhitelist`` and
  ``deviceLabelFields``, ``cpu.cpuid.attributeBlacklist`` / ``attributeWhitelist``,
  ``kernel.kconfigFile`` / ``configOpts``;
- our additions live in their own section, ``nodeFeatureAgent.sources.<name>`` (``local.featuresDir``,
  ``devicetree.extraNodes``), which NFD ignores, so one file can serve both.

As in NFD, a value set to null (``configOpts:`` with nothing under it) is an empty list.
NFD options that mean nothing here (``noPublish``, ``sleepInterval``, ``klog``, owner
references, ``sources.custom`` rules) are accepted with a warning saying what to use instead.
Stricter than NFD, which ignores unknown keys: an unknown key, a wrong type (``- 03`` is a
number to YAML, not the class ``"03"``), an unknown source or a bad regexp is an error naming
``file:line``, and the file is refused as a whole.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType

import yaml

from agent.discovery import DiscoveryConfig
from agent.rules.yaml_lines import LineList, LineMap, YamlShapeError, load_documents
from agent.sources import SOURCE_NAMES
from agent.sources._config import STRINGS

SourceValues = dict[str, str | tuple[str, ...]]  # a source's Config fields as parsed, by field name

MAX_CONFIG_BYTES = 1024 * 1024
AGENT_SECTION = "nodeFeatureAgent"
#: NFD source names this agent does not implement: named without error, with a warning
NFD_ONLY_SOURCES = {"custom": "its rules are NodeFeatureRules here: put them in a --rules directory",
                    "fake": "NFD's test source"}
#: NFD core options that mean nothing for this agent, and what to use instead
IGNORED_CORE = {
    "noPublish": "use `node-feature-agent plan` or `apply --dry-run` for a run that writes nothing",
    "sleepInterval": "this agent rediscovers on device events; the safety-net period is --resync-interval",
    "klog": "use --log-level / --log-format",
    "noOwnerRefs": "this agent publishes no NodeFeature object",
    "ownerRefs": "this agent publishes no NodeFeature object",
    "noPublishFeatures": "this agent publishes no NodeFeature object",
}


@dataclass(frozen=True)
class ConfigProblem:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


class WorkerConfigError(ValueError):
    """The file cannot be used; ``problems`` says where and why (one line each). ``digest``
    names the content refused (``unreadable: <errno>`` when it could not be read), so a
    reloader reports each distinct broken content once."""

    def __init__(self, problems: list[ConfigProblem], digest: str = ""):
        self.problems = tuple(problems)
        self.digest = digest
        super().__init__("; ".join(str(p) for p in problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else ""))


@dataclass(frozen=True)
class WorkerConfig:
    """A valid file's meaning: the discovery config, the feature sources it enables, and
    warnings about options that have no effect here."""

    discovery: DiscoveryConfig
    feature_sources: tuple[str, ...] = SOURCE_NAMES
    warnings: tuple[ConfigProblem, ...] = ()
    digest: str = ""  # of the bytes it was parsed from: a reload of the same content changes nothing


def load_worker_config(path: str, node_name: str = "") -> WorkerConfig:
    """Read and parse ``path``; ``WorkerConfigError`` for an unreadable or invalid file. The
    one reader of the file: the commands' first load (``agent.config.worker_config``) and
    ``run``'s reloads (``agent.runtime.config_state``) both come here."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise WorkerConfigError([ConfigProblem(path, 0, f"cannot read: {exc.strerror or exc}")],
                                f"unreadable: {exc.errno}") from exc
    digest = hashlib.sha1(data).hexdigest()
    if len(data) > MAX_CONFIG_BYTES:
        raise WorkerConfigError([ConfigProblem(path, 0, f"larger than {MAX_CONFIG_BYTES} bytes")], digest)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise WorkerConfigError([ConfigProblem(path, 0, f"not UTF-8 text (byte {exc.start})")], digest) from exc
    try:
        return dataclasses.replace(parse_worker_config(text, path, node_name), digest=digest)
    except WorkerConfigError as exc:
        exc.digest = digest
        raise


def parse_worker_config(text: str, path: str = "<config>", node_name: str = "") -> WorkerConfig:
    """Pure parse of the file's text (see module docstring)."""
    parser = _Parser(path)
    try:
        documents = list(load_documents(text))
    except YamlShapeError as exc:
        raise WorkerConfigError([ConfigProblem(path, exc.line, str(exc))]) from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise WorkerConfigError([ConfigProblem(path, line, f"not YAML: {getattr(exc, 'problem', None) or exc}")]) from exc
    if len(documents) > 1:
        parser.error(documents[1][0], "more than one YAML document; nfd-worker.conf is one")
    root = documents[0][1] if documents else None
    result = parser.parse(root, node_name)
    if parser.problems:
        raise WorkerConfigError(parser.problems)
    return result


class _Parser:
    def __init__(self, path: str) -> None:
        self.path = path
        self.problems: list[ConfigProblem] = []
        self.warnings: list[ConfigProblem] = []

    def error(self, line: int, message: str) -> None:
        self.problems.append(ConfigProblem(self.path, line, message))

    def warn(self, line: int, message: str) -> None:
        self.warnings.append(ConfigProblem(self.path, line, message))

    # -- shapes -------------------------------------------------------------------------------
    def mapping(self, value: object, where: str, line: int) -> LineMap | None:
        if value is None:
            return None
        if not isinstance(value, LineMap):
            self.error(getattr(value, "line", line), f"{where} must be a mapping, not {_kind(value)}")
            return None
        return value

    def strings(self, value: object, where: str, line: int) -> tuple[str, ...] | None:
        if value is None:
            return ()
        if not isinstance(value, LineList):
            self.error(line, f"{where} must be a list of strings, not {_kind(value)}")
            return None
        items = []
        for index, item in enumerate(value):
            if not isinstance(item, str):
                self.error(value.line_of(index), f"{where}[{index}] must be a string, not {_kind(item)} {item!r}"
                           " (quote it: YAML reads 03 or 0200 as numbers)")
                return None
            items.append(item)
        return tuple(items)

    def string(self, value: object, where: str, line: int) -> str | None:
        if value is None:
            return ""
        if not isinstance(value, str):
            self.error(line, f"{where} must be a string, not {_kind(value)}")
            return None
        return value

    # -- sections -----------------------------------------------------------------------------
    def parse(self, root: object, node_name: str) -> WorkerConfig:
        root = self.mapping(root, "the file", 1) or _empty()
        for key in root:
            if key not in ("core", "sources", AGENT_SECTION):
                self.error(root.line_of(key), f"unknown top-level key {key!r} (known: core, sources, {AGENT_SECTION})")
        feature_sources, label_sources, whitelist = self.core(root.get("core"), root.line_of("core"))
        configs: dict[str, SourceValues] = {}
        self.sources(root.get("sources"), root.line_of("sources"), "sources", configs)
        agent = self.mapping(root.get(AGENT_SECTION), AGENT_SECTION, root.line_of(AGENT_SECTION))
        if agent is not None:
            for key in agent:
                if key != "sources":
                    self.error(agent.line_of(key), f"unknown key {AGENT_SECTION}.{key} (known: sources)")
            self.sources(agent.get("sources"), agent.line_of("sources"), f"{AGENT_SECTION}.sources", configs)
        built = {name: _module(name).Config(**values) for name, values in configs.items()}
        discovery = DiscoveryConfig(sources=built, node_name=node_name, label_sources=label_sources,
                                    label_whitelist=whitelist)
        return WorkerConfig(discovery, feature_sources, tuple(self.warnings))

    def core(self, value: object, line: int) -> tuple[tuple[str, ...], frozenset[str] | None, str]:
        core = self.mapping(value, "core", line) or _empty()
        for key in core:
            if key in IGNORED_CORE:
                self.warn(core.line_of(key), f"core.{key} has no effect here: {IGNORED_CORE[key]}")
            elif key not in ("labelWhiteList", "featureSources", "labelSources", "sources"):
                self.error(core.line_of(key), f"unknown key core.{key}")
        whitelist = self.string(core.get("labelWhiteList"), "core.labelWhiteList", core.line_of("labelWhiteList")) or ""
        if whitelist:
            from agent.gotemplate.regexp import FunctionError, compile_go

            try:
                compile_go(whitelist)
            except FunctionError as exc:
                self.error(core.line_of("labelWhiteList"), f"core.labelWhiteList: {exc}")
        features = self.source_list(core, "featureSources")
        label_key = "labelSources"
        if "sources" in core:
            self.warn(core.line_of("sources"), "core.sources is NFD's deprecated name of core.labelSources")
            label_key = "sources"
        labels = self.source_list(core, label_key)
        return tuple(sorted(features)), (None if labels == set(SOURCE_NAMES) else frozenset(labels)), whitelist

    def source_list(self, core: LineMap, key: str) -> set[str]:
        """NFD's resolution of ``[all, -usb, ...]`` in order (``configureCore``)."""
        if key not in core:
            return set(SOURCE_NAMES)
        line = core.line_of(key)
        names = self.strings(core[key], f"core.{key}", line)
        if names is None:
            return set(SOURCE_NAMES)
        if not names:
            self.warn(line, f"core.{key} is empty: as in NFD, no source is enabled")
        enabled: set[str] = set()
        for name in names:
            stripped = name[1:] if name.startswith("-") else name
            if name == "all":
                enabled |= set(SOURCE_NAMES)
            elif stripped in SOURCE_NAMES:
                (enabled.discard if name.startswith("-") else enabled.add)(stripped)
            elif stripped in NFD_ONLY_SOURCES:
                self.warn(line, f"core.{key}: NFD source {stripped!r} is not part of this agent ({NFD_ONLY_SOURCES[stripped]})")
            else:
                self.error(line, f"core.{key}: unknown source {name!r} (known: all, {', '.join(SOURCE_NAMES)})")
        return enabled

    def sources(self, value: object, line: int, where: str, configs: dict[str, SourceValues]) -> None:
        sources = self.mapping(value, where, line)
        if sources is None:
            return
        section = "sources" if where == "sources" else f"{AGENT_SECTION}.sources"
        for name, body in sources.items():
            name_line = sources.line_of(name)
            if name in NFD_ONLY_SOURCES and section == "sources":
                self.warn(name_line, f"sources.{name} ignored: {NFD_ONLY_SOURCES[name]}")
                continue
            if name not in SOURCE_NAMES:
                self.error(name_line, f"{where}.{name}: unknown source (known: {', '.join(SOURCE_NAMES)})")
                continue
            self.source_section(name, body, name_line, f"{where}.{name}", section, configs.setdefault(name, {}))

    def source_section(self, name: str, body: object, line: int, where: str, section: str, values: SourceValues) -> None:
        fields = {f.metadata["key"]: f for f in dataclasses.fields(_module(name).Config)
                  if f.metadata.get("section") == section}
        mapping = self.mapping(body, where, line)
        if mapping is None:
            return
        seen: set[str] = set()
        parents = {k.rsplit(".", 1)[0] for k in fields if "." in k}
        for key, value, key_line in _flatten(mapping, parents):
            field = fields.get(key)
            if field is None:
                known = ", ".join(sorted(fields)) or "none"
                self.error(key_line, f"unknown key {where}.{key} (known: {known})")
                continue
            seen.add(key)
            reader = self.strings if field.metadata["kind"] == STRINGS else self.string
            parsed = reader(value, f"{where}.{key}", key_line)
            if parsed is not None:
                values[field.name] = parsed
                self.check_values(name, key, parsed, key_line, where)

    def check_values(self, source: str, key: str, values: str | tuple[str, ...], line: int, where: str) -> None:
        """Warnings for values NFD would silently ignore."""
        if key == "deviceLabelFields":
            valid = _module(source).LABEL_FIELDS
            unknown = [v for v in values if v not in valid]
            if unknown:
                self.warn(line, f"{where}.{key}: {', '.join(map(repr, unknown))} ignored (valid: {', '.join(valid)})")
        elif key == "deviceClassWhitelist":
            bad = [v for v in values if not (v and all(c in "0123456789abcdefABCDEF" for c in v))]
            if bad:
                self.warn(line, f"{where}.{key}: {', '.join(map(repr, bad))} are not hex class prefixes and match nothing")


def _flatten(mapping: LineMap, parents: set[str], prefix: str = "") -> Iterator[tuple[str, object, int]]:
    """``(dotted key, value, line)``: a mapping under a key that nests options (``cpuid``)
    yields its keys dotted (``cpuid.attributeBlacklist``)."""
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if dotted in parents and (isinstance(value, LineMap) or value is None):
            yield from _flatten(value or _empty(), parents, dotted + ".")
        else:
            yield dotted, value, mapping.line_of(key)


def _empty() -> LineMap:
    empty = LineMap()
    empty.key_lines = {}
    return empty


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"agent.sources.{name}")


def _kind(value: object) -> str:
    return {dict: "a mapping", LineMap: "a mapping", list: "a list", LineList: "a list", bool: "a boolean",
            int: "a number", float: "a number", str: "a string", type(None): "null"}.get(type(value), type(value).__name__)
