"""Home-lab devices: /dev globs, groups, optional nodes, container paths and sharing, resolved
from the constructed homelab hosts (fixtures/sysfs/homelab, -replugged; their READMEs say where
each name comes from: 60-serial.rules for by-id/by-path, 60-persistent-v4l.rules, usb-serial
and cdc_acm for the tty placement) and served to the kubelet stand-in.

Expected nodes and IDs are the fixture's facts: the Sonoff sits on port 1-1, its by-id link
names its serial; after the replug the kernel calls it ttyUSB1."""

from __future__ import annotations

import os
import shutil
import socket
import textwrap
from pathlib import Path

import pytest

from agent import rules
from agent.cli import main
from agent.deviceplugin.devnodes import MAX_MATCHES, stable_text
from agent.deviceplugin.model import MAX_DEVICE_ID, ResourceDevices
from agent.deviceplugin.resolve import resolve_claims
from agent.discovery import discover
from agent.hostfs import HostFS
from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime.agent import Agent, Settings
from agent.runtime.event_sources import SocketSource
from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import FIXTURES, LABELS_DIR, REPO
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

OPTIONAL = REPO / "deploy" / "optional-rules"
SHIPPED = rules.load_catalogue([str(LABELS_DIR), str(OPTIONAL)])
ZIGBEE, WEBCAM, SOUND, FUSE = (f"node-feature-agent.io/{n}" for n in ("zigbee", "webcam", "sound", "fuse"))
SONOFF_PORT, CONBEE_PORT, WEBCAM_PORT = "usb-0000:00:14.0-1-1", "usb-0000:00:14.0-1-3", "usb-0000:00:14.0-1-4"
SONOFF_BY_ID = "/dev/serial/by-id/usb-ITead_Sonoff_Zigbee_3.0_USB_Dongle_Plus_c0e8eb8f5d2bec11a8bcb0c5e8e8e8e8-if00-port0"
FTDI_BY_ID = "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0"


def resolved(root, catalogue=SHIPPED) -> dict[str, ResourceDevices]:
    found = discover(HostFS(root))
    state = rules.desired_state(found.features, found.labels, {}, catalogue)
    return resolve_claims(HostFS(root), state.device_claims)


def served(resource: ResourceDevices) -> dict[str, list[tuple[str, str]]]:
    return {d.id: [(n.host_path, n.container_path) for n in d.nodes] for d in resource.devices if d.healthy}


