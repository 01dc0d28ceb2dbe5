"""Removal needs positive evidence: a feature whose source could not be read is unknown, not absent.

A source whose evidence path cannot be read (``agent.discovery_evidence``) failed as a whole:
its previous features stay, nothing it contributed is removed, the agent says not-ready with
the reason, raises ``nfa_source_degraded`` and a Warning Event. Only a successful read that
shows the device gone removes its labels. The real agent loop on a writable coral-usb copy.
"""

from __future__ import annotations

import shutil

from tests.faults.harness import NODE, foreign_view, seeded_foreign
from tests.runtime.helpers import EDGETPU_LABEL, EDGETPU_RESOURCE, wait_for

GPU_LABEL = "feature.node.kubernetes.io/pci-0300_8086.present"


def test_a_bus_directory_that_vanishes_keeps_its_labels_until_a_real_read_shows_the_device_gone(server, make_harness):
    h = make_harness(resync_interval=0.3, resync_jitter=0.0).start()
    want = h.wait_converged()
    assert EDGETPU_LABEL in want.labels and GPU_LABEL in want.labels
    usb_bus, pci_bus = h.host.root / "sys" / "bus" / "usb", h.host.root / "sys" / "bus" / "pci"
    shutil.move(str(usb_bus), str(h.host.stash / "usb-bus"))  # sysfs half-gone: a broken mount, not an unplug
    shutil.move(str(pci_bus), str(h.host.stash / "pci-bus"))
    h.inject("remove")
    wait_for(lambda: "usb" in h.agent.discovery.degraded and "pci" in h.agent.discovery.degraded,
             what="usb and pci reported degraded")
    passes = h.agent.passes
    wait_for(lambda: h.agent.passes >= passes + 2, what="two resyncs with the bus directories gone")
    node = server.node(NODE)
    assert node["metadata"]["labels"].get(EDGETPU_LABEL) == "true"  # nothing stripped
    assert node["metadata"]["labels"].get(GPU_LABEL) == "true"
    assert EDGETPU_RESOURCE in node["status"]["capacity"]
    ready, why = h.agent.is_ready()
    assert not ready and why.startswith("SourceDegraded") and "usb" in why and "pci" in why
    assert h.metric('nfa_source_degraded{source="usb"}') == 1.0
    events = [e for e in server.events() if e["reason"] == "DiscoverySourceFailed"]
    assert events and all(e["type"] == "Warning" for e in events)

    shutil.move(str(h.host.stash / "usb-bus"), str(usb_bus))
    shutil.move(str(h.host.stash / "pci-bus"), str(pci_bus))
    # the cache forgets the degradation, then reports it: wait for both
    wait_for(lambda: not h.agent.discovery.degraded and h.metric('nfa_source_degraded{source="usb"}') == 0.0,
             what="sources read again, and said so")
    h.unplug()  # a real unplug: the bus lists, the Coral is not in it
    gone = h.wait_converged(what="converged after the real unplug")
    assert EDGETPU_LABEL not in gone.labels and GPU_LABEL in gone.labels
    assert h.agent.is_ready()[0]
    assert foreign_view(server.node(NODE)) == seeded_foreign()


def test_an_empty_answer_with_evidence_is_absence_and_a_first_empty_answer_keeps_nothing(tmp_path):
    """Pure: the evidence rule per source, on fixture copies."""
    from agent.discovery import DiscoveryConfig, discover
    from agent.discovery_evidence import EVIDENCE, wholesale_failure
    from agent.hostfs import HostFS
    from tests.conftest import FIXTURES

    root = tmp_path / "h"
    shutil.copytree(FIXTURES / "coral-usb", root, symlinks=True)
    host = HostFS(str(root))
    before = discover(host, DiscoveryConfig()).results
    for name in EVIDENCE:
        assert wholesale_failure(host, name, before[name], before[name]) is None, name
    shutil.rmtree(root / "sys" / "bus" / "usb")
    after = discover(HostFS(str(root)), DiscoveryConfig(), ["usb"]).results["usb"]
    assert not after.features.get("device") or not after.features["device"].instances
    assert "/sys/bus/usb/devices" in wholesale_failure(HostFS(str(root)), "usb", after, before["usb"])
    assert wholesale_failure(HostFS(str(root)), "usb", after, None) is None  # never had anything: nothing kept
