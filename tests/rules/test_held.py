"""Which label keys an undetermined feature decides (``agent.rules.held``), over catalogues
loaded by the real loader: the raw key, rules that read the feature (and rules reading their
outcome), label files depending on any of those; a templated rule reading it holds all."""

from __future__ import annotations

from agent.rules.held import ALL, held_label_keys, held_resource_names
from tests.rules.helpers import catalogue_from, nfr

SMT = "feature.node.kubernetes.io/cpu-hardware_multithreading"
TOPOLOGY = {"cpu.topology": (SMT,)}

RULES = nfr("""
- name: smt
  labels: {smt-node: "true", example.com/threads: "2"}
  matchFeatures:
  - feature: cpu.topology
    matchExpressions: {hardware_multithreading: {op: IsTrue}}
- name: hpc
  labels: {example.com/hpc: "yes"}
  matchFeatures:
  - feature: rule.matched
    matchExpressions: {smt-node: {op: IsTrue}}
- name: unrelated
  labels: {example.com/other: "x"}
  matchAny:
  - matchFeatures:
    - feature: kernel.loadedmodule
      matchExpressions: {nvme: {op: Exists}}
""")


def test_rules_and_label_files_that_read_the_feature_are_held_and_nothing_else(tmp_path):
    catalogue = catalogue_from(tmp_path, {
        "rules/smt.yaml": RULES,
        "example.com/smt-capable": f"{SMT}=true\n",
        "example.com/coral": "feature.node.kubernetes.io/usb-fe_1a6e_089a.present\n",
    })
    assert not catalogue.problems, catalogue.problems
    assert held_label_keys(catalogue, None, TOPOLOGY) == {
        SMT, "feature.node.kubernetes.io/smt-node", "example.com/threads", "example.com/hpc", "example.com/smt-capable"}


def test_a_feature_no_rule_reads_holds_only_its_raw_key(tmp_path):
    catalogue = catalogue_from(tmp_path, {"rules/smt.yaml": RULES})
    ssd = "feature.node.kubernetes.io/storage-nonrotationaldisk"
    assert held_label_keys(catalogue, None, {"storage.block": (ssd,)}) == {ssd}
    assert held_label_keys(catalogue, None, {}) == frozenset()


def test_a_templated_rule_reading_the_feature_holds_every_label(tmp_path):
    catalogue = catalogue_from(tmp_path, {"rules/t.yaml": nfr("""
- name: sockets
  labelsTemplate: |
    {{ range .cpu.topology }}example.com/sockets={{ .Value }}
    {{ end }}
  matchFeatures:
  - feature: cpu.topology
    matchExpressions: {socket_count: {op: Exists}}
""")})
    assert not catalogue.problems, catalogue.problems
    assert held_label_keys(catalogue, None, TOPOLOGY) is ALL


def test_an_unreadable_device_holds_its_source_s_labels_by_prefix_and_the_counts_of_rules_reading_it(tmp_path):
    """A PCI device whose IDs could not be read gives a label nobody can name: ``pci-*``; the
    label files depending on any such key are held, and so are the labels and extended
    resources of the rules that read ``pci.device`` (the shipped Coral rule among them)."""
    catalogue = catalogue_from(tmp_path, {
        "rules/tpu.yaml": nfr("""
- name: tpu
  labels: {accelerators/edgetpu: "true"}
  extendedResources: {node-feature-agent.io/edgetpu: "@count"}
  matchFeatures:
  - feature: pci.device
    matchExpressions: {vendor: {op: In, value: ["1ac1"]}}
- name: usb-only
  labels: {example.com/ncs2: "true"}
  extendedResources: {example.com/ncs2: "@count"}
  matchFeatures:
  - feature: usb.device
    matchExpressions: {vendor: {op: In, value: ["03e7"]}}
"""),
        "example.com/coral": "feature.node.kubernetes.io/pci-0880_1ac1.present\n",
        "example.com/stick": "feature.node.kubernetes.io/usb-ff_03e7_2485.present\n",
    })
    assert not catalogue.problems, catalogue.problems
    pci = {"pci.device": ("feature.node.kubernetes.io/pci-*",)}
    assert held_label_keys(catalogue, None, pci) == {
        "feature.node.kubernetes.io/pci-*", "accelerators/edgetpu", "example.com/coral"}
    assert held_resource_names(catalogue, None, pci) == {"node-feature-agent.io/edgetpu"}
    assert held_resource_names(catalogue, None, {}) == frozenset()