def catalogue(tmp_path: Path, declaration: str, resource: str = "example.com/serial") -> rules.Catalogue:
    """A rule whose evidence is the homelab's built-in fuse (always there) and the given
    ``devices:`` body for ``resource``."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir(exist_ok=True)
    (rules_dir / "test.yaml").write_text(textwrap.dedent(f"""\
        apiVersion: nfd.k8s-sigs.io/v1alpha1
        kind: NodeFeatureRule
        metadata: {{name: test}}
        spec:
          rules:
            - name: test
              extendedResources: {{{resource}: "@count"}}
              devices:
                {resource}:
        """) + textwrap.indent(textwrap.dedent(declaration), " " * 10)
        + "      matchFeatures:\n        - feature: kernel.enabledmodule\n"
          "          matchExpressions: {fuse: {op: Exists}}\n")
    loaded = rules.load_catalogue([str(rules_dir)])
    assert not loaded.problems, loaded.problems
    return loaded


def replace_tree(root: Path, case: str) -> None:
    """The host becomes ``case`` (the root directory itself stays: the agent holds it open)."""
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    shutil.copytree(FIXTURES / case, root, symlinks=True, dirs_exist_ok=True)


def host_copy(tmp_path: Path, case: str = "homelab") -> Path:
    return Path(shutil.copytree(FIXTURES / case, tmp_path / "host", symlinks=True))


# -- the shipped declarations ------------------------------------------------------------------

def test_shipped_declarations_serve_the_zigbee_sticks_webcam_sound_cards_and_fuse():
    found = resolved(FIXTURES / "homelab")
    assert served(found[ZIGBEE]) == {SONOFF_PORT: [("/dev/ttyUSB0", "/dev/zigbee")],
                                     CONBEE_PORT: [("/dev/ttyACM0", "/dev/zigbee")]}
    assert served(found[WEBCAM]) == {WEBCAM_PORT: [("/dev/video0", "/dev/video0"), ("/dev/video1", "/dev/video1")]}
    snd = ["controlC0", "controlC1", "pcmC0D0c", "pcmC0D0p", "pcmC1D0c", "hwC0D0", "timer", "seq"]
    assert served(found[SOUND]) == {"dev-snd": [(f"/dev/snd/{n}", f"/dev/snd/{n}") for n in snd]}
    assert served(found[FUSE]) == {"dev-fuse": [("/dev/fuse", "/dev/fuse")]}
    assert found[FUSE].shares == 10 and len(found[FUSE].replicas()) == 10
    assert found[ZIGBEE].devices[0].id_basis == "its USB controller and port path"
    assert not any(r.notes or r.undetermined for r in found.values())


def test_the_ftdi_cable_is_not_taken_for_a_zigbee_stick():
    """It is a usb-serial tty too, but neither its id nor its product says Zigbee."""
    nodes = [n.host_path for d in resolved(FIXTURES / "homelab")[ZIGBEE].devices for n in d.nodes]
    assert "/dev/ttyUSB1" not in nodes


def test_a_replug_that_swaps_the_tty_names_keeps_every_id_and_the_nodes_follow_the_device():
    before, after = resolved(FIXTURES / "homelab"), resolved(FIXTURES / "homelab-replugged")
    assert served(after[ZIGBEE]) == {SONOFF_PORT: [("/dev/ttyUSB1", "/dev/zigbee")],
                                     CONBEE_PORT: [("/dev/ttyACM0", "/dev/zigbee")]}
    assert {r: [d.id for d in v.devices] for r, v in before.items()} == \
           {r: [d.id for d in v.devices] for r, v in after.items()}


# -- globs, their IDs and their bounds ---------------------------------------------------------

def test_a_by_id_glob_makes_a_device_per_adapter_under_its_serial_across_a_replug(tmp_path):
    serial = catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/serial/by-id/usb-*-port0\n")
    ids = {}
    for case in ("homelab", "homelab-replugged"):
        devices = resolved(FIXTURES / case, serial)["example.com/serial"].devices
        ids[case] = {d.id: [(n.host_path, n.container_path) for n in d.nodes] for d in devices}
        assert all(d.id_basis.startswith("the udev link /dev/serial/by-id/") for d in devices)
    sonoff = stable_text(SONOFF_BY_ID[len("/dev/"):].replace("/", "-"))
    ftdi = stable_text(FTDI_BY_ID[len("/dev/"):].replace("/", "-"))
    assert ids["homelab"] == {sonoff: [("/dev/ttyUSB0", SONOFF_BY_ID)], ftdi: [("/dev/ttyUSB1", FTDI_BY_ID)]}
    assert ids["homelab-replugged"] == {sonoff: [("/dev/ttyUSB1", SONOFF_BY_ID)], ftdi: [("/dev/ttyUSB0", FTDI_BY_ID)]}


def test_a_kernel_name_glob_takes_its_id_from_the_most_stable_name_the_host_has(tmp_path):
    serial = catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/ttyUSB*\n")
    root = host_copy(tmp_path)

    def ids():
        return {d.id: d.id_basis for d in resolved(root, serial)["example.com/serial"].devices}

    assert set(ids()) == {stable_text(SONOFF_BY_ID[5:].replace("/", "-")), stable_text(FTDI_BY_ID[5:].replace("/", "-"))}
    shutil.rmtree(root / "dev/serial/by-id")  # no serial links: the USB port from sysfs
    assert ids() == {"usb-0000:00:14.0-1-1:1.0": "its USB controller and port path (sysfs)",
                     "usb-0000:00:14.0-1-2:1.0": "its USB controller and port path (sysfs)"}
    for name in ("ttyUSB0", "ttyUSB1"):
        (root / "sys/class/tty" / name).unlink()  # no sysfs entry either: the by-path links
    assert set(ids()) == {"serial-by-path-pci-0000:00:14.0-usb-0:1:1.0-port0",
                          "serial-by-path-pci-0000:00:14.0-usb-0:2:1.0-port0"}
    shutil.rmtree(root / "dev/serial")  # nothing stable left: the kernel's name, and it says so
    assert {i: "may name it differently after a replug" in b for i, b in ids().items()} == \
           {"dev-ttyUSB0": True, "dev-ttyUSB1": True}


def test_a_link_out_of_dev_a_directory_and_an_odd_name_are_refused_not_served(tmp_path):
    root = host_copy(tmp_path)
    (root / "etc/shadow").write_text("root:*:19000:0:99999:7:::\n")
    os.symlink("../etc/shadow", root / "dev/ttyUSB9")
    os.symlink("/etc/shadow", root / "dev/serial/by-id/usb-evil-if00-port0")
    (root / "dev/ttyUSBdir").mkdir()
    (root / "dev" / "ttyUSB\x1b[31m").write_text("")
    serial = catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/ttyUSB*\n  - {path: /dev/serial/by-id/usb-evil-if00-port0, optional: true}\n")
    # a per-match glob with a path entry: the path is every device's node, so it must not be served
    found = resolved(root, serial)["example.com/serial"]
    every_node = [n.host_path for d in found.devices for n in d.nodes]
    assert every_node and all(p.startswith("/dev/") for p in every_node)
    assert "/etc/shadow" not in every_node and not any("ttyUSB9" in p or "dir" in p for p in every_node)
    notes = "\n".join(found.notes)
    assert "/dev/ttyUSB9: refused, it leads to /etc/shadow, outside /dev" in notes
    assert "/dev/serial/by-id/usb-evil-if00-port0: refused, it leads to /etc/shadow, outside /dev" in notes
    assert "/dev/ttyUSBdir: refused, a directory" in notes
    assert "/dev/ttyUSB\\x1b[31m: refused, the name has bytes no device name has" in notes
    assert "\x1b" not in notes
    assert sorted(d.id for d in found.devices if d.healthy) == sorted(
        stable_text(p[5:].replace("/", "-")) for p in (SONOFF_BY_ID, FTDI_BY_ID))


def test_a_serial_with_odd_bytes_in_its_by_id_name_gets_a_safe_unique_id(tmp_path):
    root = host_copy(tmp_path)
    link = root / "dev/serial/by-id" / "usb-Cheap_UART_\\x20#$%&()'-if00-port0"
    os.symlink("../../ttyUSB1", link)
    (root / "dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0").unlink()
    serial = catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/serial/by-id/*\n")
    devices = {d.id: d for d in resolved(root, serial)["example.com/serial"].devices}
    odd = next(d for d in devices.values() if d.nodes[0].host_path == "/dev/ttyUSB1")
    assert len(odd.id) <= MAX_DEVICE_ID and "::" not in odd.id
    assert set(odd.id) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-")
    assert odd.id != stable_text("serial-by-id-usb-Cheap_UART__x20#$%&()'-if00-port0".replace("#", "_"))


def test_ten_thousand_matches_are_bounded_and_the_rest_is_undetermined(tmp_path):
    root = host_copy(tmp_path)
    many = root / "dev/pts"
    many.mkdir()
    for n in range(10_000):
        (many / f"{n:05d}").write_text("")
    pts = catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/pts/*\n", "example.com/pts")
    found = resolved(root, pts)["example.com/pts"]
    assert len(found.devices) == MAX_MATCHES
    assert found.undetermined == f"/dev/pts/* matches 10000 entries; the first {MAX_MATCHES} are served, the rest are not read"


def test_a_missing_node_makes_the_device_unhealthy_unless_optional(tmp_path):
    root = host_copy(tmp_path)
    (root / "dev/snd/timer").unlink()
    strict = catalogue(tmp_path, "deviceNodes:\n  - path: /dev/fuse\n  - path: /dev/snd/timer\n", "example.com/a")
    ((device),) = resolved(root, strict)["example.com/a"].devices
    assert not device.healthy and device.why == "no node for path /dev/snd/timer"
    lenient = catalogue(tmp_path, "deviceNodes:\n  - path: /dev/fuse\n  - {path: /dev/snd/timer, optional: true}\n",
                        "example.com/a")
    ((device),) = resolved(root, lenient)["example.com/a"].devices
    assert device.healthy and [n.host_path for n in device.nodes] == ["/dev/fuse"]


def test_a_rule_that_does_not_match_reads_no_dev_and_serves_nothing(tmp_path):
    root = host_copy(tmp_path)
    (root / "lib/modules").rename(root / "lib/modules-gone")  # no modules.builtin: no fuse evidence
    fuse = catalogue(tmp_path, "deviceNodes:\n  - path: /dev/fuse\n", "example.com/fuse")
    assert resolved(root, fuse)["example.com/fuse"].devices == ()


# -- validate --------------------------------------------------------------------------------

@pytest.mark.parametrize("entry, message", [
    ("- glob: /dev/tty[USB*", "a '[' that is never closed"),
    ("- glob: /dev/*/ttyUSB0", "wildcards are allowed in the last path component only"),
    ("- glob: /dev/tty[]", "an empty bracket expression"),
    ("- glob: /etc/*", "must be under /dev/"),
    ("- glob: /dev/../etc/*", "must be a normalised absolute path"),
    ("- path: /dev/ttyUSB*", "has wildcards; use glob"),
    ("- {path: /dev/fuse, containerPath: /etc/fuse}", "containerPath '/etc/fuse' must be under /dev/"),
    ("- {glob: /dev/snd/*, group: true, containerPath: /dev/snd0}", "containerPath cannot be given"),
])
def test_validate_refuses_bad_node_entries_with_file_and_line(tmp_path, capsys, entry, message):
    check_refused(tmp_path, capsys, f"deviceNodes:\n  {entry}\n", message)


@pytest.mark.parametrize("shares", ["0", "-3", "1.5", '"10"', "true", "1001"])
def test_validate_refuses_a_sharing_count_that_is_no_positive_whole_number(tmp_path, capsys, shares):
    check_refused(tmp_path, capsys, f"deviceNodes:\n  - path: /dev/fuse\nshares: {shares}\n",
                  "must be a whole number from 1 to 1000")


def check_refused(tmp_path, capsys, declaration, message):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    body = textwrap.indent(textwrap.dedent(declaration), " " * 12)
    (rules_dir / "bad.yaml").write_text(
        "apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: bad}\nspec:\n  rules:\n"
        "    - name: bad\n      extendedResources: {example.com/x: \"@count\"}\n      devices:\n"
        f"        example.com/x:\n{body}"
        "      matchFeatures:\n        - feature: kernel.enabledmodule\n          matchExpressions: {fuse: {op: Exists}}\n")
    assert main(["validate", "--rules", str(rules_dir)]) != 0
    err = capsys.readouterr()
    text = err.out + err.err
    assert message in text, text
    assert f"{rules_dir / 'bad.yaml'}:1" in text, text


# -- served to the kubelet stand-in, hotplug included ------------------------------------------

NODE = "homelab-1"


SOUND_NODES = [f"/dev/snd/{n}" for n in ("controlC0", "controlC1", "pcmC0D0c", "pcmC0D0p", "pcmC1D0c", "hwC0D0",
                                         "timer", "seq")]


def allocated(kubelet, resource: str, device_id: str) -> list[tuple[str, str, str]]:
    """(host path, container path, permissions) of each node kubelet's ``Allocate`` gets."""
    return [(s.host_path, s.container_path, s.permissions)
            for c in kubelet.allocate(resource, [device_id]).container_responses for s in c.devices]


