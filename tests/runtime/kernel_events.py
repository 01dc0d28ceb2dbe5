"""Real kernel uevents on the live host: a veth pair made with ``ip link add``.

Used by ``tests/runtime/test_kernel_hotplug.py`` and ``bench/latency.py --mode kernel``.

What arrives where (measured on this machine, Linux 6.18, with a pyudev kernel monitor in the
root network namespace; ``probe`` re-checks it wherever it runs):

* a veth pair created entirely inside a private network namespace (``ip -n NS link add``)
  sends its ``net``/``queues`` uevents only into that namespace: a monitor in the root
  namespace receives nothing, and the root namespace's ``/sys/class/net`` does not list it
  (sysfs shows the interfaces of the namespace that mounted it). An agent on host root ``/``
  can see neither, so that variant cannot drive it;
* ``ip link add NAME type veth peer name NAMEp netns NS`` puts one end in the root namespace:
  the root monitor receives ``add net /devices/virtual/net/NAME`` followed by ``add queues``
  for its rx/tx queues (and ``remove queues`` for the ones veth trims), and ``NAME`` appears in
  ``/sys/class/net``. ``ip link del NAME`` sends ``remove queues`` ... ``remove net``. The
  peer stays out of the root namespace. This is the variant used here.

The rule below matches the new interface through the network source's ``network.virtual``
feature (a veth has no ``device`` link) and counts it as an extended resource, so one
interface gives both of a hotplug's writes: a label (metadata PATCH) and a resource
(``/status`` PATCH).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time

IP = shutil.which("ip")
LABEL = "feature.node.kubernetes.io/nfa-test-veth"
RESOURCE = "node-feature-agent.io/nfa-test-veth"


def rule(interface: str) -> str:
    """A NodeFeatureRule labelling the node while ``interface`` exists."""
    return f"""apiVersion: nfd.k8s-sigs.io/v1alpha1
kind: NodeFeatureRule
metadata:
  name: nfa-test-veth
spec:
  rules:
    - name: "test veth {interface}"
      labels:
        "{LABEL}": "true"
      extendedResources:
        {RESOURCE}: "@count"
      matchFeatures:
        - feature: network.virtual
          matchExpressions:
            name: {{op: In, value: ["{interface}"]}}
"""


def state(node: dict) -> tuple[bool, bool]:
    """(label present, resource present) on a Node dict."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    return LABEL in labels, RESOURCE in capacity


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([IP or "ip", *args], capture_output=True, text=True, timeout=20)


class VethPair:
    """``NAME`` in the root network namespace, its peer in a private one (``NS``)."""

    def __init__(self, tag: str | None = None) -> None:
        tag = tag or str(os.getpid() % 100000)
        self.name, self.peer, self.netns = f"nfa{tag}", f"nfa{tag}p", f"nfa-{tag}"
        if len(self.peer) > 15:
            raise ValueError("interface names are at most 15 characters")
        self._netns_made = False

    def __enter__(self) -> VethPair:
        done = _ip("netns", "add", self.netns)
        if done.returncode != 0:
            raise OSError(f"ip netns add {self.netns}: {done.stderr.strip()}")
        self._netns_made = True
        return self

    def add(self) -> None:
        done = _ip("link", "add", self.name, "type", "veth", "peer", "name", self.peer, "netns", self.netns)
        if done.returncode != 0:
            raise OSError(f"ip link add {self.name} type veth: {done.stderr.strip()}")

    def remove(self) -> None:
        done = _ip("link", "del", self.name)
        if done.returncode != 0 and "Cannot find" not in done.stderr:
            raise OSError(f"ip link del {self.name}: {done.stderr.strip()}")

    @property
    def present(self) -> bool:
        return os.path.exists(f"/sys/class/net/{self.name}")

    def __exit__(self, *exc) -> None:
        if self.present:
            _ip("link", "del", self.name)
        if self._netns_made:
            _ip("netns", "del", self.netns)


class NetMonitor:
    """A kernel uevent monitor (pyudev, netlink group 1) for ``net`` events, as the agent opens."""

    def __init__(self) -> None:
        import pyudev

        self.monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source="kernel")
        self.monitor.filter_by("net")
        self.monitor.start()

    def wait(self, action: str, name: str, timeout: float = 5.0) -> float | None:
        """perf_counter time the ``action`` event of interface ``name`` was received, or None."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            device = self.monitor.poll(timeout=max(0.01, deadline - time.monotonic()))
            if device is None:
                continue
            if device.action == action and device.sys_name == name:
                return time.perf_counter()
        return None

    def close(self) -> None:
        try:
            self.monitor.stop()
        except Exception:  # noqa: BLE001, S110 - best effort at teardown
            pass


def unavailable() -> str | None:
    """Why the real-kernel path cannot be exercised here (None: it can). Creates and deletes
    one probe veth pair and checks its ``add`` uevent reaches this process."""
    if os.geteuid() != 0:
        return f"needs root to create a veth pair (running as uid {os.geteuid()})"
    if IP is None:
        return "no `ip` command (iproute2) on PATH"
    try:
        monitor = NetMonitor()
    except Exception as exc:  # noqa: BLE001 - no netlink here: say why
        return f"cannot open a kernel uevent monitor: {exc}"
    try:
        with VethPair(f"{os.getpid() % 10000}q") as pair:
            try:
                pair.add()
            except OSError as exc:
                return f"cannot create a veth pair: {exc}"
            if monitor.wait("add", pair.name, timeout=3.0) is None:
                return "the kernel's uevent for a new interface did not reach this process's network namespace"
            if not pair.present:
                return f"/sys/class/net/{pair.name} is not visible in this mount namespace"
    except OSError as exc:
        return str(exc)
    finally:
        monitor.close()
    return None
