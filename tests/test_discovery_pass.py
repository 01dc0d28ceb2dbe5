"""What ``agent.discovery.discover`` does around the sources: the collector held off for a pass
and its young generations collected once at the end, and labels Kubernetes would reject
dropped (through a memo of the check) exactly as Kubernetes' own validation vectors say.

The vectors are Kubernetes' (kubernetes/apimachinery ``validation_test.go``, as
``tests/test_k8s_validation_vectors.py`` copies them); the collector's behaviour is CPython's,
observed through ``gc.callbacks``.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from agent import discovery
from agent.discovery import DiscoveryConfig, discover
from agent.features import SourceResult
from agent.hostfs import HostFS
from tests.test_k8s_validation_vectors import (
    LABEL_VALUE_BAD, LABEL_VALUE_GOOD, NEWLINE_KEYS, NEWLINE_VALUES, QUALIFIED_BAD, QUALIFIED_GOOD,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "sysfs"
CONFIG = DiscoveryConfig(node_name="pass-node")


class _Collections:
    """Every collection the collector runs while installed: (generation, automatic?)."""

    def __init__(self):
        self.seen: list[int] = []

    def __call__(self, phase, info):
        if phase == "start":
            self.seen.append(info["generation"])

    def __enter__(self):
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self)


@pytest.fixture
def collector_enabled():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_a_pass_runs_no_automatic_collection_and_one_young_collection_at_its_end(collector_enabled):
    # the big fixture allocates far past the collector's threshold of 700 in a pass: without the
    # hold, several generation-0 collections run inside it (checked here first, so the test
    # cannot pass on a fixture too small to trigger any)
    root = FIXTURES / "dgx-usb-lab"
    module = discovery._load_source("pci")
    with _Collections() as free_running:
        module.discover(HostFS(root), CONFIG.section("pci", module))  # the source alone: no hold
    assert free_running.seen.count(0) >= 2, free_running.seen
    with _Collections() as held:
        result = discover(HostFS(root), CONFIG)
    assert held.seen == [1], held.seen  # generations 0 and 1, once, after the last source
    assert gc.isenabled()
    assert len(result.features["pci.device"].instances) == 400 and not result.errors


def test_a_pass_leaves_a_disabled_collector_alone(collector_enabled):
    gc.disable()
    try:
        with _Collections() as seen:
            discover(HostFS(FIXTURES / "dgx-usb-lab"), CONFIG, ["usb"])
        assert seen.seen == [] and not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_back_on_when_a_pass_is_interrupted(collector_enabled):
    # sources contain every Exception; an interrupt (BaseException) is not theirs to keep
    class Interrupted(HostFS):
        def is_dir(self, host_path):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        discover(Interrupted(FIXTURES / "dgx-usb-lab"), CONFIG, ["pci"])
    assert gc.isenabled()


def test_cycles_made_in_a_pass_are_collected_at_its_end(collector_enabled):
    # an error kept with its traceback is a reference cycle; the collection at the pass's end frees it
    class Cyclic:
        pass

    made = []

    class Cycles(HostFS):
        def is_dir(self, host_path):
            node = Cyclic()
            node.self = node
            made.append(__import__("weakref").ref(node))
            return super().is_dir(host_path)

    discover(Cycles(FIXTURES / "dgx-usb-lab"), CONFIG, ["pci"])
    assert made and all(ref() is None for ref in made)


def _labels_result(labels: dict[str, str]) -> SourceResult:
    return SourceResult("local", labels=labels, label_origins={key: "/etc/x" for key in labels})


@pytest.mark.parametrize("key", QUALIFIED_GOOD)
def test_a_label_key_kubernetes_accepts_is_kept(key):
    for _ in range(2):  # the second answer comes from the memo
        kept = discovery._valid_labels(_labels_result({key: "true"}), CONFIG)
        assert kept.labels == {key: "true"} and not kept.errors


@pytest.mark.parametrize("key", QUALIFIED_BAD + NEWLINE_KEYS)
def test_a_label_key_kubernetes_rejects_is_dropped_with_an_error(key):
    for _ in range(2):
        dropped = discovery._valid_labels(_labels_result({key: "true", "ok": "1"}), CONFIG)
        assert dropped.labels == {"ok": "1"}
        assert len(dropped.errors) == 1 and f"label {key}='true' dropped" in dropped.errors[0].message


@pytest.mark.parametrize("value", LABEL_VALUE_GOOD)
def test_a_label_value_kubernetes_accepts_is_kept(value):
    for _ in range(2):
        assert discovery._valid_labels(_labels_result({"k": value}), CONFIG).labels == {"k": value}


@pytest.mark.parametrize("value", LABEL_VALUE_BAD + NEWLINE_VALUES)
def test_a_label_value_kubernetes_rejects_is_dropped_with_an_error(value):
    for _ in range(2):
        dropped = discovery._valid_labels(_labels_result({"k": value}), CONFIG)
        assert dropped.labels == {} and len(dropped.errors) == 1


def test_the_label_memo_is_bounded():
    for n in range(discovery._label_problems.cache_info().maxsize + 100):
        discovery._label_problems(f"k{n}", "v")
    info = discovery._label_problems.cache_info()
    assert info.currsize == info.maxsize
