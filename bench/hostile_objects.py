#!/usr/bin/env python3
"""Peak RSS and pass time of ``node-feature-agent run`` with the worst NodeFeatureRule objects
the API server accepts (each under etcd's 1.5 MiB request limit, which the in-repo server
enforces), against the targets: peak RSS <= 100 MiB, a pass <= 1 s.

    .venv/bin/python bench/hostile_objects.py            # every case
    .venv/bin/python bench/hostile_objects.py --case big-object

Each case starts ``run`` (DaemonSet flags, the recorded Intel server fixture, JSON logs) against
the in-repo API server holding the objects, waits until the agent has passed over them (the
Node carries the case's label, or the bound's Warning Event came), then reads the process's
peak RSS (``VmHWM``) and the longest pass from its ``reconcile`` log lines.

Cases: ``big-object``: one object of about 10,500 rules (1.5 MiB); ``big-objects``: 16 such
objects (24 MiB); ``many-objects``: 1,001 junk objects named before a legitimate one;
``at-budget``: objects exactly at the budget for all objects together (``at_budget``).
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

from agent.gotemplate import compile_template  # noqa: E402
from agent.rules import budget  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402
from tests.support.custom_resources import ETCD_MAX_REQUEST_BYTES  # noqa: E402

NODE = "bench-node"
CASE = REPO / "fixtures" / "sysfs" / "intel-server"
MATCH = [{"feature": "cpu.model", "matchExpressions": {"vendor_id": {"op": "Exists"}}}]


def obj(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": {"name": name},
            "spec": {"rules": rules}}


LEGIT = obj("zz-legit", [{"name": "legit", "labels": {"example.com/legit": "true"}, "matchFeatures": MATCH}])


def compact(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":")).encode())


def big(name: str) -> dict[str, Any]:
    """As many one-label rules as fit under etcd's 1.5 MiB request limit (the in-repo server's),
    leaving 4 KiB for the metadata the server adds: about 10,500 rules."""
    rules: list[dict[str, Any]] = []
    size = compact(obj(name, [])) + 4096
    while True:
        rule = {"name": f"r{len(rules)}", "labels": {f"example.com/{name}-{len(rules)}": "true"}, "matchFeatures": MATCH}
        size += compact(rule) + 1
        if size > ETCD_MAX_REQUEST_BYTES:
            return obj(name, rules)
        rules.append(rule)


def heavy_template(text: str) -> str:
    """A ``labelsTemplate`` that takes as many steps as one render may (``budget.TEMPLATE_STEPS``)
    and writes as many characters (``TEMPLATE_OUTPUT_CHARS``: a blank line, then ``text``)."""
    padding = " " * (budget.TEMPLATE_OUTPUT_CHARS - len(text) - 1) + "\n"

    def fits(loops: int) -> bool:
        try:
            compile_template(f"{{{{ range $i := {loops} }}}}{{{{ end }}}}{padding}{text}").render(
                {}, max_steps=budget.TEMPLATE_STEPS, max_output=budget.TEMPLATE_OUTPUT_CHARS)
        except Exception:  # noqa: BLE001 - over the budget
            return False
        return True

    low, high = 0, budget.TEMPLATE_STEPS
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return f"{{{{ range $i := {low} }}}}{{{{ end }}}}{padding}{text}"


def at_budget() -> list[dict[str, Any]]:
    """Ten objects of 100 rules whose costs add up to the budget for all objects together, each
    object within its own, every rule matching this node: 1,000 labels of 65 bytes of key and
    value (65,000 of 65,536 bytes), 20 matchers a rule (20,000), as many rules as the budget has
    template renders with a render of 5,000 steps and 16 KiB of output, each adding one label."""
    vendors = ["Intel"] + [f"Vendor{i:02d}" for i in range(15)]  # NFD's vendor_id: Intel, AMD, ...
    match = MATCH + [{"feature": "cpu.model", "matchExpressions": {"vendor_id": {"op": "In", "value": vendors}}}]
    objects, renders = [], budget.MAX_TEMPLATE_RENDERS
    for index in range(10):
        rules = []
        for i in range(100):
            rule: dict[str, Any] = {"name": f"r{i}", "labels": {f"b{index}.example.com/l{i:03d}": "v" * 46},
                                    "matchFeatures": match}
            if i < renders // 10 + (index < renders % 10):  # spread over the objects
                rule["labelsTemplate"] = heavy_template(f"t{index}.example.com/t{i:03d}=true")
            rules.append(rule)
        objects.append(obj(f"budget-{index}", rules))
    costs = [budget.object_cost(o) for o in objects]
    total = sum(costs, budget.Cost())
    assert all(budget.object_problem(c) is None for c in costs) and budget.total_problem(costs) is None
    assert (total.outputs, total.matchers, total.template_renders) == \
        (budget.MAX_OUTPUTS, budget.MAX_MATCHERS, budget.MAX_TEMPLATE_RENDERS)
    assert all(compact(o["spec"]) <= budget.MAX_OBJECT_BYTES for o in objects)
    return objects


#: case -> (the objects, the label that shows the agent passed over them; None: the bound's Event)
CASES: dict[str, tuple[Callable[[], list[dict[str, Any]]], str | None]] = {
    "big-object": (lambda: [big("big"), LEGIT], "example.com/legit"),
    "big-objects": (lambda: [big(f"big{i:02d}") for i in range(16)] + [LEGIT], "example.com/legit"),
    "many-objects": (lambda: [obj(f"aa-junk-{i:05d}", [{"name": "x", "matchFeatures": MATCH}])
                              for i in range(budget.MAX_RULE_OBJECTS + 1)] + [LEGIT], None),
    "at-budget": (at_budget, "t9.example.com/t000"),
}


def measure(name: str, objects: list[dict[str, Any]], label: str | None, settle: float) -> dict[str, Any]:
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
            deadline, converged = time.monotonic() + 300, False
            while not converged and time.monotonic() < deadline:
                labels = (server.node(NODE)["metadata"].get("labels") or {})
                converged = (label in labels) if label else any(
                    e.get("reason") == "ClusterObjectsBounded" for e in server.events())
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
        return {"case": name, "objects": len(objects), "converged": converged, "peak_rss_mib": round(peak / 1024, 1),
                "longest_pass_ms": max(passes) if passes else None, "passes": len(passes),
                "labels": len(server.node(NODE)["metadata"].get("labels") or {}),
                "legit_label": (server.node(NODE)["metadata"].get("labels") or {}).get("example.com/legit"),
                "warnings": events}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after convergence before sampling")
    args = parser.parse_args()
    ok = True
    for name in args.case or list(CASES):
        build, label = CASES[name]
        result = measure(name, build(), label, args.settle)
        ok = ok and result["converged"] and result["peak_rss_mib"] <= 100 and (result["longest_pass_ms"] or 0) <= 1000
        print(json.dumps(result))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