def check_every_homelab_device(kubelet, sonoff_tty: str) -> None:
    """The four shipped home-lab resources as kubelet lists and allocates them."""
    kubelet.wait_list(ZIGBEE, [(CONBEE_PORT, "Healthy"), (SONOFF_PORT, "Healthy")], timeout=60)
    kubelet.wait_list(WEBCAM, [(WEBCAM_PORT, "Healthy")], timeout=60)
    kubelet.wait_list(SOUND, [("dev-snd", "Healthy")], timeout=60)
    kubelet.wait_list(FUSE, sorted([("dev-fuse", "Healthy")] + [(f"dev-fuse::{k}", "Healthy") for k in range(1, 10)]),
                      timeout=60)
    wait_for(lambda: allocated(kubelet, ZIGBEE, SONOFF_PORT) == [(sonoff_tty, "/dev/zigbee", "rw")],
             what=f"the stick as {sonoff_tty}")
    assert allocated(kubelet, WEBCAM, WEBCAM_PORT) == [("/dev/video0", "/dev/video0", "rw"),
                                                       ("/dev/video1", "/dev/video1", "rw")]
    assert allocated(kubelet, SOUND, "dev-snd") == [(p, p, "rw") for p in SOUND_NODES]
    assert allocated(kubelet, FUSE, "dev-fuse::7") == [("/dev/fuse", "/dev/fuse", "rw")]


