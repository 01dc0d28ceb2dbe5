"""Discovery sources, one module each, all of one shape: :class:`Source`.

Each module ``agent/sources/<name>.py`` defines ``NAME``, ``FEATURES`` (the features it can
produce), its own ``Config`` (a frozen dataclass with its defaults: its section of
nfd-worker.conf, see ``_config``) and ``discover(host, config) -> SourceResult``. A source
never imports the runner (``agent.discovery``); the runner hands each source its section. A
source reads the host only through the seam, never calls Kubernetes, reports what it could
not make sense of as ``SourceError`` entries instead of raising, and what it could not read
as undetermined (``SourceResult.undetermined``), never as absent.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from agent.features import ElementNames, SourceResult
    from agent.hostfs import HostFS

SOURCE_NAMES = (
    "cpu",
    "devicetree",
    "kernel",
    "local",
    "memory",
    "network",
    "pci",
    "storage",
    "system",
    "usb",
)
"""Every source, in NFD's order (sorted by name); ``--sources`` picks a subset."""


class Source(Protocol):
    """The shape of a source module (as NFD's ``FeatureSource`` and ``ConfigurableSource``)."""

    NAME: str
    FEATURES: Mapping[str, ElementNames]

    @property
    def Config(self) -> type[Any]: ...  # the module's class of that name

    def discover(self, host: HostFS, config: Any) -> SourceResult: ...


def source(name: str) -> Source:
    """The source module ``name`` (one of :data:`SOURCE_NAMES`)."""
    return cast(Source, importlib.import_module(f"agent.sources.{name}"))


def feature_vocabulary() -> dict[str, frozenset[str] | None]:
    """Every feature a source can produce, ``<source>.<feature>`` -> its element names (each
    source's ``FEATURES``; ``None``: an open set)."""
    vocabulary: dict[str, frozenset[str] | None] = {}
    for name in SOURCE_NAMES:
        for feature, elements in source(name).FEATURES.items():
            vocabulary[f"{name}.{feature}"] = elements
    return vocabulary


if TYPE_CHECKING:  # mypy holds every source module to the protocol
    from agent.sources import cpu, devicetree, kernel, local, memory, network, pci, storage, system, usb

    _cpu: Source = cpu
    _devicetree: Source = devicetree
    _kernel: Source = kernel
    _local: Source = local
    _memory: Source = memory
    _network: Source = network
    _pci: Source = pci
    _storage: Source = storage
    _system: Source = system
    _usb: Source = usb
