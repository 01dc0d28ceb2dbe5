"""``carry_undetermined``: an undetermined feature is answered as the previous pass answered it."""

from __future__ import annotations

from agent.discovery_evidence import carry_undetermined
from agent.features import Feature, Instance, SourceError, SourceResult

CORAL = "feature.node.kubernetes.io/pci-0880_1ac1.present"
GPU = "feature.node.kubernetes.io/pci-0300_10de.present"
NIC = "feature.node.kubernetes.io/pci-0200_8086.present"


def _pci(*instances: tuple[str, str], undetermined=None, errors=()) -> SourceResult:
    found = [Instance({"class": c, "vendor": v}, f"/sys/devices/pci0000:00/{c}") for c, v in instances]
    labels = {f"feature.node.kubernetes.io/pci-{c}_{v}.present": "true" for c, v in instances}
    return SourceResult("pci", {"device": Feature(instances=found)}, labels, errors, undetermined=undetermined or {})


def test_a_prefix_pattern_brings_back_the_previous_feature_and_every_label_it_starts():
    previous = _pci(("0880", "1ac1"), ("0300", "10de"))
    error = SourceError("pci", "/sys/devices/pci0000:00/0880/vendor", "unreadable: Is a directory")
    new = _pci(("0200", "8086"), undetermined={"device": ("feature.node.kubernetes.io/pci-*",)}, errors=(error,))
    carried = carry_undetermined(new, previous)
    assert carried.features["device"] is previous.features["device"]
    assert dict(carried.labels) == {CORAL: "true", GPU: "true"}  # what the carried feature gives, nothing of NIC
    assert carried.errors == (error,) and dict(carried.undetermined) == dict(new.undetermined)
    assert carry_undetermined(new, None) is new


def test_exact_keys_bring_back_only_those_labels():
    previous = SourceResult("cpu", {"topology": Feature(attributes={"hardware_multithreading": "true"})},
                            {"feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
                             "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel"})
    new = SourceResult("cpu", {}, {"feature.node.kubernetes.io/cpu-model.vendor_id": "AMD"},
                       undetermined={"topology": ("feature.node.kubernetes.io/cpu-hardware_multithreading",)})
    carried = carry_undetermined(new, previous)
    assert dict(carried.labels) == {"feature.node.kubernetes.io/cpu-hardware_multithreading": "true",
                                    "feature.node.kubernetes.io/cpu-model.vendor_id": "AMD"}
    assert carried.features["topology"] is previous.features["topology"]