def test_kubelet_gets_every_homelab_device_and_the_same_ids_after_a_swapping_replug(tmp_path, socket_dir, kubelet):
    root = host_copy(tmp_path)
    sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with FakeApiServer(bookmark_interval=0.5) as server:
        server.add_node(NODE)
        settings = Settings(node_name=NODE, rules_dirs=[str(LABELS_DIR), str(OPTIONAL)], host_root=str(root),
                            metrics_port=None, debounce=0.05, debounce_max=0.5, watch_timeout=30,
                            backoff=BackoffSettings(initial=0.05, maximum=0.2), watch_rules=False,
                            device_plugin=True, device_plugin_dir=socket_dir)
        agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()),
                      event_source=SocketSource(receiver))
        agent.start()
        try:
            check_every_homelab_device(kubelet, "/dev/ttyUSB0")

            # unplug both usb-serial adapters: the Sonoff leaves (Unhealthy for the grace period)
            for entry in ("sys/bus/usb/devices/1-1", "sys/bus/usb/devices/1-1:1.0", "sys/class/tty/ttyUSB0",
                          "dev/ttyUSB0"):
                (root / entry).unlink()
            shutil.rmtree(root / "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1")
            sender.send(encode_kernel_uevent("remove", "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/ttyUSB0/tty/ttyUSB0", "tty"))
            kubelet.wait_list(ZIGBEE, [(CONBEE_PORT, "Healthy"), (SONOFF_PORT, "Unhealthy")], timeout=60)

            # plugged back in the other order: the kernel now calls the Sonoff ttyUSB1
            replace_tree(root, "homelab-replugged")
            sender.send(encode_kernel_uevent("add", "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/ttyUSB1/tty/ttyUSB1", "tty"))
            # every resource lists the same IDs; the stick's ID hands out its new node
            check_every_homelab_device(kubelet, "/dev/ttyUSB1")
        finally:
            agent.stop(timeout=5)
            sender.close()


