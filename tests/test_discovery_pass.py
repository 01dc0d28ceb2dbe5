"""What ``agent.discovery.discover`` does around the sources: a source that raises contained
(and undetermined), and labels Kubernetes would reject dropped exactly as Kubernetes' own
validation vectors say (kubernetes/apimachinery ``validation_test.go``, as
``tests/test_k8s_validation_vectors.py`` copies them).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent import discovery
from agent.discovery import DiscoveryConfig
from agent.features import SourceResult
from tests.test_k8s_validation_vectors import (
    LABEL_VALUE_BAD,
    LABEL_VALUE_GOOD,
    NEWLINE_KEYS,
    NEWLINE_VALUES,
    QUALIFIED_BAD,
    QUALIFIED_GOOD,
)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures" / "sysfs"
CONFIG = DiscoveryConfig(node_name="pass-node")


def test_a_source_that_raises_answers_nothing_and_decides_nothing(monkeypatch, tmp_path):
    """A source that raises is contained: one error, the other sources run, and everything it
    decides is undetermined (its previous answer, or the Node's labels, are kept)."""
    from agent.hostfs import HostFS
    from agent.sources import pci

    def broken(host, config):
        raise RuntimeError("a bug")

    monkeypatch.setattr(pci, "discover", broken)
    found = discovery.discover(HostFS(FIXTURES / "coral-usb"), CONFIG, ["pci", "usb"])
    assert [str(e) for e in found.results["pci"].errors] == ["pci: source failed: a bug"]
    assert dict(found.results["pci"].undetermined) == {"*": ("*",)} and found.results["usb"].features


def _labels_result(labels: dict[str, str]) -> SourceResult:
    return SourceResult("local", labels=labels, label_origins=dict.fromkeys(labels, "/etc/x"))


@pytest.mark.parametrize("key", QUALIFIED_GOOD)
def test_a_label_key_kubernetes_accepts_is_kept(key):
    kept = discovery._valid_labels(_labels_result({key: "true"}), CONFIG)
    assert kept.labels == {key: "true"} and not kept.errors


@pytest.mark.parametrize("key", QUALIFIED_BAD + NEWLINE_KEYS)
def test_a_label_key_kubernetes_rejects_is_dropped_with_an_error(key):
    dropped = discovery._valid_labels(_labels_result({key: "true", "ok": "1"}), CONFIG)
    assert dropped.labels == {"ok": "1"}
    assert len(dropped.errors) == 1 and f"label {key}='true' dropped" in dropped.errors[0].message


@pytest.mark.parametrize("value", LABEL_VALUE_GOOD)
def test_a_label_value_kubernetes_accepts_is_kept(value):
    assert discovery._valid_labels(_labels_result({"k": value}), CONFIG).labels == {"k": value}


@pytest.mark.parametrize("value", LABEL_VALUE_BAD + NEWLINE_VALUES)
def test_a_label_value_kubernetes_rejects_is_dropped_with_an_error(value):
    dropped = discovery._valid_labels(_labels_result({"k": value}), CONFIG)
    assert dropped.labels == {} and len(dropped.errors) == 1
