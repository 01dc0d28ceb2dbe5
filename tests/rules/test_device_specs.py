"""The ``devices:`` extension: parsed strictly, claims only matched device instances."""

from __future__ import annotations

import pytest

from agent import rules
from tests.rules.helpers import catalogue_from, instances, nfr

RES = "example.com/widget"


def rule(devices: str, resources: str = f'{RES}: "@count"') -> str:
    return nfr(f"""
        - name: widget
          labels: {{"example.com/widget": "true"}}
          extendedResources: {{{resources}}}
          devices:
        {devices}
          matchFeatures:
            - feature: pci.device
              matchExpressions: {{vendor: {{op: In, value: ["abcd"]}}}}
        """)


def test_a_full_declaration_loads(tmp_path):
    text = rule(f"""    {RES}:
              deviceNodes: [usb, {{class: apex}}, {{path: /dev/widget-ctl}}]
              permissions: rw
              env: {{WIDGET_VISIBLE: "all"}}
              mounts: [{{hostPath: /usr/lib/widget, containerPath: /opt/widget}}]
              notReady: [{{match: {{device: "0001"}}, reason: booting}}]""")
    catalogue = catalogue_from(tmp_path, {"r.yaml": text})
    assert catalogue.problems == ()
    (declaration,) = next(catalogue.rules()).devices
    assert [(n.kind, n.value) for n in declaration.nodes] == [("usb", ""), ("class", "apex"), ("path", "/dev/widget-ctl")]
    assert dict(declaration.env) == {"WIDGET_VISIBLE": "all"}
    assert (declaration.mounts[0].host_path, declaration.mounts[0].container_path, declaration.mounts[0].read_only) == \
        ("/usr/lib/widget", "/opt/widget", True)
    assert declaration.not_ready[0].matches({"device": "0001", "vendor": "abcd"})
    assert declaration.origin.endswith("r.yaml:11")  # the resource key


@pytest.mark.parametrize("body,why", [
    ("deviceNodes: [usb]\n              perms: rw", "unknown field"),
    ("deviceNodes: [serial]", "a deviceNodes entry is"),
    ("deviceNodes: [{path: /etc/shadow}]", "must be under /dev/"),
    ("deviceNodes: [{path: /dev/../etc/shadow}]", "normalised absolute path"),
    ("deviceNodes: [{class: ../x}]", "not a sysfs class name"),
    ("deviceNodes: [{class: ..}]", "not a sysfs class name"),
    ("deviceNodes: []", "deviceNodes is required"),
    ("deviceNodes: [usb]\n              permissions: rwx", "letters of 'rwm'"),
    ("deviceNodes: [usb]\n              env: {1BAD: x}", "not a valid variable name"),
    ("deviceNodes: [usb]\n              mounts: [{hostPath: relative}]", "normalised absolute path"),
    ("deviceNodes: [usb]\n              notReady: [{match: {}, reason: x}]", "a notReady entry is"),
])
def test_a_bad_declaration_skips_the_rule_with_its_line(tmp_path, body, why):
    catalogue = catalogue_from(tmp_path, {"r.yaml": rule(f"    {RES}:\n              {body}")})
    assert list(catalogue.rules()) == []
    (problem,) = catalogue.problems
    assert why in problem.reason and problem.origin.startswith(str(tmp_path / "r.yaml") + ":")


def test_devices_for_a_resource_the_rule_does_not_count_is_refused(tmp_path):
    text = rule(f"    {RES}:\n              deviceNodes: [usb]", resources=f'{RES}: "2"')
    catalogue = catalogue_from(tmp_path, {"r.yaml": text})
    assert "the rule must count it" in catalogue.problems[0].reason


def test_claims_hold_each_matched_instance_once(tmp_path):
    catalogue = catalogue_from(tmp_path, {"r.yaml": rule(f"    {RES}:\n              deviceNodes: [{{class: widget}}]")})
    features = {"pci.device": instances({"vendor": "abcd", "address": "0000:01:00.0"},
                                        {"vendor": "abcd", "address": "0000:02:00.0"},
                                        {"vendor": "1234", "address": "0000:03:00.0"})}
    state = rules.desired_state(features, {}, {}, catalogue)
    claim = state.device_claims[RES]
    assert state.extended_resources[RES] == "2"
    assert [d.attributes["address"] for d in claim.devices] == ["0000:01:00.0", "0000:02:00.0"]
    assert claim.devices[0].origin == "/sys/bus/pci/devices/0"


def test_no_claim_when_the_resource_is_refused(tmp_path):
    denied = "kubernetes.io/widget"
    text = rule(f"    {denied}:\n              deviceNodes: [usb]", resources=f'{denied}: "@count"')
    catalogue = catalogue_from(tmp_path, {"r.yaml": text})
    state = rules.desired_state({"pci.device": instances({"vendor": "abcd", "address": "0000:01:00.0"})}, {}, {}, catalogue)
    assert state.device_claims == {} and denied not in state.extended_resources
