"""``node-feature-agent run`` as a real process: inject socket, metrics port, SIGTERM."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import REPO
from tests.runtime.helpers import CORAL_DEVPATH, EDGETPU_LABEL, CoralHost, has_edgetpu, wait_for
from tests.support.apiserver import FakeApiServer

pytestmark = pytest.mark.slow
NODE = "edge-1"
TAINT = {"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}


class AgentProcess:
    def __init__(self, tmp_path, server, *extra):
        self.host = CoralHost(tmp_path)
        self.socket_path = str(tmp_path / "uevents.sock")
        self.stderr_path = tmp_path / "agent.log"
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        cmd = [sys.executable, "-m", "agent", "--log-format", "json", "run", f"--host-root={self.host.root}",
               f"--rules={REPO / 'labels'}", f"--node-name={NODE}", f"--kubeconfig={kubeconfig}",
               "--metrics-port=0", "--metrics-address=127.0.0.1", f"--udev-mode=inject:{self.socket_path}",
               "--debounce=0.05", "--startup-jitter=0", "--startup-taint=node-feature-agent.io/not-ready:NoSchedule", *extra]
        self.stderr = open(self.stderr_path, "w")  # noqa: SIM115 - the agent's stderr until it exits
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)

    def logs(self):
        out = []
        for line in self.stderr_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"msg": line})
        return out

    def port(self):
        for record in self.logs():
            if record.get("event") == "listening":
                return int(record["msg"].rsplit(" ", 1)[1])
        return None

    def inject(self, action):
        self.sender.sendto(encode_kernel_uevent(action, CORAL_DEVPATH, "usb"), self.socket_path)

    def terminate(self):
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=30)
        return code, time.monotonic() - started

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.sender.close()
        self.stderr.close()


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE, register_taints=[TAINT])
        yield srv


def test_agent_process_hotplug_metrics_and_sigterm(tmp_path, server):
    agent = AgentProcess(tmp_path, server)
    try:
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (True, True), timeout=60, what="startup labels")
        wait_for(lambda: not server.node(NODE)["spec"].get("taints"), what="startup taint removed")
        port = wait_for(agent.port, what="metrics port in the log")
        def ready():  # the labels land before the pass that wrote them returns and sets ready
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=10) as r:
                    return r.status == 200
            except urllib.error.HTTPError:
                return False

        wait_for(ready, what="/readyz 200")
        wait_for(lambda: os.path.exists(agent.socket_path), what="inject socket")
        agent.host.unplug()
        agent.inject("remove")
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (False, False), what="unplug applied")
        agent.host.plug()
        agent.inject("add")
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (True, True), what="plug applied")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            body = r.read().decode()
        assert 'nfa_hotplug_events_total{action="remove",subsystem="usb"} 1.0' in body
        code, took = agent.terminate()
        assert code == 0
        assert took < 15  # the target is 5 s; generous for a loaded CI machine
        assert has_edgetpu(server.node(NODE)) == (True, True)  # labels stay after shutdown
        records = agent.logs()
        assert any(r.get("event") == "stopped" for r in records)
        assert all(r.get("node") == NODE for r in records if r.get("event") == "reconcile")
        assert not os.path.exists(agent.socket_path)
    finally:
        agent.close()


def test_sigterm_during_a_slow_write_still_exits_zero(tmp_path, server):
    agent = AgentProcess(tmp_path, server)
    try:
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (True, True), timeout=60, what="startup labels")
        wait_for(lambda: os.path.exists(agent.socket_path), what="inject socket")
        server.faults.slow(20, count=5, verb="PATCH")
        agent.host.unplug()
        agent.inject("remove")
        wait_for(lambda: server.faults.injected, what="the write to reach the server")
        code, _took = agent.terminate()
        assert code == 0
        assert server.node(NODE)["metadata"]["labels"].get(EDGETPU_LABEL) == "true"  # exited while the write was still in flight; nothing was undone
    finally:
        agent.close()


def test_bad_usage_exits_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "agent", "run", "--udev-mode=netlink"], cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "udev-mode" in result.stderr
    result = subprocess.run([sys.executable, "-m", "agent", "run", "--node-name=x", "--evict-orphans",
                             f"--kubeconfig={tmp_path}/none"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--pod-guard" in result.stderr
