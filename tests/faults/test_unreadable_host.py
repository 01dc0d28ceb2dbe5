"""A host file that cannot be read is undetermined, never absent.

The reproduction, end to end: a Coral PCIe card is labelled (``accelerators/edgetpu`` and the
``node-feature-agent.io/edgetpu`` capacity); then its ``vendor`` file cannot be read — a
directory (EISDIR) or a FIFO where the file was, while the device directory is still listed —
or the process runs out of descriptors (a low ``RLIMIT_NOFILE``) during discovery. ``apply``
and ``run``, real processes against the in-repo API server through the real client, keep the
label and the capacity, and say why (a ``DiscoveryReadFailed`` Warning Event); a read that
succeeds again decides, and a device really gone is removed.

A file read but not whole is the same: an empty ``/proc/cpuinfo``, one cut mid-line, or one
listing fewer processors than sysfs has online leaves every cpu label (the x86-64 levels
included) as it is under ``run``, with the Event and ``nfa_feature_undetermined``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

pytestmark = pytest.mark.slow
NODE = "coral-pcie-1"
EDGETPU = "accelerators/edgetpu"
RESOURCE = "node-feature-agent.io/edgetpu"
CORAL = "sys/devices/pci0000:00/0000:00:1c.0/0000:01:00.0"

#: the CLI, with discovery starved of descriptors while a flag file exists (``-`` for always):
#: RLIMIT_NOFILE lowered to what the process holds plus ``spare`` for the pass, then restored
STARVED = r"""
import os, resource, sys
import agent.discovery, agent.runtime.discovery_cache
spare, flag = int(sys.argv[1]), sys.argv[2]

def starved(real):
    def discover(*args, **kwargs):
        if flag != "-" and not os.path.exists(flag):
            return real(*args, **kwargs)
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + spare, hard))
        try:
            return real(*args, **kwargs)
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    return discover

