"""``run --dra`` with the shipped home-lab declarations (deploy/optional-rules/homelab-devices.yaml)
through the whole agent: the Agent in-process on a writable copy of the constructed ``homelab``
host (fixtures/sysfs/homelab; its README says where each device's layout comes from), the
in-repo API server, the kubelet stand-in on real unix sockets (``tests/support/kubelet_dra.py``)
and podman consuming the CDI specs the agent wrote (``tests/dra/plugin/podman.py``). The
scheduler's part is played from what the API server holds: a claim is allocated the device the
agent's ResourceSlice names.

Expected values:
- device names follow the folding documented for ``agent.dra.names.device_name`` (resource
  kind + stable ID, ``:``/``.`` to ``-``): the C920 webcam sits on port 1-4 of the xHCI
  controller 0000:00:14.0, the Sonoff stick on 1-1; the sound cards are one group device whose ID
  is its directory (``dev-snd``, deploy/devices.md "Stable IDs");
- the webcam's nodes are the capture and metadata nodes uvcvideo made (``video0``, ``video1``);
  the sound device's nodes are every card's control/PCM/hwdep node and the shared ``seq`` and
  ``timer`` (the fixture's README);
- the device numbers given to the stand-in nodes on this machine are the fixture's own
  (``sys/class/*/dev``: video4linux 81:0 and 81:1, ALSA 116:2..116:7); ``seq`` and ``timer``
  have no sysfs entry in the fixture and get ALSA's fixed minors 1 and 33 (Linux
  ``include/sound/minors.h``: ``SNDRV_MINOR_SEQUENCER 1``, ``SNDRV_MINOR_TIMER 33``).

The fixture's /dev entries are empty files. The CDI spec names host paths as the host names them,
so for podman to bind them the test makes those nodes at the real paths on this machine (it
refuses to run where any of them exists) and removes them afterwards."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest
from kubernetes.client import CustomObjectsApi
from kubernetes.client.api_client import ApiClient

from agent.dra import cdi
from agent.dra.names import DRIVER
from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime.agent import Agent, Settings
from agent.runtime.event_sources import SocketSource
from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import FIXTURES, LABELS_DIR
from tests.deviceplugin.test_devnodes import OPTIONAL, host_copy, replace_tree
from tests.dra.plugin import podman
from tests.dra.plugin.cdi_schema import problems
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer
from tests.support.kubelet_dra import KubeletDra

NODE = "homelab-1"
NS = "default"
WEBCAM = "webcam-usb-0000-00-14-0-1-4"
SOUND = "sound-dev-snd"
SONOFF = "zigbee-usb-0000-00-14-0-1-1"
VIDEO_NODES = ["/dev/video0", "/dev/video1"]
SOUND_NODES = [f"/dev/snd/{n}" for n in ("controlC0", "controlC1", "hwC0D0", "pcmC0D0c", "pcmC0D0p", "pcmC1D0c",
                                         "seq", "timer")]
ALSA_FIXED = {"/dev/snd/seq": (116, 1), "/dev/snd/timer": (116, 33)}  # include/sound/minors.h
SONOFF_TTY = "/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/{tty}/tty/{tty}"


def fixture_numbers(path: str) -> tuple[int, int]:
    """(major, minor) of a /dev node as the homelab fixture's sysfs records it."""
    if path in ALSA_FIXED:
        return ALSA_FIXED[path]
    name = path.rsplit("/", 1)[-1]
    subsystem = "video4linux" if name.startswith("video") else "sound"
    major, minor = (FIXTURES / "homelab/sys/class" / subsystem / name / "dev").read_text().strip().split(":")
    return int(major), int(minor)


@pytest.fixture
def host_nodes():
    """The webcam's and the sound cards' nodes at their real paths on this machine, char devices
    with the fixture's numbers; nothing is opened, podman only binds them."""
    made_snd = not os.path.lexists("/dev/snd")
    present = [p for p in VIDEO_NODES + SOUND_NODES if os.path.lexists(p)]
    if present:
        pytest.fail(f"{present} exist on this machine; the test would bind real devices")
    made: list[str] = []
    try:
        if made_snd:
            os.mkdir("/dev/snd", 0o755)
        for path in VIDEO_NODES + SOUND_NODES:
            os.mknod(path, 0o660 | stat.S_IFCHR, os.makedev(*fixture_numbers(path)))
            made.append(path)
        yield
    finally:
        for path in made:
            os.unlink(path)
        if made_snd and os.path.isdir("/dev/snd"):
            os.rmdir("/dev/snd")


def expected_stat(paths: list[str]) -> list[str]:
    """busybox ``stat -c '%n %F %t,%T'`` lines: the numbers in hex."""
    return [f"{p} character special file {fixture_numbers(p)[0]:x},{fixture_numbers(p)[1]:x}" for p in paths]


