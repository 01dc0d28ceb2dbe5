"""DRA device names: DNS labels by apimachinery's own rule, stable, distinct per device."""

import re

import pytest

from agent.dra.names import MAX_NAME, device_name

# apimachinery pkg/util/validation/validation.go: dns1123LabelFmt, DNS1123LabelMaxLength = 63
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

IDS = ["pci-0000:01:00.0", "pci-0000:02:00.0", "usb-0000:00:14.0-2", "usb-0000:00:14.0-2.2",
       "usb-0000:00:14.0-2.2.2", "usb-1", "dev-sys-devices-platform-soc-" + "x" * 60]


@pytest.mark.parametrize("device_id", IDS)
@pytest.mark.parametrize("replica", [0, 1, 2, 10])
def test_a_name_is_a_dns_label(device_id: str, replica: int) -> None:
    name = device_name("node-feature-agent.io/edgetpu", device_id, replica)
    assert DNS1123_LABEL.fullmatch(name) and len(name) <= MAX_NAME, name


def test_names_are_distinct_across_devices_replicas_and_resources() -> None:
    names = [device_name(r, i, k) for r in ("node-feature-agent.io/edgetpu", "node-feature-agent.io/hailo8")
             for i in IDS for k in (0, 1, 2)]
    assert len(set(names)) == len(names)


def test_replica_zero_is_the_plain_name_and_a_negative_replica_is_refused() -> None:
    assert device_name("node-feature-agent.io/edgetpu", "pci-0000:01:00.0") == "edgetpu-pci-0000-01-00-0"
    with pytest.raises(ValueError):
        device_name("node-feature-agent.io/edgetpu", "pci-0000:01:00.0", -1)


def test_the_driver_is_the_projects_domain_and_a_valid_driver_name() -> None:
    """ResourceSlice ``spec.driver``: a DNS subdomain of at most 63 characters (resource/v1
    validation ``validateDriverName``); the issue fixes it to the project's domain."""
    from agent.dra.names import DRIVER

    assert DRIVER == "node-feature-agent.io"
    assert len(DRIVER) <= 63 and all(DNS1123_LABEL.fullmatch(p) for p in DRIVER.split("."))
