"""Host strings are data, never structure.

A USB device chooses its own ``serial``/``product`` strings (any bytes the firmware likes), and
a device tree its ``model``. Discovery must never let a newline or another control character
in them reach a rule: otherwise a ``labelsTemplate`` that prints the string can emit an extra,
device-chosen ``key=value`` line. Replayed on a copy of the coral-usb fixture through the real
discovery and the real rule engine.
"""

from __future__ import annotations

import shutil

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent import rules
from agent.discovery import DiscoveryConfig, discover
from agent.features import host_text
from agent.hostfs import HostFS
from tests.conftest import FIXTURES
from tests.rules.helpers import nfr

HUB = "sys/devices/pci0000:00/0000:00:14.0/usb1"
RULE = nfr("""
- name: serials
  labelsTemplate: |
    {{ range .usb.device }}ex.com/hub-serial={{ .serial }}
    {{ end }}
  matchFeatures:
    - feature: usb.device
      matchExpressions: {vendor: {op: In, value: ["1d6b"]}, busnum: {op: In, value: ["1"]}}
""")
HOSTILE = st.one_of(
    st.binary(max_size=80),
    st.lists(st.sampled_from(["x", "\n", "\r", "\x00", "\x1b[2J", "ex.com/evil=true", "=", "\u2028", "\x85", "ok"]),
             max_size=8).map(lambda parts: "".join(parts).encode()),
)


def test_host_text_removes_every_control_character_and_line_break():
    assert host_text("a\nb\r\x00c\x1b\u2028d\u2029e\x85f\x7f") == "abcdef"
    assert host_text("Coral USB Accelerator") == "Coral USB Accelerator"
    assert host_text("caf\u00e9 \u2603") == "caf\u00e9 \u2603"  # printable Unicode stays


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(serial=HOSTILE)
def test_a_device_string_never_adds_a_label_the_rule_did_not_write(tmp_path_factory, serial):
    root = tmp_path_factory.mktemp("host")
    shutil.copytree(FIXTURES / "coral-usb", root, symlinks=True, dirs_exist_ok=True)
    (root / HUB / "serial").write_bytes(serial)
    rules_dir = root / "rules"
    rules_dir.mkdir()
    (rules_dir / "serials.yaml").write_text(RULE)

    found = discover(HostFS(str(root)), DiscoveryConfig(node_name="n"))
    for feature in found.features.values():
        for value in [*feature.attributes.values(), *(v for i in feature.instances for v in i.attributes.values())]:
            assert value.isprintable() and "\n" not in value
    catalogue = rules.load_catalogue([str(rules_dir)])
    plan = rules.derive(found.features, found.labels, {}, catalogue)
    produced = {k for k in plan.state.labels if k.startswith("ex.com/")}
    assert produced <= {"ex.com/hub-serial"}, produced
    assert "ex.com/evil" not in plan.state.labels
