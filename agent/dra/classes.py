"""The DeviceClasses the catalogue implies: one per resource a rule declares ``devices:`` for.

A class ``<kind>.node-feature-agent.io`` (``edgetpu.node-feature-agent.io``) selects this
driver's devices whose ``class`` attribute is the resource's last path segment, by CEL as
``DeviceClass.spec.selectors[].cel.expression`` takes it (``device.driver``,
``device.attributes["<domain>"].<name>``: the upstream CEL environment of
k8s.io/dynamic-resource-allocation ``cel``), and carries ``extendedResourceName`` = the resource
name pods ask for today, so ``node-feature-agent.io/edgetpu: 1`` keeps working when DRA serves
it (KEP-5004, ``DRAExtendedResource``). ``deploy/device-classes.yaml`` and the chart ship the
output of ``render``; ``tests/dra/test_classes.py`` fails when they drift from the catalogue.
"""

from __future__ import annotations

from typing import Any

import yaml

from agent.dra.names import DRIVER
from agent.rules.model import Catalogue

HEADER = ("# Generated from labels/rules by deploy/render_device_classes.py (agent/dra/classes.py): one\n"
          "# DeviceClass per resource the catalogue declares devices: for (deploy/dra.md). Do not edit.\n")


def class_name(resource: str) -> str:
    return f"{resource.rsplit('/', 1)[-1]}.{DRIVER}"


def selector(resource: str) -> str:
    kind = resource.rsplit("/", 1)[-1]
    return f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].class == "{kind}"'


def device_classes(catalogue: Catalogue) -> list[dict[str, Any]]:
    resources = sorted({d.resource for rule in catalogue.rules() for d in rule.devices})
    return [{"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
             "metadata": {"name": class_name(r), "labels": {"app.kubernetes.io/name": "node-feature-agent"}},
             "spec": {"selectors": [{"cel": {"expression": selector(r)}}], "extendedResourceName": r}}
            for r in resources]


def render(catalogue: Catalogue) -> str:
    return HEADER + "".join("---\n" + yaml.safe_dump(c, sort_keys=False, width=1000) for c in device_classes(catalogue))

