#!/usr/bin/env python3
"""RSS of ``node-feature-agent run`` as the image installs it: the wheel without test extras.

    python bench/memory.py [--case coral-usb] [--settle 20] [--venv DIR]

How the figures are built (printed with them):

1. A throwaway venv gets ``pip install <repo>`` (no ``[test]`` extras), as the Dockerfile's
   ``pip install /wheels/node_feature_agent-*.whl`` does; ``--venv`` reuses one.
2. In that venv, one interpreter per step reports its own ``VmRSS``: bare start-up; after
   ``import kubernetes.client`` (what any use of the official client costs: its package
   ``__init__`` imports every generated API and model); after importing what ``run`` imports.
3. The venv's ``node-feature-agent run`` (DaemonSet flags: kernel uevents, metrics on) labels a
   Node of the in-repo API server (started by this script from the repo's test support) for
   the fixture ``--case``; after the Node is labelled and ``--settle`` seconds pass, its RSS is
   sampled every second for ``--window`` seconds (psutil).  Target: <= 55 MiB.

The baseline for "what the agent adds" is the same venv's interpreter with the ``kubernetes``
import alone.  Prints numbers; never asserts.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from tests.support.apiserver import FakeApiServer  # noqa: E402

NODE = "bench-node"
PROBE = """
import sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
step = sys.argv[1]
if step in ("kubernetes", "agent"):
    import kubernetes.client
if step == "agent":
    import agent.cli, agent.commands.run, agent.runtime.agent
print(f"{rss():.1f}")
"""


def make_venv(path: Path) -> Path:
    python = path / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", str(REPO)], check=True, capture_output=True)
    return python


def probe(python: Path, step: str) -> float:
    out = subprocess.run([str(python), "-c", PROBE, step], check=True, capture_output=True, text=True,
                         cwd=tempfile.gettempdir())  # not the repo: the installed package must be used
    return float(out.stdout.strip())


def labelled(server: FakeApiServer) -> bool:
    labels = server.node(NODE).get("metadata", {}).get("labels", {})
    return any(key.startswith("feature.node.kubernetes.io/") for key in labels)


def run_agent(python: Path, case: str, settle: float, window: float, tmp: Path) -> tuple[list[float], float]:
    agent_bin = python.parent / "node-feature-agent"
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp / "kubeconfig")
        cmd = [str(agent_bin), "--log-level", "warning", "run", f"--host-root={REPO / 'fixtures/sysfs' / case}",
               f"--rules={REPO / 'labels'}", f"--node-name={NODE}", f"--kubeconfig={kubeconfig}",
               "--metrics-port=0", "--metrics-address=127.0.0.1", "--udev-mode=kernel", "--startup-jitter=0"]
        log = open(tmp / "agent.log", "w")  # noqa: SIM115 - the agent's stderr until it exits
        started = time.monotonic()
        proc = subprocess.Popen(cmd, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=log)
        try:
            while not labelled(server):
                if proc.poll() is not None or time.monotonic() - started > 120:
                    raise SystemExit(f"agent did not label the node; log: {tmp / 'agent.log'}")
                time.sleep(0.1)
            first = time.monotonic() - started
            time.sleep(settle)
            agent = psutil.Process(proc.pid)
            samples = []
            for _ in range(max(1, int(window))):
                samples.append(agent.memory_info().rss / 2**20)
                time.sleep(1.0)
            return samples, first
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", default="coral-usb", help="fixture under fixtures/sysfs/ the agent runs on")
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after the Node is labelled")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of RSS samples")
    parser.add_argument("--venv", help="reuse (or create) this venv instead of a throwaway one")
    args = parser.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="nfa-mem-"))
    venv = Path(args.venv) if args.venv else tmp / "venv"
    try:
        python = make_venv(venv)
        bare, kube, imported = (probe(python, step) for step in ("bare", "kubernetes", "agent"))
        samples, first = run_agent(python, args.case, args.settle, args.window, tmp)
        version = subprocess.run([str(python), "-c", "import sys; print(sys.version.split()[0])"],
                                 capture_output=True, text=True).stdout.strip()
        print(f"baseline: a venv with `pip install <repo>` (no test extras, as the image); each figure is "
              "one process's own VmRSS; the `run` figure is psutil RSS of the venv's node-feature-agent "
              f"run against the in-repo API server, {args.settle:.0f} s after it labelled the Node")
        print(f"python {version}; case {args.case}")
        print(f"bare interpreter:                        {bare:5.1f} MiB")
        print(f"+ import kubernetes.client:              {kube:5.1f} MiB  (kubernetes costs {kube - bare:.1f} MiB)")
        print(f"+ import what run imports:               {imported:5.1f} MiB  (agent modules add {imported - kube:.1f} MiB)")
        print(f"node-feature-agent run, steady:          median {statistics.median(samples):5.1f} MiB, "
              f"max {max(samples):.1f} MiB over {len(samples)} samples (target <= 55); Node labelled after "
              f"{first:.1f} s")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
