"""Run the discovery sources against one host root and merge their results.

A source that raises is contained here: its failure becomes one ``SourceError`` and the
other sources still run.  Labels a source produced that Kubernetes would reject are dropped
with an error entry, as NFD drops them (``GetFeatureLabels``), so nothing invalid leaves
discovery.
"""

from __future__ import annotations

import importlib
import logging
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from agent.features import Feature, SourceError, SourceResult
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import SOURCE_NAMES

log = logging.getLogger(__name__)

LOCAL_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"


@dataclass(frozen=True)
class DiscoveryConfig:
    """Per-source settings, NFD's defaults unless said otherwise (``nfd.md`` section 1)."""

    pci_class_whitelist: tuple[str, ...] = ("03", "0b40", "12")
    pci_label_fields: tuple[str, ...] = ("class", "vendor")
    usb_class_whitelist: tuple[str, ...] = ("0e", "ef", "fe", "ff")
    usb_label_fields: tuple[str, ...] = ("class", "vendor", "device")
    cpuid_blacklist: tuple[str, ...] = (
        "AVX10", "BMI1", "BMI2", "CLMUL", "CMOV", "CX16", "ERMS", "F16C", "HTT", "LZCNT",
        "MMX", "MMXEXT", "NX", "POPCNT", "RDRAND", "RDSEED", "RDTSCP", "SGX", "SGXLC", "SSE",
        "SSE2", "SSE3", "SSE4", "SSE42", "SSSE3", "TDX_GUEST",
    )
    cpuid_whitelist: tuple[str, ...] = ()
    kernel_config_opts: tuple[str, ...] = ("NO_HZ", "NO_HZ_IDLE", "NO_HZ_FULL", "PREEMPT")
    kernel_config_file: str = ""
    local_features_dir: str = LOCAL_FEATURES_DIR
    #: extra device-tree nodes whose ``compatible`` strings are labelled (dt-node-labeller ``-n``)
    devicetree_extra_nodes: tuple[str, ...] = ()
    node_name: str = ""


@dataclass(frozen=True)
class Discovery:
    """All sources' results for one host, merged."""

    results: Mapping[str, SourceResult]
    durations: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", MappingProxyType(dict(self.results)))
        object.__setattr__(self, "durations", MappingProxyType(dict(self.durations)))

    @property
    def features(self) -> dict[str, Feature]:
        """Every raw feature keyed ``<source>.<feature>`` (``pci.device``)."""
        merged: dict[str, Feature] = {}
        for result in self.results.values():
            merged.update(result.qualified_features())
        return merged

    @property
    def labels(self) -> dict[str, str]:
        """Raw feature labels; ``local`` is merged last so feature files override (NFD priority)."""
        merged: dict[str, str] = {}
        for name in sorted(self.results, key=lambda n: (n == "local", n)):
            merged.update(self.results[name].labels)
        return dict(sorted(merged.items()))

    @property
    def label_origins(self) -> dict[str, str]:
        origins: dict[str, str] = {}
        for result in self.results.values():
            origins.update(result.label_origins)
        return origins

    @property
    def errors(self) -> tuple[SourceError, ...]:
        return tuple(e for name in sorted(self.results) for e in self.results[name].errors)

    def to_json(self) -> dict[str, Any]:
        return {
            "labels": self.labels,
            "features": {k: v.to_json() for k, v in sorted(self.features.items())},
            "errors": [e.to_json() for e in self.errors],
        }


def _load_source(name: str):
    return importlib.import_module(f"agent.sources.{name}")


def _valid_labels(result: SourceResult) -> SourceResult:
    """Drop labels Kubernetes would reject, recording why (as NFD does, but not silently)."""
    kept: dict[str, str] = {}
    errors = list(result.errors)
    for key, value in result.labels.items():
        problems = qualified_name_errors(key) + label_value_errors(str(value))
        if problems:
            errors.append(SourceError(result.source, result.label_origins.get(key, ""), f"label {key}={value!r} dropped: {'; '.join(problems)}"))
        else:
            kept[key] = str(value)
    if len(kept) == len(result.labels):
        return result
    return SourceResult(result.source, result.features, kept, tuple(errors), result.label_origins)


def run_source(name: str, host: HostFS, config: DiscoveryConfig) -> SourceResult:
    """One source, contained: any exception becomes a ``SourceError``."""
    try:
        module = _load_source(name)
        result = module.discover(host, config)
    except Exception as exc:  # a broken source must never stop the others
        log.warning("source %s failed: %s", name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return SourceResult(name, errors=(SourceError(name, getattr(exc, "host_path", ""), f"source failed: {exc}"),))
    for error in result.errors:
        log.info("discovery problem: %s", error)
    return _valid_labels(result)


def discover(host: HostFS, config: DiscoveryConfig | None = None, sources: Iterable[str] | None = None) -> Discovery:
    """Run ``sources`` (default: all) against ``host``."""
    config = config or DiscoveryConfig()
    names = list(sources) if sources is not None else list(SOURCE_NAMES)
    unknown = [n for n in names if n not in SOURCE_NAMES]
    if unknown:
        raise ValueError(f"unknown source(s): {', '.join(unknown)} (known: {', '.join(SOURCE_NAMES)})")
    host.clear_cache()
    results: dict[str, SourceResult] = {}
    durations: dict[str, float] = {}
    for name in sorted(names):
        started = time.perf_counter()
        results[name] = run_source(name, host, config)
        durations[name] = time.perf_counter() - started
    return Discovery(results, durations)
