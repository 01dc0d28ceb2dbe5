"""The DeviceClasses the catalogue implies: one per resource a rule declares ``devices:`` for.

A class ``<kind>.node-feature-agent.io`` (``edgetpu.node-feature-agent.io``) selects this
driver's devices whose ``class`` attribute is the resource's last path segment, by CEL as
``DeviceClass.spec.selectors[].cel.expression`` takes it (``device.driver``,
``device.attributes["<domain>"].<name>``: the upstream CEL environment of
k8s.io/dynamic-resource-allocation ``cel``), and carries ``extendedResourceName`` = the resource
name pods ask for today, so ``node-feature-agent.io/edgetpu: 1`` keeps working when DRA serves
it (KEP-5004, ``DRAExtendedResource``). ``deploy/device-classes.yaml`` and the chart ship the
output of ``render``; ``tests/dra/test_classes.py`` fails when they drift from the catalogue.

``version`` ``v1beta1`` makes the classes for Kubernetes 1.32-1.33, whose ``resource.k8s.io``
is ``v1beta1`` only: the same selectors, and no ``extendedResourceName``, which that API has
not got (``DeviceClassSpec`` in the 1.32 and 1.33 OpenAPI schemas; the field came with KEP-5004,
alpha in 1.34): pods there ask for a device through a ResourceClaim naming the class.
``deploy/device-classes-v1beta1.yaml`` ships them; the chart picks the version the cluster serves.
"""

from __future__ import annotations

from typing import Any

import yaml

from agent.dra.names import DRIVER
from agent.rules.model import Catalogue

VERSIONS = ("v1", "v1beta1")
HEADER = ("# Generated from labels/rules by deploy/render_device_classes.py (agent/dra/classes.py): one\n"
          "# DeviceClass per resource the catalogue declares devices: for (deploy/dra.md). Do not edit.\n")
HEADER_V1BETA1 = ("# resource.k8s.io/v1beta1, for Kubernetes 1.32-1.33: no extendedResourceName there, so pods ask\n"
                  "# for a device with a ResourceClaim naming the class.\n")


def class_name(resource: str) -> str:
    return f"{resource.rsplit('/', 1)[-1]}.{DRIVER}"


def selector(resource: str) -> str:
    kind = resource.rsplit("/", 1)[-1]
    return f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].class == "{kind}"'


def resources(catalogue: Catalogue) -> list[str]:
    """The resources the catalogue declares ``devices:`` for, each of which gets a class."""
    return sorted({d.resource for rule in catalogue.rules() for d in rule.devices})


def device_classes(catalogue: Catalogue, version: str = "v1") -> list[dict[str, Any]]:
    if version not in VERSIONS:
        raise ValueError(f"no DeviceClasses for resource.k8s.io/{version}")
    out = []
    for r in resources(catalogue):
        spec: dict[str, Any] = {"selectors": [{"cel": {"expression": selector(r)}}]}
        if version == "v1":
            spec["extendedResourceName"] = r
        out.append({"apiVersion": f"resource.k8s.io/{version}", "kind": "DeviceClass",
                    "metadata": {"name": class_name(r), "labels": {"app.kubernetes.io/name": "node-feature-agent"}},
                    "spec": spec})
    return out


def render(catalogue: Catalogue, version: str = "v1") -> str:
    header = HEADER + (HEADER_V1BETA1 if version == "v1beta1" else "")
    return header + "".join("---\n" + yaml.safe_dump(c, sort_keys=False, width=1000)
                            for c in device_classes(catalogue, version))