def test_devices_past_the_bound_are_held_with_a_metric_and_one_warning(tmp_path, socket_dir, kubelet):
    from agent.runtime.device_service import DeviceService
    from agent.runtime.metrics import AgentMetrics

    root = host_copy(tmp_path)
    pts = root / "dev/pts"
    pts.mkdir()
    for n in range(10):
        (pts / f"x{n}").write_text("")
    catalogue_ = catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/pts/*\n", "example.com/pts")
    metrics, warnings = AgentMetrics(), []
    service = DeviceService(str(root), socket_dir, metrics, "node", check_interval=0.1, warn=warnings.append).start()
    node = {"metadata": {"annotations": {}}}

    def publish():
        found = discover(HostFS(root))
        service.publish(rules.desired_state(found.features, found.labels, {}, catalogue_), node)

    def held_metric():
        return metrics.device_plugin_undetermined.labels(resource="example.com/pts")._value.get()

    try:
        publish()
        first = [(f"dev-pts-x{n}", "Healthy") for n in range(10)]
        kubelet.wait_list("example.com/pts", first)
        assert held_metric() == 0 and warnings == []
        for n in range(10_000):  # sorted before x0..x9: the bound stops before reaching them
            (pts / f"{n:05d}").write_text("")
        publish()
        publish()  # a second pass past the bound warns no more
        bounded = [(f"dev-pts-{n:05d}", "Healthy") for n in range(MAX_MATCHES)]
        kubelet.wait_list("example.com/pts", bounded + first)
        assert held_metric() == 1
        expected = (f"device plugin example.com/pts: /dev/pts/* matches 10010 entries; the first {MAX_MATCHES} "
                    "are served, the rest are not read; the devices not read are held as last published "
                    "(deploy/devices.md, \"Bounds\")")
        assert warnings == [expected]
        for n in range(10_000):
            (pts / f"{n:05d}").unlink()
        (pts / "x9").unlink()  # read whole again: a device that is gone is gone
        publish()
        # every device no longer there is reported gone (Unhealthy for the vanished grace)
        gone = [(i, "Unhealthy") for i, _ in bounded] + [("dev-pts-x9", "Unhealthy")]
        kubelet.wait_list("example.com/pts", first[:9] + gone)
        assert held_metric() == 0
    finally:
        service.stop()


def test_explain_lists_a_resources_devices_and_what_each_id_is_built_from(capsys):
    assert main(["explain", "--host-root", str(FIXTURES / "homelab-replugged"), "--rules", str(LABELS_DIR),
                 "--rules", str(OPTIONAL), ZIGBEE, FUSE]) == 0
    text = capsys.readouterr().out
    assert (f"    {SONOFF_PORT}  Healthy  /dev/ttyUSB1 as /dev/zigbee\n"
            "      ID from its USB controller and port path\n") in text
    assert "    dev-fuse  Healthy, shared 10 ways  /dev/fuse\n      ID from the declared path /dev/fuse" in text


def test_a_usb_serial_number_selects_one_adapter_and_class_tty_finds_its_node(tmp_path):
    """generic-device-plugin's usb vendor/product/serial selection: the rule matches the serial
    (the FTDI cable's A50285BI, README), ``class: tty`` hands out the tty the kernel gave it."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "ftdi.yaml").write_text(textwrap.dedent("""\
        apiVersion: nfd.k8s-sigs.io/v1alpha1
        kind: NodeFeatureRule
        metadata: {name: ftdi}
        spec:
          rules:
            - name: the cable with this serial
              extendedResources: {example.com/console: "@count"}
              devices:
                example.com/console:
                  deviceNodes: [{class: tty}]
              matchFeatures:
                - feature: usb.device
                  matchExpressions:
                    vendor: {op: In, value: ["0403"]}
                    device: {op: In, value: ["6001"]}
                    serial: {op: In, value: ["A50285BI"]}
        """))
    chosen = rules.load_catalogue([str(rules_dir)])
    for case, tty in (("homelab", "/dev/ttyUSB1"), ("homelab-replugged", "/dev/ttyUSB0")):
        assert served(resolved(FIXTURES / case, chosen)["example.com/console"]) == \
            {"usb-0000:00:14.0-1-2": [(tty, tty)]}


def test_the_agent_says_in_a_warning_event_and_a_metric_when_a_pattern_passes_its_bound(tmp_path, socket_dir, kubelet):
    root = host_copy(tmp_path)
    (root / "dev/pts").mkdir()
    (root / "dev/pts/0").write_text("")
    catalogue(tmp_path, "deviceNodes:\n  - glob: /dev/pts/*\n", "example.com/pts")
    sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with FakeApiServer(bookmark_interval=0.5) as server:
        server.add_node(NODE)
        settings = Settings(node_name=NODE, rules_dirs=[str(tmp_path / "rules")], host_root=str(root),
                            metrics_port=None, debounce=0.05, debounce_max=0.5, watch_timeout=30,
                            backoff=BackoffSettings(initial=0.05, maximum=0.2), watch_rules=False,
                            device_plugin=True, device_plugin_dir=socket_dir)
        agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()),
                      event_source=SocketSource(receiver))
        agent.start()
        try:
            kubelet.wait_list("example.com/pts", [("dev-pts-0", "Healthy")], timeout=60)
            for n in range(1, MAX_MATCHES + 5):
                (root / "dev/pts" / str(n)).write_text("")
            sender.send(encode_kernel_uevent("add", "/devices/virtual/tty/ptmx", "tty"))
            wait_for(lambda: any(f"/dev/pts/* matches {MAX_MATCHES + 5} entries" in (e.get("message") or e.get("note") or "")
                                 for e in server.events() if e.get("type") == "Warning"), timeout=60,
                     what="a Warning Event naming the pattern past its bound")
            assert "nfa_device_plugin_undetermined{resource=\"example.com/pts\"} 1.0" in agent.metrics.render().decode()
        finally:
            agent.stop(timeout=5)
            sender.close()
