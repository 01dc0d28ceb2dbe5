"""The properties every discovery source must keep on any host tree, checked in one place.

1. ``discover`` of the source module itself never raises (errors are ``SourceError`` entries);
2. through ``run_source`` nothing is reported as ``source failed`` (no contained crash either);
3. every label key and value passes Kubernetes validation and is NFD-shaped:
   ``feature.node.kubernetes.io/<source>-...`` (devicetree: ``beta.devicetree.org/``; local:
   any valid key, as NFD feature files may name their own namespace);
4. a label the source produced but Kubernetes would reject is dropped *with* an error naming it;
5. every label has an origin (``explain`` relies on it), results are JSON-serialisable;
6. the same tree gives the same labels, features and errors on a fresh seam.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from hypothesis import event
from hypothesis.control import currently_in_test_context

from agent.discovery import DiscoveryConfig, run_source
from agent.features import NFD_PREFIX, SourceError, SourceResult
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors

DEVICETREE_PREFIX = "beta.devicetree.org/"


def label_shape_errors(source: str, key: str) -> list[str]:
    if source == "local":
        return []
    prefix = DEVICETREE_PREFIX if source == "devicetree" else f"{NFD_PREFIX}{source}-"
    return [] if key.startswith(prefix) else [f"{key!r} is not under {prefix!r}"]


def snapshot(result: SourceResult) -> dict:
    return {
        "labels": dict(result.labels),
        "origins": dict(result.label_origins),
        "features": {k: v.to_json() for k, v in sorted(result.features.items())},
        "errors": [e.to_json() for e in result.errors],
    }


def check_source(name: str, root: Path, config: DiscoveryConfig | None = None, *, strict: bool = True) -> SourceResult:
    """Run source ``name`` on ``root`` and assert every property; returns the validated result.

    ``strict`` additionally requires the source itself to emit only valid labels (true for
    sources whose label keys/values are built from validated IDs); sources that copy host
    text into values (cpu pstate, kernel config, os-release) rely on discovery's drop step.
    """
    module = importlib.import_module(f"agent.sources.{name}")
    if config is None or not isinstance(config, DiscoveryConfig):  # the source's own Config
        config = DiscoveryConfig(sources={name: config} if config is not None else {})
    raw = module.discover(HostFS(root), config.section(name, module))  # property 1: must not raise
    assert isinstance(raw, SourceResult) and raw.source == name

    result = run_source(name, HostFS(root), config)
    failed = [str(e) for e in result.errors if e.message.startswith("source failed")]
    assert not failed, failed
    for error in result.errors:
        assert isinstance(error, SourceError) and error.source == name
        assert isinstance(error.message, str) and error.message and isinstance(error.path, str)

    for key, value in result.labels.items():
        assert isinstance(key, str) and isinstance(value, str)
        problems = qualified_name_errors(key) + label_value_errors(value) + label_shape_errors(name, key)
        assert not problems, (key, value, problems)
        assert key in result.label_origins, f"label {key} has no origin"

    dropped = set(raw.labels) - set(result.labels)
    if strict:
        assert not dropped, f"{name} produced invalid labels: {sorted(dropped)}"
    for key in dropped:
        assert any("dropped" in e.message and key in e.message for e in result.errors), key

    if currently_in_test_context():  # coverage figures for --hypothesis-show-statistics
        event(f"{name}: {'labels' if result.labels else 'no labels'}, {'errors' if result.errors else 'no errors'}")
    first = snapshot(result)
    json.dumps(first)
    again = snapshot(run_source(name, HostFS(root), config))
    assert again == first, "same tree, different result"
    return result
