#!/usr/bin/env python3
"""Peak RSS and pass time of ``node-feature-agent run`` with the worst NodeFeatureRule objects
the API server accepts (each under etcd's 1.5 MiB request limit, which the in-repo server
enforces), against the targets: peak RSS <= 100 MiB, a pass <= 1 s.

    .venv/bin/python bench/hostile_objects.py            # every case
    .venv/bin/python bench/hostile_objects.py --case big-object

Each case starts ``run`` (DaemonSet flags, the recorded Intel server fixture, JSON logs) against
the in-repo API server holding the objects, waits until the agent has passed over them (the
Node labelled, and the bound's or budget's Warning Event where the case passes one), then reads
the process's peak RSS (``VmHWM``) and the longest pass from its ``reconcile`` log lines.

Cases: ``big-object``: one object of 10,000 rules (1.4 MiB); ``big-objects``: 8 such objects
(a LIST page of 11 MiB); ``many-objects``: 1,001 junk objects named before a legitimate one;
``at-budget``: objects exactly at the budget for all objects together (1,000 output items,
20,000 matchers, 128 template renders of 5,000 steps each), every rule matching.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.rules import budget  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402

NODE = "bench-node"
CASE = REPO / "fixtures" / "sysfs" / "intel-server"
MATCH = [{"feature": "cpu.model", "matchExpressions": {"vendor_id": {"op": "Exists"}}}]


def obj(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": {"name": name},
            "spec": {"rules": rules}}


LEGIT = obj("zz-legit", [{"name": "legit", "labels": {"example.com/legit": "true"}, "matchFeatures": MATCH}])


def big(name: str) -> dict[str, Any]:
    return obj(name, [{"name": f"r{i}", "labels": {f"example.com/{name}-{i}": "true"}, "matchFeatures": MATCH}
                      for i in range(10_000)])


def at_budget() -> list[dict[str, Any]]:
    """Objects whose costs add up to the budget for all objects together, each within the
    per-object budget, every rule matching this node."""
    objects = []
    expressions = {f"k{j}": {"op": "In", "value": ["a", "b", "c", "d"]} for j in range(39)}
    template = "{{ range $i := until 200 }}{{ range $j := until 20 }}{{ end }}{{ end }}"
    for index in range(10):  # 10 objects x 100 rules: 1,000 labels, 1,000 x 20 matchers
        rules = []
        for i in range(100):
            rule: dict[str, Any] = {"name": f"r{i}", "labels": {f"b{index}.example.com/l{i}": "true"},
                                    "matchFeatures": MATCH + [{"feature": "cpu.cpuid", "matchExpressions": {}}]}
            if i < 13 and index < 10 and len(objects) * 13 + i < budget.MAX_TEMPLATE_RENDERS:
                rule["labelsTemplate"] = template
            if i == 0:
                rule["matchFeatures"] = MATCH + [{"feature": "system.osrelease", "matchExpressions": expressions}]
            rules.append(rule)
        objects.append(obj(f"budget-{index}", rules))
    return objects


CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "big-object": lambda: [big("big"), LEGIT],
    "big-objects": lambda: [big(f"big{i}") for i in range(8)] + [LEGIT],
    "many-objects": lambda: [obj(f"aa-junk-{i:05d}", [{"name": "x", "matchFeatures": MATCH}])
                             for i in range(budget.MAX_RULE_OBJECTS + 1)] + [LEGIT],
    "at-budget": lambda: at_budget() + [LEGIT],
}


def measure(name: str, objects: list[dict[str, Any]], settle: float) -> dict[str, Any]:
    with FakeApiServer(nfd_crds=True) as server, tempfile.TemporaryDirectory() as tmp:
        server.add_node(NODE)
        for item in objects:
            server.custom.apply(item)
        kubeconfig = server.kubeconfig(Path(tmp) / "kubeconfig")
        log_path = Path(tmp) / "agent.log"
        cmd = [sys.executable, "-m", "agent", "--log-format", "json", "run", f"--host-root={CASE}",
               f"--rules={REPO / 'labels'}", f"--node-name={NODE}", f"--kubeconfig={kubeconfig}",
               "--metrics-port=off", "--udev-mode=off", "--startup-jitter=0", "--rules-from-cluster=on"]
        with open(log_path, "w") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=log)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                labels = (server.node(NODE)["metadata"].get("labels") or {})
                if labels.get("example.com/legit") == "true" or (name == "many-objects" and any(
                        e.get("reason") == "ClusterObjectsBounded" for e in server.events())):
                    break
                time.sleep(0.2)
            time.sleep(settle)
            status = Path(f"/proc/{proc.pid}/status").read_text()
            peak = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        passes = []
        for line in log_path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            message = str(record.get("message") or record.get("msg") or "")
            if record.get("event") == "reconcile" and " ms" in message:
                passes.append(float(message.rsplit(" in ", 1)[1].split(" ms")[0]))
        events = sorted({e.get("reason", "") for e in server.events() if e.get("type") == "Warning"})
        return {"case": name, "objects": len(objects), "peak_rss_mib": round(peak / 1024, 1),
                "longest_pass_ms": max(passes) if passes else None, "passes": len(passes),
                "legit_label": (server.node(NODE)["metadata"].get("labels") or {}).get("example.com/legit"),
                "warnings": events}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after convergence before sampling")
    args = parser.parse_args()
    ok = True
    for name in args.case or list(CASES):
        result = measure(name, CASES[name](), args.settle)
        ok = ok and result["peak_rss_mib"] <= 100 and (result["longest_pass_ms"] or 0) <= 1000
        print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
