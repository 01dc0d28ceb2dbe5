#!/usr/bin/env python3
"""What reading NFD's objects from the cluster (``run --rules-from-cluster=on``) costs: API
requests per node-hour and the agent's memory with 500 NodeFeatureRule objects in the cluster.

    .venv/bin/python bench/nfd_objects.py                 # 500 rules, watch renewals compressed 100x
    .venv/bin/python bench/nfd_objects.py --rules 2000 --window 60

Each run starts the project's ``node-feature-agent run`` (DaemonSet flags, the recorded Intel
server fixture) against the in-repo API server serving NFD's CRDs, waits until the Node is
labelled and 10 s more, samples RSS (psutil) every second for 10 s, then counts every request
it sends for ``--window`` seconds with ``--watch-timeout`` compressed (900 s -> 9 s by default)
and scales the count to an hour at the real renewal period. Three runs in one invocation:
``--rules-from-cluster=off`` (the floor), ``on`` with no objects, ``on`` with N objects, each
object one of Intel's seven published rules (labels renamed per object), one rule per object,
and one NodeFeature for the node; one rule in 50 matches this node (``rule_objects``). A rule edit (one MODIFIED event per agent, no request) is
measured as the bytes one watch event carries.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.apiserver import FakeApiServer  # noqa: E402

NODE = "bench-node"
CASE = REPO / "fixtures" / "sysfs" / "intel-server"
INTEL = yaml.safe_load((REPO / "labels" / "vendor" / "intel-device-plugins.node-feature-rules.yaml").read_text())
REAL_WATCH = 900


def rule_objects(count: int, matching_every: int = 50) -> list[dict[str, Any]]:
    """Intel's rules in turn, labels renamed per object; all but every ``matching_every``-th
    also need a kernel module no host has, so a few match, as in a cluster whose rules serve
    many kinds of node."""
    out = []
    for index in range(count):
        rule = copy.deepcopy(INTEL["spec"]["rules"][index % len(INTEL["spec"]["rules"])])
        rule["name"] = f"{rule['name']}-{index}"
        rule["labels"] = {k.replace("intel.feature", f"r{index}.feature"): v for k, v in rule["labels"].items()}
        if index % matching_every:
            rule["matchFeatures"].append({"feature": "kernel.loadedmodule",
                                          "matchExpressions": {f"bench_module_{index}": {"op": "Exists"}}})
        out.append({"apiVersion": INTEL["apiVersion"], "kind": "NodeFeatureRule",
                    "metadata": {"name": f"bench-{index:05d}"}, "spec": {"rules": [rule]}})
    return out


def node_feature() -> dict[str, Any]:
    path = REPO / "tests" / "data" / "nfd" / "examples" / "nodefeature-1.yaml"
    obj: dict[str, Any] = next(d for d in yaml.safe_load_all(path.read_text()) if d)
    obj["metadata"].update(namespace="vendor", labels={"nfd.node.kubernetes.io/node-name": NODE})
    return obj


def kind_of(path: str, query: dict[str, str]) -> str:
    what = next((k for k in ("nodefeaturerules", "nodefeatures", "events") if k in path), "nodes")
    verb = "WATCH" if query.get("watch") in ("true", "1") else "LIST/GET"
    return f"{what} {verb}"


def run_once(mode: str, objects: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    agent_bin = Path(sys.executable).parent / "node-feature-agent"
    with FakeApiServer(nfd_crds=True) as server:
        server.add_node(NODE)
        for obj in rule_objects(objects):
            server.custom.apply(obj)
        if objects:
            server.custom.apply(node_feature())
        kubeconfig = server.kubeconfig(tmp / f"kubeconfig-{mode}-{objects}")
        watch_timeout = max(1, round(REAL_WATCH / args.compress))
        cmd = [str(agent_bin), "--log-level", "warning", "run", f"--host-root={CASE}", f"--rules={REPO / 'labels'}",
               f"--node-name={NODE}", f"--kubeconfig={kubeconfig}", "--metrics-port=off", "--udev-mode=off",
               "--startup-jitter=0", f"--rules-from-cluster={mode}", f"--watch-timeout={watch_timeout}"]
        proc = subprocess.Popen(cmd, cwd=tempfile.gettempdir(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            started = time.monotonic()
            while True:
                labels = server.node(NODE)["metadata"].get("labels") or {}
                done = any(k.startswith("feature.node.kubernetes.io/") for k in labels)
                if objects:  # the cluster's rules reached the Node too
                    done = done and any(k.startswith("r50.feature.node.kubernetes.io/") for k in labels)
                if done or proc.poll() is not None or time.monotonic() - started > 180:
                    break
                time.sleep(0.1)
            first = time.monotonic() - started
            time.sleep(10)
            agent = psutil.Process(proc.pid)
            rss = []
            for _ in range(10):
                rss.append(agent.memory_info().rss / 2**20)
                time.sleep(1)
            server.clear_requests()
            time.sleep(args.window)
            counted = Counter(kind_of(r.path, r.query) for r in server.requests)
            edit_event = len(json.dumps({"type": "MODIFIED", "object": server.store.list("nodefeaturerules")[0][0]}))\
                if objects else 0
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        per_hour = {k: v * 3600 / (args.window * args.compress) for k, v in counted.items()}
        labels = len(server.node(NODE)["metadata"].get("labels") or {})
        return {"mode": mode, "objects": objects, "first": first, "rss": sorted(rss)[len(rss) // 2], "labels": labels,
                "per_hour": per_hour, "edit_event_bytes": edit_event,
                "list_bytes": len(json.dumps(server.store.list("nodefeaturerules")[0])) if objects else 0}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rules", type=int, default=500, help="NodeFeatureRule objects in the cluster")
    parser.add_argument("--window", type=float, default=45.0, help="seconds of counted requests per run")
    parser.add_argument("--compress", type=float, default=100.0, help="watch renewal period divided by this")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="nfa-nfd-objects-"))
    runs = [run_once("off", 0, args, tmp), run_once("on", 0, args, tmp), run_once("on", args.rules, args, tmp)]
    print(f"agent `run` on {CASE.name}, DaemonSet flags; requests counted {args.window:.0f} s with watch renewal "
          f"compressed {args.compress:.0f}x, scaled to an hour at the real 900 s; RSS median of 10 samples")
    for run in runs:
        total = sum(run["per_hour"].values())
        detail = ", ".join(f"{k} {v:.1f}" for k, v in sorted(run["per_hour"].items()))
        print(f"--rules-from-cluster={run['mode']:3} objects={run['objects']:5}: {run['labels']} labels, RSS {run['rss']:.1f} MiB, "
              f"labelled in {run['first']:.1f} s, {total:.1f} requests/node-hour ({detail})")
    floor, empty, full = runs
    print(f"memory: +{empty['rss'] - floor['rss']:.1f} MiB for the watches, +{full['rss'] - empty['rss']:.1f} MiB "
          f"for {args.rules} rules ({(full['rss'] - empty['rss']) * 1024 / max(1, args.rules):.1f} KiB a rule)")
    print(f"startup LIST of {args.rules} rules: {full['list_bytes'] / 1024:.0f} KiB; one rule edit: one watch event "
          f"of {full['edit_event_bytes']} bytes to every agent, no request")
    extra = sum(full["per_hour"].values()) - sum(floor["per_hour"].values())
    for nodes in (1000, 5000):
        print(f"{nodes} nodes: +{extra * nodes:.0f} requests/hour ({extra * nodes / 3600:.2f}/s) for the two "
              f"extra watches; rollout LISTs {nodes * full['list_bytes'] / 2**20:.0f} MiB of rules; a rule edit "
              f"fans out {nodes * full['edit_event_bytes'] / 2**20:.1f} MiB of watch events")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
