"""Typed, immutable discovery results shared by sources, rules, explain and snapshot.

The model mirrors Node Feature Discovery's raw features (``api/nfd/v1alpha1/types.go``):
a feature named ``<source>.<feature>`` (``pci.device``, ``cpu.cpuid``) carries *flags* (a set
of names), *attributes* (name -> string) and/or *instances* (a list of attribute maps, one per
device).  Keeping NFD's shape is what lets published NodeFeatureRules evaluate unchanged.
Every feature and instance remembers the host path it came from so ``explain`` can name it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

NFD_PREFIX = "feature.node.kubernetes.io/"
"""Namespace of Node Feature Discovery's built-in labels; ours are byte-identical."""


def frozen_map(items: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> Mapping[str, str]:
    """A read-only copy, so a feature set cannot be mutated after discovery."""
    return MappingProxyType(dict(items or {}))


#: C0/C1 control characters (NUL, newline, ESC, DEL, ...) and the Unicode line and paragraph
#: separators: what could turn a device string into structure (an extra ``key=value`` line
#: in a template's output, a forged log line).
_CONTROL = dict.fromkeys([*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029])


def host_text(value: Any) -> str:
    """A host-supplied string as data: control characters and line breaks removed.

    Every flag name, attribute name and attribute value of a feature passes through here
    (``Feature``/``Instance`` constructors), so no source can forget it: a USB ``serial``,
    a DT ``model`` or a local feature file line can never carry a newline into a template's
    output or a label."""
    text = value if isinstance(value, str) else str(value)
    return text if text.isprintable() else text.translate(_CONTROL)


def host_map(items: Mapping[str, str] | Iterable[tuple[str, str]] | None = None) -> Mapping[str, str]:
    """``frozen_map`` with every key and value passed through :func:`host_text`."""
    copy = dict(items or {})
    try:
        # one C-level check for the usual case (every key and value already clean text)
        clean = "".join([*copy, *copy.values()]).isprintable()
    except TypeError:  # a non-string key or value: convert each
        clean = False
    if clean:
        return MappingProxyType(copy)
    return MappingProxyType({host_text(k): host_text(v) for k, v in copy.items()})


_set_frozen = object.__setattr__
"""How a frozen dataclass's own ``__init__`` stores its fields."""


ElementNames = frozenset[str] | None
"""What a feature can carry, for ``validate``: its flag names, its attribute names, or the
attribute names of each of its instances; ``None`` when the set is open (kernel config
options, os-release keys, CPUID flags). Each source declares ``FEATURES``: feature name ->
``ElementNames``."""


def nfd_label(source: str, key: str) -> str:
    """NFD's label name for a built-in source key: ``cpu`` + ``cpuid.AVX2`` ->
    ``feature.node.kubernetes.io/cpu-cpuid.AVX2`` (``GetFeatureLabels`` in nfd-worker)."""
    return f"{NFD_PREFIX}{source}-{key}"


def undetermined_key(patterns: Iterable[str], key: str) -> bool:
    """Whether ``key`` is one of ``patterns`` (``SourceResult.undetermined``'s label keys: a
    pattern ending in ``*`` matches every key it is a prefix of)."""
    return any(key == p or (p.endswith("*") and key.startswith(p[:-1])) for p in patterns)


@dataclass(frozen=True)
class Instance:
    """One device (or other repeated thing): its attributes and the host path describing it."""

    attributes: Mapping[str, str]
    origin: str = ""

    # written by hand (the dataclass keeps it) so the hundreds of instances of a big host's
    # pass take one ``host_map`` and two plain stores, not the generated init plus
    # ``__post_init__``'s second store: same fields, same cleaning
    def __init__(self, attributes: Mapping[str, str] | Iterable[tuple[str, str]], origin: str = "") -> None:
        _set_frozen(self, "attributes", host_map(attributes))
        _set_frozen(self, "origin", origin)

    def to_json(self) -> dict[str, Any]:
        return {"attributes": dict(self.attributes), "origin": self.origin}


@dataclass(frozen=True)
class Feature:
    """One raw feature: any mix of flags, attributes and instances.

    ``kinds`` says which of NFD's sets hold this feature, even empty: the sets a constructor
    was given (``Feature(instances=[])`` is an instance feature with no instances, as NFD's
    ``usb.device`` on a node without USB devices). Matching depends on it as NFD's does:
    ``DoesNotExist`` holds on an empty flag set but never on zero instances."""

    flags: frozenset[str]
    attributes: Mapping[str, str]
    instances: tuple[Instance, ...]
    origin: str
    #: host path per flag/attribute name where it differs from ``origin`` (for explain)
    element_origins: Mapping[str, str]
    kinds: frozenset[str]

    def __init__(self, flags: Iterable[str] | None = None, attributes: Mapping[str, str] | None = None,
                 instances: Iterable[Instance] | None = None, origin: str = "",
                 element_origins: Mapping[str, str] | None = None, kinds: Iterable[str] | None = None) -> None:
        given = {"flags": flags, "attributes": attributes, "instances": instances}
        _set_frozen(self, "flags", frozenset(host_text(f) for f in flags or ()))
        _set_frozen(self, "attributes", host_map(attributes))
        _set_frozen(self, "instances", tuple(instances or ()))
        _set_frozen(self, "origin", origin)
        _set_frozen(self, "element_origins", frozen_map(element_origins))
        _set_frozen(self, "kinds", frozenset(kinds if kinds is not None else (k for k, v in given.items() if v is not None)))

    def origin_of(self, element: str) -> str:
        return self.element_origins.get(element, self.origin)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.flags:
            out["flags"] = sorted(self.flags)
        if self.attributes:
            out["attributes"] = dict(sorted(self.attributes.items()))
        if self.instances:
            out["instances"] = [dict(sorted(i.attributes.items())) for i in self.instances]
        return out


@dataclass(frozen=True)
class SourceError:
    """Something a source could not read or understand; discovery carries on without it."""

    source: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.source}: {self.path}: {self.message}" if self.path else f"{self.source}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return {"source": self.source, "path": self.path, "message": self.message}


@dataclass(frozen=True)
class SourceResult:
    """What one source found: raw features keyed by feature name (``device`` for
    ``pci.device``), the NFD raw labels (fully qualified keys), and errors."""

    source: str
    features: Mapping[str, Feature] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    errors: Sequence[SourceError] = ()  # stored as a tuple
    #: label key -> host path that supplied its value (for explain)
    label_origins: Mapping[str, str] = field(default_factory=dict)
    #: feature name -> the label keys it gives, for each feature this pass could not determine
    #: because a read failed (an error, not evidence of absence: its answer is missing from
    #: ``features`` and ``labels`` as NFD would leave it out). A key ending in ``*`` stands for
    #: every key it is a prefix of (a device whose IDs could not be read gives a label no one
    #: can name: ``feature.node.kubernetes.io/pci-*``; :func:`undetermined_key`). A caller
    #: holding an earlier pass keeps that pass's answer
    #: (``agent.discovery_evidence.carry_undetermined``).
    undetermined: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "features", MappingProxyType(dict(self.features)))
        object.__setattr__(self, "labels", frozen_map(self.labels))
        object.__setattr__(self, "errors", tuple(self.errors))
        object.__setattr__(self, "label_origins", frozen_map(self.label_origins))
        object.__setattr__(self, "undetermined",
                           MappingProxyType({k: tuple(v) for k, v in dict(self.undetermined).items()}))

    def qualified_features(self) -> dict[str, Feature]:
        """Features keyed ``<source>.<feature>`` as rules name them."""
        return {f"{self.source}.{name}": feat for name, feat in self.features.items()}
