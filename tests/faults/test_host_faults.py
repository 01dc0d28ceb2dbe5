"""Faults on the agent's own inputs: the label directory swapped for an invalid one, sysfs
devices vanishing between the directory listing and the attribute reads."""

from __future__ import annotations

import os
import shutil

from agent.hostfs import HostFS
from tests.conftest import LABELS_DIR
from tests.faults.harness import NODE, foreign_view, seeded_foreign, stable
from tests.runtime.helpers import EDGETPU_LABEL, EDGETPU_RESOURCE, wait_for

GPU = "0000:00:02.0"  # the Intel iGPU of the coral-usb host: pci-0300_8086.present
GPU_ENTRIES = (f"sys/bus/pci/devices/{GPU}", f"sys/devices/pci0000:00/{GPU}")
GPU_LABEL = "feature.node.kubernetes.io/pci-0300_8086.present"


def test_label_dir_replaced_by_an_invalid_one_keeps_the_last_good_rules(server, ledger, make_harness):
    h = make_harness(resync_interval=0.3, resync_jitter=0.0).start()
    want = h.wait_converged()
    broken = h.rules.parent / "rules.new"
    (broken / "accelerators").mkdir(parents=True)
    (broken / "accelerators" / "edgetpu").write_text("accelerators/edgetpu: {{ not a label file\x00\n")
    (broken / "rules").mkdir()
    (broken / "rules" / "broken.yaml").write_text("kind: NodeFeatureRule\nmetadata: {name: x\n")
    os.rename(h.rules, h.rules.parent / "rules.old")  # the whole directory replaced, as a hostPath swap does
    os.rename(broken, h.rules)
    # between the two renames there is no directory at all: a reload (watcher or resync) may
    # refuse that first, in its own Event; the one that matters names the broken file
    def refused_broken() -> list[dict]:
        return [e for e in server.events() if "broken.yaml" in e["message"]
                and (e["reason"] == "RulesInvalid" or "RulesInvalid: " in e["message"])]

    event = wait_for(refused_broken, what="RulesInvalid event naming broken.yaml")[0]
    assert event["type"] == "Warning"
    assert h.metric('nfa_rules_reload_total{result="rejected"}') >= 1
    passes = h.agent.passes
    wait_for(lambda: h.agent.passes >= passes + 2, what="two resyncs with the invalid directory")
    assert h.converged(want)  # nothing removed: the last good catalogue is still the one in use
    h.unplug()
    unplugged = h.wait_converged(h.expected(rules_dir=LABELS_DIR), what="hotplug evaluated with the last good rules")
    assert EDGETPU_LABEL not in unplugged.labels
    h.plug()
    h.wait_converged(want, what="edgetpu back: only the last good catalogue has that rule")
    assert h.agent.healthy()[0]
    ledger.assert_clean(*stable(want, unplugged))
    assert foreign_view(server.node(NODE)) == seeded_foreign()


class VanishingHost(HostFS):
    """A HostFS whose ``listdir`` of an armed directory returns the listing, then runs the
    armed action (devices removed from the tree) before the caller reads any entry."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.armed: dict[str, object] = {}
        self.fired: list[str] = []

    def listdir(self, host_path: str) -> list[str]:
        entries = super().listdir(host_path)
        action = self.armed.pop(host_path.rstrip("/"), None)
        if action is not None:
            action()
            self.fired.append(host_path)
        return entries


def test_sysfs_devices_vanishing_mid_scan(server, ledger, make_harness):
    h = make_harness()
    stash = h.host.stash / "gpu"
    stash.mkdir()

    def remove_gpu():
        for index, entry in enumerate(GPU_ENTRIES):
            shutil.move(str(h.host.root / entry), str(stash / str(index)))

    host = VanishingHost(str(h.host.root))
    h.agent.discovery.host = host
    # the startup scan lists the PCI and USB devices, then the iGPU and the Coral go
    host.armed = {"/sys/bus/pci/devices": remove_gpu, "/sys/bus/usb/devices": h.host.unplug}
    h.start()
    assert sorted(host.fired) == ["/sys/bus/pci/devices", "/sys/bus/usb/devices"]
    assert h.agent.healthy()[0] and h.agent.last_outcome.ok
    # then the kernel's remove events arrive; the agent converges on the final tree
    h.inject("remove", f"/devices/pci0000:00/{GPU}", "pci")
    h.inject("remove", "/devices/pci0000:00/0000:00:14.0/usb2/2-2/2-2:1.0")
    h.inject("remove")
    final = h.wait_converged(what="converged on the tree after the devices left")
    assert GPU_LABEL not in final.labels and EDGETPU_LABEL not in final.labels
    # mid-run: the Coral comes back, is listed by the rescan, and leaves before its files are read
    h.host.plug()
    host.armed = {"/sys/bus/usb/devices": h.host.unplug}
    passes = h.agent.passes
    h.inject("add")
    wait_for(lambda: host.fired.count("/sys/bus/usb/devices") == 2 and h.agent.passes > passes, what="racing rescan")
    assert h.agent.healthy()[0]
    h.inject("remove")
    h.wait_converged(final, what="converged again after the mid-run race")
    assert EDGETPU_RESOURCE not in server.node(NODE)["status"]["capacity"]
    ledger.assert_clean(*stable(final, final))
    assert foreign_view(server.node(NODE)) == seeded_foreign()