class Bed:
    def __init__(self, root: Path, socket_dir: str, server: FakeApiServer) -> None:
        self.root, self.server = root, server
        self.sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        registry_dir = f"{socket_dir}/registry"
        settings = Settings(node_name=NODE, rules_dirs=[str(LABELS_DIR), str(OPTIONAL)], host_root=str(root),
                            metrics_port=None, debounce=0.05, debounce_max=0.5, watch_timeout=30,
                            backoff=BackoffSettings(initial=0.05, maximum=0.2), watch_rules=False, udev_mode="off",
                            dra="v1", dra_plugin_dir=f"{socket_dir}/plugins/nfa", dra_registry_dir=registry_dir,
                            cdi_dir=podman.RUNTIME_CDI_DIR)
        self.agent = Agent(settings, NodeApi.from_configuration(server.client_configuration()),
                           event_source=SocketSource(receiver))
        self.api_client = ApiClient(server.client_configuration())
        self.kubelet = KubeletDra(registry_dir, self.api_client)
        self.claims = 0

    def start(self) -> Bed:
        self.agent.start()
        wait_for(self.agent.ready.is_set, what="first reconcile")
        self.kubelet.start().wait_registered()
        return self

    def published(self) -> set[str]:
        slices = CustomObjectsApi(self.api_client).list_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices")["items"]
        return {d["name"] for s in slices if s["spec"]["nodeName"] == NODE and s["spec"]["driver"] == DRIVER
                for d in s["spec"]["devices"]}

    def prepare(self, device: str) -> tuple[tuple[str, str, str], list[str], list[tuple[str, str, str]]]:
        """A new claim allocated ``device`` and prepared: (claim ref, CDI IDs, the spec's
        device nodes as (hostPath, path, permissions))."""
        self.claims += 1
        name = f"claim-{self.claims}"
        created = self.kubelet.create_claim(NS, name, ["r"])
        self.kubelet.allocate(NS, name, [{"request": "r", "driver": DRIVER, "pool": NODE, "device": device}])
        ref = (NS, name, created["metadata"]["uid"])
        answer = self.kubelet.prepare(ref).claims[ref[2]]
        assert answer.error == "", answer.error
        assert [(d.pool_name, d.device_name) for d in answer.devices] == [(NODE, device)]
        with open(cdi.spec_path(podman.RUNTIME_CDI_DIR, ref[2])) as handle:
            spec = json.load(handle)
        assert problems(spec) == []
        (entry,) = spec["devices"]
        nodes = [(n["hostPath"], n["path"], n["permissions"]) for n in entry["containerEdits"]["deviceNodes"]]
        return ref, [i for d in answer.devices for i in d.cdi_device_ids], nodes

    def unprepare(self, ref: tuple[str, str, str]) -> None:
        assert self.kubelet.unprepare(ref).claims[ref[2]].error == ""
        assert not os.path.exists(cdi.spec_path(podman.RUNTIME_CDI_DIR, ref[2]))

    def inject(self, action: str, devpath: str, subsystem: str) -> None:
        self.sender.send(encode_kernel_uevent(action, devpath, subsystem))

    def close(self) -> None:
        self.kubelet.stop()
        self.agent.stop(timeout=5)
        self.sender.close()


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE)
        yield srv


def test_the_webcam_and_the_sound_cards_are_prepared_seen_by_podman_and_keep_their_names_across_a_replug(
        tmp_path, socket_dir, server, host_nodes):
    podman.image()
    root = host_copy(tmp_path)
    bed = Bed(root, socket_dir, server).start()
    try:
        first = wait_for(lambda: (names := bed.published()) >= {WEBCAM, SOUND, SONOFF} and names, timeout=60,
                         what="the webcam, the sound cards and the Sonoff in the node's ResourceSlice")

        # the webcam: one device, its capture and metadata nodes, nothing of the sound cards
        ref, ids, nodes = bed.prepare(WEBCAM)
        try:
            assert nodes == [(p, p, "rw") for p in VIDEO_NODES]
            seen = podman.run(ids, "stat -c '%n %F %t,%T' /dev/video0 /dev/video1; ls /dev/snd 2>&1 || true")
            assert seen.splitlines()[:2] == expected_stat(VIDEO_NODES)
            assert "No such file or directory" in seen.splitlines()[2]
        finally:
            bed.unprepare(ref)

        # the sound cards: one group device holding every node
        ref, ids, nodes = bed.prepare(SOUND)
        try:
            assert sorted(nodes) == [(p, p, "rw") for p in SOUND_NODES]
            seen = podman.run(ids, "ls /dev/snd; stat -c '%n %F %t,%T' " + " ".join(SOUND_NODES))
            names = [p.rsplit("/", 1)[-1] for p in SOUND_NODES]
            assert seen.split()[:len(names)] == names  # exactly these, nothing else under /dev/snd
            assert seen.splitlines()[-len(SOUND_NODES):] == expected_stat(SOUND_NODES)
        finally:
            bed.unprepare(ref)

        # the Sonoff unplugged: it leaves the slice; the webcam and the sound cards stay
        for entry in ("sys/bus/usb/devices/1-1", "sys/bus/usb/devices/1-1:1.0", "sys/class/tty/ttyUSB0", "dev/ttyUSB0"):
            (root / entry).unlink()
        shutil.rmtree(root / "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1")
        bed.inject("remove", SONOFF_TTY.format(tty="ttyUSB0"), "tty")
        wait_for(lambda: SONOFF not in bed.published(), timeout=60, what="the unplugged Sonoff leaving the slice")
        assert bed.published() == first - {SONOFF}

        # both usb-serial adapters plugged back in the other order (fixtures/sysfs/homelab-replugged)
        replace_tree(root, "homelab-replugged")
        bed.inject("add", SONOFF_TTY.format(tty="ttyUSB1"), "tty")
        wait_for(lambda: bed.published() == first, timeout=60, what="the same device names after the replug")
        ref, _, nodes = bed.prepare(SONOFF)
        assert nodes == [("/dev/ttyUSB1", "/dev/zigbee", "rw")]  # the stick's new kernel name
        bed.unprepare(ref)
        ref, ids, nodes = bed.prepare(WEBCAM)
        try:
            assert nodes == [(p, p, "rw") for p in VIDEO_NODES]
            assert podman.run(ids, "stat -c '%n %F %t,%T' /dev/video0 /dev/video1").splitlines() == \
                expected_stat(VIDEO_NODES)
        finally:
            bed.unprepare(ref)
    finally:
        bed.close()
