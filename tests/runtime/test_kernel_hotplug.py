"""The real agent process on the live host, driven by real kernel uevents.

``node-feature-agent run --udev-mode=kernel --host-root=/`` with a rule matching a veth
interface; ``ip link add`` makes the kernel create the interface and send its uevents
(see ``kernel_events`` for which arrive). The Node must gain the label and the extended
resource, then lose both on ``ip link del``, through the in-repo API server. Needs root and
``ip`` and a kernel that delivers the uevent to this network namespace; skipped, with the
reason, anywhere else (CI runs as whatever user its machine gives).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from agent.runtime.node_watch import NodeWatcher
from tests.conftest import REPO
from tests.runtime import kernel_events
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

pytestmark = pytest.mark.slow
NODE = "live-host"


@pytest.fixture(scope="module")
def kernel_path():
    why = kernel_events.unavailable()
    if why:
        pytest.skip(f"real kernel uevents unavailable: {why}")


def test_ip_link_add_labels_the_node_through_a_real_kernel_uevent(kernel_path, tmp_path):
    pair = kernel_events.VethPair()
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "veth.yaml").write_text(kernel_events.rule(pair.name))
    log_path = tmp_path / "agent.log"
    with FakeApiServer(bookmark_interval=1.0) as server, pair, open(log_path, "w") as log:
        server.add_node(NODE)
        cmd = [sys.executable, "-m", "agent", "--log-format", "json", "--log-level", "info", "run", "--host-root=/",
               f"--rules={rules}", f"--node-name={NODE}", f"--kubeconfig={server.kubeconfig(tmp_path / 'kc')}",
               "--metrics-port=0", "--metrics-address=127.0.0.1", "--udev-mode=kernel", "--startup-jitter=0"]
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        try:
            def records():
                out = []
                for line in log_path.read_text().splitlines():
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        out.append({"msg": line})
                return out

            wait_for(lambda: any(r.get("event") == "ready" for r in records()), timeout=60, what="first pass")
            assert kernel_events.state(server.node(NODE)) == (False, False)
            seen: list[tuple[bool, bool]] = []  # states a separate Node watch delivered, in order
            watcher = NodeWatcher(server.core_api(), NODE, lambda node: seen.append(kernel_events.state(node)),
                                  timeout_seconds=600).start()
            try:
                wait_for(lambda: seen, what="the observer's watch")
                pair.add()
                wait_for(lambda: seen[-1] == (True, True), timeout=20, what="label and resource after ip link add")
                assert server.node(NODE)["status"]["capacity"][kernel_events.RESOURCE] == "1"
                pair.remove()
                wait_for(lambda: seen[-1] == (False, False), timeout=20, what="both gone after ip link del")
            finally:
                watcher.stop()
            passes = [r for r in records() if r.get("event") == "reconcile" and "hotplug" in r.get("msg", "")]
            # the net uevent reran the network source only (subsystems.SUBSYSTEM_SOURCES), and the
            # queues uevents that follow it are not subscribed to
            assert passes and all("; rediscovered network)" in r["msg"] for r in passes), [r["msg"] for r in passes]
            assert not [r for r in records() if "Traceback" in json.dumps(r)]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                assert proc.wait(timeout=20) == 0
            finally:
                if proc.poll() is None:
                    proc.kill()
