"""Extended resource names as NFD takes them, and why a pod can use them.

NFD (76e6cc8c): an unprefixed ``extendedResources`` name gets ``feature.node.kubernetes.io/``
(``processNodeFeatureRule``: ``addNsToMapKeys(ruleOut.ExtendedResources, ExtendedResourceNs)``);
of ``kubernetes.io`` only ``feature.node.kubernetes.io`` and its subdomains are allowed
(``pkg/apis/nfd/validate/validate.go`` ``ExtendedResource``); its e2e test expects
``feature.node.kubernetes.io/nons=123`` and ``vendor.feature.node.kubernetes.io/static=123`` in
capacity and ``bad.kubernetes.io/malo`` refused (``test/e2e/data/nodefeaturerule-4.yaml``).

Kubernetes decides whether a pod can request such a name, not the agent:

* ``validateContainerResourceName`` (``pkg/apis/core/validation/validation.go``) checks a
  prefixed name against the extended-name standard only when it is not native;
* ``IsNativeResource`` (``pkg/apis/core/helper/helpers.go``): unprefixed, or containing
  ``kubernetes.io/``; so ``feature.node.kubernetes.io/nons`` is native and requestable;
* the scheduler's fit filter counts every ``IsScalarResourceName`` against allocatable
  (``pkg/scheduler/util/utils.go``: ``IsExtendedResourceName || IsHugePageResourceName ||
  IsPrefixedNativeResource || IsAttachableVolumeResourceName``; ``IsPrefixedNativeResource``,
  ``pkg/apis/core/v1/helper/helpers.go``, is "contains ``kubernetes.io/``").

So the name is usable end to end (a kubelet device plugin cannot register it: the device
manager takes only ``IsExtendedResourceName`` names; ``devices:`` says so at load time).
"""

from __future__ import annotations

from agent.reconcile import NodeApi, Reconciler
from agent.rules import RuleOptions, derive
from tests.rules.helpers import attrs, catalogue_from, nfr
from tests.support.apiserver import FakeApiServer

RULES = nfr("""
- name: "e2e no ns rule"
  extendedResources: {nons: "123"}
- name: "e2e static rule"
  extendedResources: {vendor.feature.node.kubernetes.io/static: "123"}
- name: "e2e not allowed rule"
  extendedResources: {bad.kubernetes.io/malo: "999"}
- name: "profile namespace: labels only"
  extendedResources: {profile.node.kubernetes.io/x: "1"}
- name: "e2e Dynamic rule"
  extendedResources: {vendor.io/dynamic: "@fake.attribute.attr_3"}
""")


def test_nfd_resource_names_reach_capacity_and_kubernetes_io_others_are_refused(tmp_path) -> None:
    catalogue = catalogue_from(tmp_path, {"r.yaml": RULES})
    found = " ".join(f"{p.item}: {p.reason}" for p in catalogue.problems)  # refused at load time, by line
    assert "bad.kubernetes.io/malo" in found and "profile.node.kubernetes.io/x" in found
    assert "nons" not in found and "static" not in found
    state = derive({"fake.attribute": attrs(attr_3="10")}, {}, {}, catalogue, RuleOptions()).state
    assert state.extended_resources == {"feature.node.kubernetes.io/nons": "123",
                                        "vendor.feature.node.kubernetes.io/static": "123",
                                        "vendor.io/dynamic": "10"}

    with FakeApiServer() as server:  # its name checks are validateContainerResourceName's
        server.add_node("n1", capacity={"cpu": "4"})
        rec = Reconciler(NodeApi.from_configuration(server.client_configuration()), "n1", sleep=lambda _s: None)
        assert rec.reconcile(lambda _foreign: state).ok
        capacity = server.node("n1")["status"]["capacity"]
        assert capacity["feature.node.kubernetes.io/nons"] == "123"
        assert capacity["vendor.feature.node.kubernetes.io/static"] == "123"
        assert "bad.kubernetes.io/malo" not in capacity


def test_a_device_plugin_resource_must_be_an_extended_name(tmp_path) -> None:
    catalogue = catalogue_from(tmp_path, {"r.yaml": nfr("""
- name: tpu
  extendedResources: {feature.node.kubernetes.io/tpu: "@count"}
  devices:
    feature.node.kubernetes.io/tpu: {deviceNodes: [{path: /dev/apex_0}]}
""")})
    assert any("kubelet refuses" in p.reason for p in catalogue.problems)
