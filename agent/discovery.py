"""Run the discovery sources against one host root and merge their results.

A source that raises is contained here: its failure becomes one ``SourceError``, what it
decides is undetermined (no answer is no evidence of absence), and the other sources still
run.  Labels a source produced that Kubernetes would reject are dropped with an error entry,
as NFD drops them (``GetFeatureLabels``), so nothing invalid leaves discovery.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agent.features import Feature, SourceError, SourceResult
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import SOURCE_NAMES, source
from agent.sources.local import LOCAL_FEATURES_DIR  # noqa: F401 - where callers used to find it

if TYPE_CHECKING:
    from agent.gotemplate.regexp import GoRegexp

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class DiscoveryConfig:
    """What the runner hands the sources, and which of their labels it keeps.

    ``sources`` maps a source name to that source's own ``Config`` (its section of
    nfd-worker.conf, ``agent.worker_config``); a source not in it runs with its module's
    defaults.  ``label_sources`` (None: all) and ``label_whitelist`` (a Go regexp matched
    against the label name without its prefix) are NFD's ``core.labelSources`` and
    ``core.labelWhiteList``: they filter labels only, never features.
    """

    sources: Mapping[str, Any] = field(default_factory=dict)
    node_name: str = ""
    label_sources: frozenset[str] | None = None
    label_whitelist: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def section(self, name: str, module: Any) -> Any:
        """Source ``name``'s config: its entry in ``sources`` or ``module.Config()``; a
        ``node_name`` field left empty gets the runner's node name."""
        config = self.sources.get(name)
        if config is None:
            config = module.Config()
        if self.node_name and getattr(config, "node_name", None) == "":
            config = dataclasses.replace(config, node_name=self.node_name)
        return config


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


def _label_problems(key: str, value: str) -> tuple[str, ...]:
    """Why Kubernetes would reject ``key=value`` (empty: it would not)."""
    return (*qualified_name_errors(key), *label_value_errors(value))


def _valid_labels(result: SourceResult, config: DiscoveryConfig) -> SourceResult:
    """Drop labels Kubernetes would reject, recording why (as NFD does, but not silently);
    then NFD's label filters: a source not in ``core.labelSources`` gives no labels, and a
    label whose name (after the ``/``) the ``core.labelWhiteList`` regexp does not match is
    left out (NFD logs it at info level; so do we, at debug). The label keys of undetermined
    features go through the same filters, so an earlier answer carried forward never brings
    back a label the configuration now leaves out."""
    kept: dict[str, str] = {}
    errors = list(result.errors)
    labelled = config.label_sources is None or result.source in config.label_sources
    whitelist = _whitelist(config.label_whitelist)

    def published(key: str) -> bool:
        if key.endswith("*"):  # a pattern (SourceResult.undetermined): its keys are told on the Node
            return labelled
        return labelled and (whitelist is None or whitelist.search(key.partition("/")[2] or key) is not None)

    for key, value in result.labels.items():
        problems = _label_problems(key, str(value))
        if problems:
            errors.append(SourceError(result.source, result.label_origins.get(key, ""), f"label {key}={value!r} dropped: {'; '.join(problems)}"))
        elif not labelled:
            continue
        elif not published(key):
            log.debug("label %s does not match core.labelWhiteList %r; not published", key, config.label_whitelist)
        else:
            kept[key] = str(value)
    undetermined = {name: tuple(k for k in keys if published(k)) for name, keys in result.undetermined.items()}
    if len(kept) == len(result.labels) and undetermined == dict(result.undetermined):
        return result
    origins = {k: v for k, v in result.label_origins.items() if k in kept}
    return SourceResult(result.source, result.features, kept, tuple(errors), origins, undetermined)


def _whitelist(pattern: str) -> GoRegexp | None:
    """The compiled whitelist; ``None`` for the empty pattern (matches everything)."""
    if not pattern:
        return None
    from agent.gotemplate.regexp import compile_go

    return compile_go(pattern)


UNANSWERED = {"*": ("*",)}
"""``SourceResult.undetermined`` of a source that raised: every feature, every label it gives."""


def run_source(name: str, host: HostFS, config: DiscoveryConfig) -> SourceResult:
    """One source, contained: any exception becomes a ``SourceError``, and everything the
    source decides is undetermined (it answered nothing, which is no evidence of absence)."""
    try:
        module = source(name)
        result = module.discover(host, config.section(name, module))
    except Exception as exc:  # a broken source must never stop the others
        log.warning("source %s failed: %s", name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
        return SourceResult(name, errors=(SourceError(name, getattr(exc, "host_path", ""), f"source failed: {exc}"),),
                            undetermined=UNANSWERED)
    for error in result.errors:
        log.info("discovery problem: %s", error)
    return _valid_labels(result, config)


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
