"""The device plugins' sockets are 0600 whatever the umask: ``run --device-plugin=on`` as a
process started under umask 000 (where a plain bind makes a socket 0777, writable by every
local user) serves the edge-ai host's resources to the kubelet stand-in; each socket kubelet
was told about is a socket of mode 0600, and kubelet (the owner here; root on a node) reaches
it. kubelet itself keeps the directory at 0750 and binds kubelet.sock plainly (kubernetes
pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go), so owner-only is all it needs."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys

from tests.conftest import LABELS_DIR, REPO
from tests.deviceplugin.test_agent_mode import HAILO, HAILO_8, NODE, PCIE_TPU, TPU, USB_TPU
from tests.runtime.helpers import CoralHost
from tests.support.apiserver import FakeApiServer


def test_plugin_sockets_are_0600_under_umask_000(tmp_path, socket_dir, kubelet):
    host = CoralHost(tmp_path, "edge-ai")
    # a staging directory a killed agent left mid-bind (kubelet's start-up keeps directories)
    leftover = os.path.join(socket_dir, ".nfa-leftover")
    os.mkdir(leftover)
    open(os.path.join(leftover, "s"), "w").close()
    os.utime(leftover, (1, 1))
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        env = {k: v for k, v in os.environ.items() if k != "NODE_FEATURE_AGENT_RULES"}
        env["PYTHONPATH"] = str(REPO)
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "--log-format", "json", "run", "--host-root", str(host.root),
             "--rules", str(LABELS_DIR), "--kubeconfig", str(kubeconfig), "--node-name", NODE,
             "--metrics-port", "off", "--udev-mode", "off", "--startup-jitter", "0",
             "--device-plugin", "on", "--device-plugin-dir", socket_dir],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            preexec_fn=lambda: os.umask(0))
        try:
            kubelet.wait_list(TPU, [(PCIE_TPU, "Healthy"), (USB_TPU, "Healthy")], timeout=120)
            kubelet.wait_list(HAILO, [(HAILO_8, "Healthy")], timeout=120)
            endpoints = {r.endpoint for r in kubelet.registrations}
            assert len(endpoints) == 2
            for endpoint in endpoints:
                mode = os.stat(os.path.join(socket_dir, endpoint)).st_mode
                assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, (endpoint, oct(mode))
            # the staging directories the sockets were bound in are gone, the leftover too
            assert sorted(os.listdir(socket_dir)) == sorted(endpoints | {"kubelet.sock"})
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert "Traceback" not in proc.stderr.read()
