"""kubelet restarting, in every form, with ``run --device-plugin=on``.

The agent in-process (``tests/deviceplugin/test_agent_mode.Harness``) serves the edge-ai
host's devices to the kubelet stand-in over real unix sockets. kubelet then restarts: its
start-up empties the directory; or it removes ``kubelet.sock`` and listens again at once,
leaving the plugins' sockets (ext4 hands the new socket the inode just freed: the agent, which
compared inodes only, never registered again, and kubelet forgot the resources until the
agent restarted); or a new socket is renamed over the old one. After each, every resource must
be registered with the new kubelet and its devices listed there again.
"""

from __future__ import annotations

import os

import pytest

from tests.deviceplugin.kubelet_standin import KubeletStandIn
from tests.deviceplugin.test_agent_mode import HAILO, HAILO_8, PCIE_TPU, TPU, USB_TPU, Harness
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODE = "edge-ai-1"


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE)
        yield srv


def restarted(kubelet: KubeletStandIn, how: str) -> bool:
    """Restart ``kubelet`` and wait until both resources registered with it again and listed
    their devices; whether the new socket got the old one's inode."""
    before, inode = len(kubelet.registrations), os.stat(kubelet.socket).st_ino
    with kubelet._cond:
        kubelet.lists.clear()  # no device changes meanwhile: every list from here on is the new kubelet's
    kubelet.restart(how)
    same = os.stat(kubelet.socket).st_ino == inode
    kubelet.wait_for(lambda: {r.resource_name for r in kubelet.registrations[before:]} == {HAILO, TPU})
    kubelet.wait_list(TPU, [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")])
    kubelet.wait_list(HAILO, [(HAILO_8, "Healthy")])
    return same


@pytest.mark.parametrize("how", ["in-place", "renamed", "emptied"])
def test_every_resource_registers_again_after_kubelet_restarts(tmp_path, server, socket_dir, how):
    kubelet = KubeletStandIn(socket_dir).start()
    h = Harness(tmp_path, server, socket_dir).start()
    try:
        kubelet.wait_list(TPU, [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")])
        kubelet.wait_list(HAILO, [(HAILO_8, "Healthy")])
        restarts = 1
        same_inode = restarted(kubelet, how)
        # in place, the case that matters is the new socket on the old inode: ext4 hands it out
        # again when nothing else took it meanwhile, so on a busy machine it may take a few tries
        while how == "in-place" and not same_inode and restarts < 30:
            restarts += 1
            same_inode = restarted(kubelet, how)
        assert kubelet.allocate(TPU, [PCIE_TPU]).container_responses[0].devices[0].host_path == "/dev/apex_0"
        # the socket's new identity and its creation both say "register again": at times twice
        wait_for(lambda: h.metric(f'nfa_device_plugin_registrations_total{{resource="{TPU}",result="registered"}}')
                 >= 1.0 + restarts, what="each registration counted")
    finally:
        h.close()
        kubelet.stop()