agent.discovery.discover = starved(agent.discovery.discover)
agent.runtime.discovery_cache.discover = starved(agent.runtime.discovery_cache.discover)
from agent.cli import main
sys.exit(main(sys.argv[3:]))
"""


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE, labels={"kubernetes.io/hostname": NODE}, capacity={"cpu": "4", "pods": "110"})
        yield srv


@pytest.fixture
def host(tmp_path) -> Path:
    root = tmp_path / "host"
    shutil.copytree(FIXTURES / "coral-pcie", root, symlinks=True)
    return root


def vendor_a_directory(root: Path) -> Callable[[], None]:
    vendor = root / CORAL / "vendor"
    content = vendor.read_bytes()
    vendor.unlink()
    vendor.mkdir()

    def restore() -> None:
        vendor.rmdir()
        vendor.write_bytes(content)

    return restore


def vendor_a_fifo(root: Path) -> Callable[[], None]:
    vendor = root / CORAL / "vendor"
    content = vendor.read_bytes()
    vendor.unlink()
    os.mkfifo(vendor)

    def restore() -> None:
        vendor.unlink()
        vendor.write_bytes(content)

    return restore


BREAKS = {"vendor-eisdir": vendor_a_directory, "vendor-fifo": vendor_a_fifo}


def unplug(root: Path) -> None:
    """The card really gone: its device directory and its bus link."""
    shutil.rmtree(root / CORAL)
    os.unlink(root / "sys/bus/pci/devices/0000:01:00.0")


def cli(server: FakeApiServer, tmp_path: Path, root: Path, *args: str, starved: tuple[int, str] | None = None,
        ) -> list[str]:
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    argv = ["--log-format", "json", *args, f"--host-root={root}", f"--rules={REPO / 'labels'}", f"--node-name={NODE}",
            f"--kubeconfig={kubeconfig}"]
    if starved is None:
        return [sys.executable, "-m", "agent", *argv]
    return [sys.executable, "-c", STARVED, str(starved[0]), starved[1], *argv]


def apply(server: FakeApiServer, tmp_path: Path, root: Path, starved: tuple[int, str] | None = None) -> None:
    done = subprocess.run(cli(server, tmp_path, root, "apply", "--once", starved=starved), cwd=REPO,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def coral_on(node: dict) -> tuple[str | None, str | None]:
    return (node["metadata"]["labels"].get(EDGETPU), (node["status"].get("capacity") or {}).get(RESOURCE))


def read_failed(server: FakeApiServer) -> list[dict]:
    return [e for e in server.events() if e["reason"] == "DiscoveryReadFailed"]


@pytest.mark.parametrize("broken", list(BREAKS))
def test_apply_keeps_the_coral_while_its_vendor_file_cannot_be_read(server, host, tmp_path, broken):
    apply(server, tmp_path, host)
    labelled = server.node(NODE)
    assert coral_on(labelled) == ("true", "1")

    restore = BREAKS[broken](host)
    apply(server, tmp_path, host)
    after = server.node(NODE)
    assert after["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"], "apply wrote the Node"
    assert coral_on(after) == ("true", "1")
    warning = read_failed(server)
    assert warning and warning[-1]["type"] == "Warning" and "pci.device" in warning[-1]["message"]
    assert f"{CORAL.removeprefix('sys')}/vendor" in warning[-1]["message"]

    restore()
    apply(server, tmp_path, host)
    assert server.node(NODE)["metadata"]["resourceVersion"] == labelled["metadata"]["resourceVersion"]
    unplug(host)  # a successful read that finds the card gone removes it
    apply(server, tmp_path, host)
    assert coral_on(server.node(NODE)) == (None, None)


@pytest.mark.parametrize("spare", [0, 3])
def test_apply_out_of_descriptors_leaves_the_node_as_it_is(server, host, tmp_path, spare):
    """Discovery runs out of descriptors (EMFILE on every open, or after a few): nothing the
    pass could not read is removed; here that is everything, so nothing is written."""
    apply(server, tmp_path, host)
    labelled = server.node(NODE)
    assert coral_on(labelled) == ("true", "1")
    apply(server, tmp_path, host, starved=(spare, "-"))
    after = server.node(NODE)
    assert after == labelled, "a pass out of descriptors changed the Node"
    assert read_failed(server), "no Warning said what was held"


class Agent:
    """``node-feature-agent run`` as a real process: resync every 0.3 s, metrics on."""

    def __init__(self, server: FakeApiServer, tmp_path: Path, root: Path, starved: tuple[int, str] | None = None):
        self.log = tmp_path / "agent.log"
        self.stderr = open(self.log, "w")  # noqa: SIM115 - held open for the process's life
        argv = cli(server, tmp_path, root, "run", "--resync-interval=0.3", "--udev-mode=off", "--startup-jitter=0",
                   "--metrics-port=0", "--metrics-address=127.0.0.1", starved=starved)
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def metrics(self) -> str:
        """The metrics page ("" until it serves)."""
        port = next((int(json.loads(line)["msg"].rsplit(" ", 1)[1]) for line in self.log.read_text().splitlines()
                     if '"listening"' in line), None)
        if port is None:
            return ""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                return answer.read().decode()
        except OSError:
            return ""

    def passes(self) -> int:
        """Reconcile passes so far (``nfa_reconcile_total``, every outcome; 0 until it serves)."""
        return int(sum(float(line.rsplit(" ", 1)[1]) for line in self.metrics().splitlines()
                       if line.startswith("nfa_reconcile_total{")))

    def undetermined(self, feature: str) -> float | None:
        """``nfa_feature_undetermined{feature}``; ``None`` while it has no sample."""
        prefix = f'nfa_feature_undetermined{{feature="{feature}"}} '
        return next((float(line[len(prefix):]) for line in self.metrics().splitlines() if line.startswith(prefix)),
                    None)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.stderr.close()


@pytest.mark.parametrize("broken", [*BREAKS, "out-of-descriptors"])
def test_run_keeps_the_coral_while_it_cannot_be_read(server, host, tmp_path, broken):
    flag = tmp_path / "starve"
    agent = Agent(server, tmp_path, host, starved=(0, str(flag)) if broken == "out-of-descriptors" else None)
    try:
        wait_for(lambda: coral_on(server.node(NODE)) == ("true", "1"), timeout=90, what="the Coral labelled")
        labelled = server.node(NODE)
        if broken == "out-of-descriptors":
            flag.write_text("")
            restore = flag.unlink
        else:
            restore = BREAKS[broken](host)
        counted = agent.passes()
        wait_for(lambda: agent.passes() >= counted + 3, timeout=60, what="three passes that cannot read")
        assert server.node(NODE) == labelled, "a pass that could not read changed the Node"
        assert read_failed(server), "no Warning said what was held"
        restore()
        counted = agent.passes()
        wait_for(lambda: agent.passes() >= counted + 3, timeout=60, what="three passes that read")
        assert coral_on(server.node(NODE)) == ("true", "1")
        unplug(host)
        wait_for(lambda: coral_on(server.node(NODE)) == (None, None), timeout=60, what="the card, really gone, removed")
    finally:
        agent.close()



# -- a host file read, but not whole ---------------------------------------------------------

CPUINFO = "proc/cpuinfo"


def cpu_labels(node: dict) -> dict[str, str]:
    return {k: v for k, v in node["metadata"]["labels"].items() if "/cpu-" in k}


def cpuinfo_empty(text: str) -> str:
    return ""


def cpuinfo_cut_mid_line(text: str) -> str:
    return text[:text.index(" avx512f ") + 5]  # inside the first block's flags line


def cpuinfo_fewer_processors(text: str) -> str:
    return "".join(text.partition("processor\t: 4")[:1])  # whole blocks of CPUs 0-3; 0-7 are online


INCOMPLETE = {"empty": cpuinfo_empty, "cut-mid-line": cpuinfo_cut_mid_line,
              "fewer-processors": cpuinfo_fewer_processors}


@pytest.mark.parametrize("when", ["while-running", "at-start"])
@pytest.mark.parametrize("shape", list(INCOMPLETE))
def test_run_holds_the_cpu_labels_while_cpuinfo_is_incomplete(server, host, tmp_path, shape, when):
    """An empty or cut /proc/cpuinfo (a bad copy, a read cut short) is not a CPU without
    features: under ``run`` no label it decides is removed (the x86-64 levels placement
    selects on included), a ``DiscoveryReadFailed`` Warning names the file and
    ``nfa_feature_undetermined`` is 1 for ``cpu.cpuid``; the whole file read again decides
    (a flag really gone is removed). ``at-start``: a fresh agent whose first pass cannot read
    it, with the labels an earlier instance set."""
    path = host / CPUINFO
    whole = path.read_text()
    assert "processor\t: 7" in whole and (host / "sys/devices/system/cpu/online").read_text() == "0-7\n"
    if when == "at-start":
        apply(server, tmp_path, host)
        path.write_text(INCOMPLETE[shape](whole))
    agent = Agent(server, tmp_path, host)
    try:
        labelled = wait_for(lambda: (node := server.node(NODE)) and len(cpu_labels(node)) > 50 and node, timeout=90,
                            what="the cpu labels on the Node")["metadata"]["labels"]
        assert labelled["feature.node.kubernetes.io/cpu-cpuid.X86_64_V4"] == "true"
        if when == "while-running":
            path.write_text(INCOMPLETE[shape](whole))
        wait_for(lambda: agent.undetermined("cpu.cpuid") == 1, timeout=60, what="cpu.cpuid undetermined")
        counted = agent.passes()
        wait_for(lambda: agent.passes() >= counted + 3, timeout=60, what="three passes on the incomplete file")
        assert server.node(NODE)["metadata"]["labels"] == labelled, "an incomplete cpuinfo changed a label"
        warning = read_failed(server)
        assert warning and warning[-1]["type"] == "Warning" and "/proc/cpuinfo" in warning[-1]["message"]
        assert "incomplete" in warning[-1]["message"]

        path.write_text(whole)
        wait_for(lambda: agent.undetermined("cpu.cpuid") == 0, timeout=60, what="cpu.cpuid read again")
        assert server.node(NODE)["metadata"]["labels"] == labelled
        path.write_text(whole.replace(" avx512f ", " "))  # whole, and the flag really gone: decided
        wait_for(lambda: "feature.node.kubernetes.io/cpu-cpuid.AVX512F" not in server.node(NODE)["metadata"]["labels"],
                 timeout=60, what="AVX512F removed once a whole file says so")
    finally:
        agent.close()
