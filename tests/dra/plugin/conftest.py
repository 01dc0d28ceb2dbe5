"""The DRA plugin's test bed: the in-repo API server, a kubelet stand-in on real sockets and a
plugin whose directories are all under one short /tmp path (unix socket paths stay < 108 bytes)."""

from __future__ import annotations

import os

import pytest
from kubernetes.client.api_client import ApiClient

from agent.deviceplugin.model import DeviceNode, PluginDevice, ResourceDevices
from agent.dra.claims import ApiClaims
from agent.dra.plugin import KubeletPlugin
from agent.kube.light_core import LightCoreV1Api
from agent.runtime.dra_service import DraPluginService
from tests.support.apiserver import FakeApiServer
from tests.support.kubelet_dra import KubeletDra

NODE = "edge-ai-1"
NS = "default"
TPU = "node-feature-agent.io/edgetpu"
APEX = PluginDevice("pci-0000:01:00.0", (DeviceNode("/dev/null", "/dev/apex_0"),))
USB = PluginDevice("usb-0000:00:14.0-2-2", (DeviceNode("/dev/zero", "/dev/bus/usb/002/002"),))
DFU = PluginDevice("usb-0000:00:14.0-1-2", (DeviceNode("/dev/zero", "/dev/bus/usb/001/003"),),
                   why="Coral USB Accelerator still in its boot (DFU) state; load its firmware on the host")
DEVICES = {TPU: ResourceDevices(TPU, (APEX, USB, DFU), env={"EDGETPU": "1"})}


class Bed:
    def __init__(self, root: str, server: FakeApiServer) -> None:
        self.root, self.server = root, server
        self.plugin_dir, self.registry_dir = f"{root}/plugins/nfa", f"{root}/registry"
        self.cdi_dir = f"{root}/cdi"
        os.makedirs(self.cdi_dir, exist_ok=True)
        self.api_client = ApiClient(server.client_configuration())
        self.kubelet = KubeletDra(self.registry_dir, self.api_client)
        self.plugin: KubeletPlugin | None = None
        self.service: DraPluginService | None = None
        self.observed: list[tuple[str, str]] = []

    def start_plugin(self, devices=DEVICES, *, watched: bool = False, **kw) -> KubeletPlugin:
        """The plugin started alone, or ``watched``: as ``run`` starts it, with its directories
        watched (``DraPluginService``)."""
        plugin = KubeletPlugin(NODE, ApiClaims(LightCoreV1Api(self.api_client)), plugin_dir=self.plugin_dir,
                               registry_dir=self.registry_dir, cdi_dir=kw.pop("cdi_dir", self.cdi_dir),
                               check_interval=kw.pop("check_interval", 0.1),
                               observe=lambda o, r: self.observed.append((o, r)), **kw)
        plugin.publish(devices)
        self.plugin = plugin
        if watched:
            self.service = DraPluginService(plugin).start()
        else:
            plugin.start()
        return plugin

    def claim(self, name: str, devices: list[str], *, driver: str = "node-feature-agent.io", pool: str = NODE,
              requests: list[str] | None = None) -> tuple[str, str, str]:
        """A claim allocated as the scheduler would: one request per device."""
        requests = requests or [f"r{i}" for i in range(len(devices))]
        created = self.kubelet.create_claim(NS, name, requests)
        if devices:
            self.kubelet.allocate(NS, name, [{"request": r, "driver": driver, "pool": pool, "device": d}
                                             for r, d in zip(requests, devices, strict=True)])
        return NS, name, created["metadata"]["uid"]

    def close(self) -> None:
        self.kubelet.stop()
        if self.service is not None:
            self.service.stop(1.0)
        elif self.plugin is not None:
            self.plugin.stop(1.0)


@pytest.fixture
def bed(socket_dir):
    with FakeApiServer() as server:
        server.add_node(NODE)
        bed = Bed(socket_dir, server)
        yield bed
        bed.close()
