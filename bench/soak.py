#!/usr/bin/env python3
"""Chaos soak of the real agent process: is it ever blind, half-written, leaking or wrong?

    .venv/bin/python bench/soak.py --duration 3600          # the hour the issue asks for
    .venv/bin/python bench/soak.py --duration 60 --fault-every 6 --rules-every 10 --check   # CI

``node-feature-agent run`` (a subprocess, production defaults: ``--retries 1``, events through
``--udev-mode inject:<socket>`` in kernel wire format) against the in-repo API server, on a
copy of fixtures/sysfs/coral-usb seeded with foreign labels, taints and a resource. Meanwhile:

* hotplugs every 1-3 s: the Coral USB Accelerator's sysfs entries moved out/back, announced
  by the four uevents a real plug sends (device and interface add + bind, or the reverse);
* a rules edit every ``--rules-every`` s, cycling valid, invalid (broken YAML), valid, the way
  kubelet swaps a mounted ConfigMap;
* an API fault every ``--fault-every`` s, cycling the matrix below;
* a foreign controller editing its own label and taint, and kubelet heartbeats.

It reports what the issue asks for: the longest period in which a change (hotplug or valid
rules edit) was made but the Node did not show it ("blind"); per fault, the time from its end
until the Node was right again; writes per hotplug with Events; whether every invalid edit got
its ``RulesInvalid`` Event; the ledger (no foreign item touched, checked on every version the
agent wrote); RSS/FD/thread trends (RSS slope after warm-up, least squares); whether the final
Node equals what ``node-feature-agent plan`` says; SIGTERM exit. It never asserts timings;
``--check`` exits 1 only on correctness failures (ledger, final state, tracebacks, exit).

The Node is observed in-process (the server's store, every 50 ms), not through a watch, so
the faults the agent suffers do not blind the observer too.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from agent.runtime.uevent import encode_kernel_uevent  # noqa: E402
from bench.latency import heartbeats, stop_agent, wait_file  # noqa: E402
from tests.faults.harness import CATALOGUE, NODE, Ledger, differences, expected_state, seed_node  # noqa: E402
from tests.runtime.configmap import write_configmap  # noqa: E402
from tests.runtime.helpers import CORAL_DEVPATH, CoralHost, has_edgetpu  # noqa: E402
from tests.support.apiserver import FakeApiServer, SecondWriter  # noqa: E402

IFACE = CORAL_DEVPATH + "/2-2:1.0"
PLUG = (("add", CORAL_DEVPATH), ("add", IFACE), ("bind", IFACE), ("bind", CORAL_DEVPATH))
UNPLUG = (("unbind", IFACE), ("remove", IFACE), ("unbind", CORAL_DEVPATH), ("remove", CORAL_DEVPATH))
# valid edits add a label file whose dependency is a label kubelet put on the node (foreign input)
EDIT_A = {**CATALOGUE, "example.com/soak-a": "kubernetes.io/os\n"}
EDIT_B = {**CATALOGUE, "example.com/soak-b": "kubernetes.io/os\n"}
BROKEN = {**EDIT_A, "soak-rules.yaml": "apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: x\n"}
EDITS = ((EDIT_B, True), (BROKEN, False), (EDIT_A, True))


def _outage(server: FakeApiServer) -> None:
    server.faults.refuse_connections(count=10**6, reset=True)
    server.drop_watches(abrupt=True)
    time.sleep(10)
    server.faults.clear()


# (name, inject); a fault ends when its requests are all taken (or 15 s pass), and a slow one
# only once its last slow answer has gone out (SLOW_FOR), when the API is healthy again
FAULTS = (
    ("5xx burst", lambda s: s.faults.fail(503, count=6)),
    ("429 Retry-After 2", lambda s: s.faults.throttle(retry_after=2, count=3)),
    ("409 on PATCH", lambda s: s.faults.fail(409, count=3, verb="PATCH")),
    ("refused connections", lambda s: s.faults.refuse_connections(count=4, reset=True)),
    ("10 s outage", _outage),
    ("slow responses 4 s", lambda s: s.faults.slow(4, count=3)),
    ("applied, answer too late", lambda s: s.faults.slow(7, count=1, after=True, verb="PATCH")),
    ("watch 410 Gone", lambda s: (s.drop_watches(abrupt=True), s.expire_resource_versions())),
    ("watch ends cleanly", lambda s: s.drop_watches(abrupt=False)),
    ("status PATCH 500", lambda s: s.faults.fail(500, count=2, verb="PATCH", path=f"/nodes/{NODE}/status")),
)
SLOW_FOR = {"slow responses 4 s": 4.0, "applied, answer too late": 7.0}


def rules_invalid_parts(event: dict) -> int:
    """How many RulesInvalid Warnings an Event carries: a pass's one Event lists each part as
    ``Reason: text`` (agent.reconcile.events.aggregate), a lone one has it as its reason."""
    message = str(event.get("message") or "")
    parts = message.count("RulesInvalid: ")
    return parts or int(event.get("reason") == "RulesInvalid")


@dataclass
class Tracker:
    """Is the Node what the host and rules say right now? Records blind periods and convergence."""

    server: FakeApiServer
    host: CoralHost
    rules: Path
    expected: object = None
    behind_since: float | None = None
    blind: list[tuple[float, float]] = field(default_factory=list)  # (start, length)
    converged_at: list[float] = field(default_factory=list)
    half_since: float | None = None
    half: list[tuple[float, float]] = field(default_factory=list)  # (start, length), seen every 50 ms
    lock: threading.Lock = field(default_factory=threading.Lock)
    compute: threading.Lock = field(default_factory=threading.Lock)

    def changed(self) -> None:
        """A change was just made (host or valid rules): from now on the Node must follow it."""
        made = time.monotonic()
        with self.compute:  # hotplug and rules threads: the later change's state must win
            want = expected_state(self.host.root, self.rules, self.server.node(NODE))
            with self.lock:
                self.expected = want
                if self.behind_since is None:
                    self.behind_since = made

    def observe(self) -> None:
        node = self.server.node(NODE)
        label, resource = has_edgetpu(node)
        now = time.monotonic()
        with self.lock:  # half-written: the Edge TPU label without its resource, or the reverse
            if label != resource and self.half_since is None:
                self.half_since = now
            elif label == resource and self.half_since is not None:
                self.half.append((self.half_since, now - self.half_since))
                self.half_since = None
        with self.lock:
            if self.expected is None or differences(node, self.expected):
                return
            now = time.monotonic()
            if self.behind_since is not None:
                self.blind.append((self.behind_since, now - self.behind_since))
                self.behind_since = None
            if not self.converged_at or now - self.converged_at[-1] > 0.5:
                self.converged_at.append(now)
            else:
                self.converged_at[-1] = now

    def converged_after(self, moment: float) -> float | None:
        """Seconds from ``moment`` until the Node was first right (0 if it was right then)."""
        with self.lock:
            if self.behind_since is None or self.behind_since > moment:
                earlier = [b for b in self.blind if b[0] <= moment < b[0] + b[1]]
                if not earlier:
                    return 0.0
                return earlier[0][0] + earlier[0][1] - moment
            return None


class Soak:
    def __init__(self, args: argparse.Namespace, tmp: Path, server: FakeApiServer) -> None:
        self.args, self.tmp, self.server = args, tmp, server
        self.rng = random.Random(args.seed)
        self.host = CoralHost(tmp)
        self.rules = tmp / "rules"
        self.good_rules = tmp / "last-good-rules"  # what the agent must apply: an invalid edit changes nothing
        self._write_rules(EDIT_A, valid=True)
        self.sock = str(tmp / "uevents.sock")
        self.stop = threading.Event()
        self.tracker = Tracker(server, self.host, self.good_rules)
        self.ledger = Ledger(server)
        self.ledger_writes, self.violations = 0, []
        self.hotplugs = self.invalid_edits = self.valid_edits = 0
        self.faults: list[dict] = []
        self.samples: list[tuple[float, float, int, int]] = []  # (t, rss MiB, fds, threads)
        self.requests = {"PATCH": 0, "PATCH ok": 0, "POST events": 0, "POST ok": 0, "RulesInvalid": 0, "all": 0}
        self.started = time.monotonic()

    def start_agent(self) -> subprocess.Popen:
        kubeconfig = self.server.kubeconfig(self.tmp / "kubeconfig")
        cmd = [sys.executable, "-m", "agent", "--log-format", "json", "--log-level", "info", "run",
               f"--host-root={self.host.root}", f"--rules={self.rules}", f"--node-name={NODE}",
               f"--kubeconfig={kubeconfig}", "--metrics-port=0", "--metrics-address=127.0.0.1",
               f"--udev-mode=inject:{self.sock}", "--startup-jitter=0",
               "--startup-taint=node-feature-agent.io/not-ready:NoSchedule"]
        self.log_path = self.tmp / "agent.log"
        return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"))

    # -- the chaos ------------------------------------------------------------------------
    def _hotplugs(self) -> None:
        sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        seq = itertools.count(1)
        while not self.stop.wait(self.rng.uniform(1.0, 3.0)):
            plug = not self.host.plugged
            (self.host.plug if plug else self.host.unplug)()
            self.tracker.changed()
            for action, devpath in PLUG if plug else UNPLUG:
                sender.sendto(encode_kernel_uevent(action, devpath, "usb", seqnum=next(seq)), self.sock)
            self.hotplugs += 1
        sender.close()

    def _write_rules(self, files: dict, valid: bool) -> None:
        write_configmap(self.rules, files)
        if valid:
            write_configmap(self.good_rules, files)
        self.last_edit_valid = valid

    def _rules_edits(self) -> None:
        for files, valid in itertools.cycle(EDITS):
            if self.stop.wait(self.args.rules_every):
                return
            self._write_rules(files, valid)
            if valid:
                self.valid_edits += 1
                self.tracker.changed()
            else:
                self.invalid_edits += 1

    def _faults(self) -> None:
        chosen = [f for f in FAULTS if not self.args.only_faults or any(o in f[0] for o in self.args.only_faults)]
        for name, inject in itertools.cycle(chosen):
            if self.stop.wait(self.args.fault_every * self.rng.uniform(0.8, 1.2)):
                return
            began = time.monotonic()
            inject(self.server)
            deadline = began + 15
            while self.server.faults.pending() and time.monotonic() < deadline and not self.stop.is_set():
                time.sleep(0.05)
            self.server.faults.clear()
            self.faults.append({"fault": name, "began": began, "ended": time.monotonic() + SLOW_FOR.get(name, 0.0)})

    def _observe(self) -> None:
        proc = psutil.Process(self.proc.pid)
        next_sample = next_ledger = 0.0
        while not self.stop.wait(0.05):
            self.tracker.observe()
            now = time.monotonic()
            if now >= next_ledger:
                self._check_ledger()
                next_ledger = now + 2.0
            if now >= next_sample:
                try:
                    self.samples.append((now - self.started, proc.memory_info().rss / 2**20, proc.num_fds(),
                                         proc.num_threads()))
                except psutil.Error:
                    return
                next_sample = now + self.args.sample_every

    def _check_ledger(self) -> None:
        writes, problems = self.ledger.check_new()
        self.ledger_writes += writes
        self.violations += problems
        records = self.server.requests
        self.server.clear_requests()
        for r in records:
            self.requests["all"] += 1
            accepted = 0 < r.status < 400  # a refused connection is recorded with status 0
            if r.method == "PATCH":
                self.requests["PATCH"] += 1
                self.requests["PATCH ok"] += accepted
            elif r.method == "POST" and r.path.endswith("/events"):
                self.requests["POST events"] += 1
                self.requests["POST ok"] += accepted
                if isinstance(r.body, dict) and accepted:
                    self.requests["RulesInvalid"] += rules_invalid_parts(r.body)

    # -- the run --------------------------------------------------------------------------
    def run(self) -> dict:
        self.proc = self.start_agent()
        wait_file(self.sock)
        self.tracker.changed()
        deadline = time.monotonic() + 60
        while self.tracker.behind_since is not None and time.monotonic() < deadline:
            self.tracker.observe()
            time.sleep(0.05)
        if self.tracker.behind_since is not None:
            raise SystemExit(f"agent never labelled the node; log: {self.log_path}")
        self.tracker.blind.clear()
        self.started = time.monotonic()
        writer = SecondWriter(self.server, NODE, interval=7.0)
        writer.start()
        beats_stop = threading.Event()
        threads = [threading.Thread(target=t, daemon=True) for t in (self._hotplugs, self._rules_edits, self._faults,
                                                                      self._observe)]
        threads.append(threading.Thread(target=heartbeats, args=(self.server, beats_stop, 10.0, None, NODE), daemon=True))
        for t in threads:
            t.start()
        self.stop.wait(self.args.duration)
        self.stop.set()
        beats_stop.set()
        writer.stop()
        for t in threads:
            t.join(timeout=30)
        self.server.faults.clear()
        if not self.last_edit_valid:  # end on rules plan can read as the agent does (plan has no "last good")
            self._write_rules(EDIT_A, valid=True)
            self.valid_edits += 1
        self.tracker.changed()
        settle = time.monotonic() + 30
        while self.tracker.behind_since is not None and time.monotonic() < settle:
            self.tracker.observe()
            time.sleep(0.05)
        self._check_ledger()
        final = self.final_vs_plan()
        alive = self.proc.poll() is None
        code, took = stop_agent(self.proc) if alive else (self.proc.returncode, 0.0)
        return self.report(final, alive, code, took)

    def final_vs_plan(self) -> list[str]:
        """The Node against the real ``plan`` command fed the Node itself (foreign labels)."""
        node = self.server.node(NODE)
        node_file = self.tmp / "node.json"
        node_file.write_text(json.dumps(node))
        out = subprocess.run([sys.executable, "-m", "agent", "plan", f"--host-root={self.host.root}",
                              f"--rules={self.rules}", f"--node-labels={node_file}", "--format=json"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            return [f"plan failed: {out.stderr.strip()[:300]}"]
        plan = json.loads(out.stdout)
        labels = node["metadata"].get("labels") or {}
        capacity = node["status"].get("capacity") or {}
        taints = {(t["key"], t.get("effect")): t.get("value", "") for t in node["spec"].get("taints") or []}
        diff = [f"label {k}={labels.get(k)!r}, plan {v!r}" for k, v in plan["labels"].items() if labels.get(k) != v]
        diff += [f"resource {k}={capacity.get(k)!r}, plan {v}" for k, v in plan.get("extended_resources", {}).items()
                 if str(capacity.get(k)) != str(v)]
        diff += [f"taint {t}" for t in plan.get("taints", [])
                 if taints.get((t["key"], t["effect"])) != t.get("value", "")]
        return diff + differences(node, self.tracker.expected)

    def report(self, final: list[str], alive: bool, code: int, took: float) -> dict:
        blind = sorted(self.tracker.blind, key=lambda b: -b[1])
        outages = [(f["began"], f["ended"]) for f in self.faults if f["fault"] == "10 s outage"]
        # the part of a blind period the API server was entirely down cannot be the agent's fault
        beyond_outage = sorted((length - sum(max(0.0, min(start + length, e) - max(start, b)) for b, e in outages)
                                for start, length in blind), reverse=True)
        convergence = []
        for f in self.faults:
            after = self.tracker.converged_after(f["ended"])
            convergence.append({"fault": f["fault"], "seconds": None if after is None else round(after, 2)})
        warm = [s for s in self.samples if s[0] >= max(self.args.warmup, 0.1 * self.args.duration)]
        slope = _slope([(s[0] / 3600, s[1]) for s in warm]) if len(warm) >= 3 else None
        log = self.log_path.read_text(errors="replace")
        return {
            "duration_s": self.args.duration, "hotplugs": self.hotplugs,
            "rules_edits": {"valid": self.valid_edits, "invalid": self.invalid_edits,
                            "RulesInvalid_events": sum(rules_invalid_parts(e) for e in self.server.events()),
                            "RulesInvalid_posts": self.requests["RulesInvalid"]},
            "faults": len(self.faults),
            "blind_longest_s": round(blind[0][1], 2) if blind else 0.0,
            "blind_top": [round(b[1], 2) for b in blind[:5]],
            "blind_top_during": [sorted({f["fault"] for f in self.faults if f["began"] < start + length
                                         and f["ended"] + 5 > start}) for start, length in blind[:5]],
            "blind_longest_beyond_outage_s": round(beyond_outage[0], 2) if beyond_outage else 0.0,
            "blind_p50_s": round(statistics.median(b[1] for b in blind), 3) if blind else 0.0,
            "convergence_after_fault_s": {
                "max": max((c["seconds"] for c in convergence if c["seconds"] is not None), default=None),
                "never": sum(c["seconds"] is None for c in convergence),
                "per_fault_max": {name: max((c["seconds"] for c in convergence if c["fault"] == name
                                             and c["seconds"] is not None), default=None) for name, _ in FAULTS}},
            "requests": dict(self.requests),
            "writes_per_hotplug": round((self.requests["PATCH ok"] + self.requests["POST ok"]) / max(1, self.hotplugs), 2),
            "ledger": {"agent_writes_checked": self.ledger_writes, "violations": self.violations[:20]},
            "rss_mib": {"first": round(self.samples[0][1], 1) if self.samples else None,
                        "last": round(self.samples[-1][1], 1) if self.samples else None,
                        "slope_mib_per_hour_after_warmup": None if slope is None else round(slope, 2)},
            "fds": [min(s[2] for s in self.samples), max(s[2] for s in self.samples)] if self.samples else None,
            "threads": [min(s[3] for s in self.samples), max(s[3] for s in self.samples)] if self.samples else None,
            "half_written_longest_s": round(max((h[1] for h in self.tracker.half), default=0.0), 2),
            "half_written_periods_seen": len(self.tracker.half),
            "final_equals_plan": not final, "final_differences": final[:20],
            "tracebacks": log.count("Traceback"), "agent_alive_at_end": alive,
            "sigterm": {"exit_code": code, "seconds": round(took, 2)},
        }


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of y over x."""
    mx = statistics.fmean(p[0] for p in points)
    my = statistics.fmean(p[1] for p in points)
    den = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / den if den else 0.0


def failures(result: dict) -> list[str]:
    """Correctness, never timing: what ``--check`` fails on."""
    out = []
    if result["ledger"]["violations"]:
        out.append(f"ledger violations: {result['ledger']['violations'][:3]}")
    if not result["final_equals_plan"]:
        out.append(f"final Node differs from plan: {result['final_differences'][:3]}")
    if result["tracebacks"]:
        out.append(f"{result['tracebacks']} traceback(s) in the agent log")
    if not result["agent_alive_at_end"] or result["sigterm"]["exit_code"] != 0:
        out.append(f"agent not alive or unclean exit: {result['sigterm']}")
    if result["rules_edits"]["RulesInvalid_events"] < result["rules_edits"]["invalid"]:
        out.append("an invalid rules edit got no RulesInvalid Event")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=900.0, help="seconds of chaos")
    parser.add_argument("--fault-every", type=float, default=30.0, help="seconds between API faults (jittered ±20 %%)")
    parser.add_argument("--rules-every", type=float, default=60.0, help="seconds between rules edits")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS/FD/thread samples")
    parser.add_argument("--warmup", type=float, default=300.0, help="seconds excluded from the RSS slope")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only-faults", action="append", default=[], metavar="TEXT",
                        help="only the faults whose name contains TEXT (repeatable), to study one")
    parser.add_argument("--check", action="store_true", help="exit 1 on a correctness failure (for CI)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (agent log) for a post-mortem")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="nfa-soak-"))
    try:
        with FakeApiServer(bookmark_interval=60.0) as server:
            seed_node(server)
            result = Soak(args, tmp, server).run()
    finally:
        if args.keep:
            print(f"kept {tmp} (agent log: {tmp / 'agent.log'})")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    problems = failures(result)
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems and args.check else 0


def _print(r: dict) -> None:
    c = r["convergence_after_fault_s"]
    print(f"soak {r['duration_s']:.0f} s: {r['hotplugs']} hotplugs, {r['faults']} API faults, rules edits "
          f"{r['rules_edits']['valid']} valid / {r['rules_edits']['invalid']} invalid "
          f"({r['rules_edits']['RulesInvalid_events']} RulesInvalid Events)")
    print(f"  longest blind period {r['blind_longest_s']} s (target <= 10; top {r['blind_top']}; p50 {r['blind_p50_s']} s); "
          f"not counting time the API server was down entirely: {r['blind_longest_beyond_outage_s']} s")
    print(f"    faults during (or < 5 s before) the longest ones: {r['blind_top_during']}")
    print(f"  convergence after a fault ends: max {c['max']} s (target <= 5), never {c['never']}")
    for name, worst in c["per_fault_max"].items():
        print(f"    {name:28s} {worst}")
    print(f"  half-written (Edge TPU label without its resource or the reverse), sampled every 50 ms: "
          f"{r['half_written_periods_seen']} period(s) seen, longest {r['half_written_longest_s']} s "
          f"(target: one retry, <= 5 s)")
    print(f"  requests {r['requests']}; writes per hotplug (PATCH + Event POST accepted) {r['writes_per_hotplug']}")
    print(f"  ledger: {r['ledger']['agent_writes_checked']} agent writes checked, "
          f"{len(r['ledger']['violations'])} violation(s)")
    print(f"  RSS {r['rss_mib']['first']} -> {r['rss_mib']['last']} MiB, slope after warm-up "
          f"{r['rss_mib']['slope_mib_per_hour_after_warmup']} MiB/h (target <= 1); FDs {r['fds']}; threads {r['threads']}")
    print(f"  final Node equals plan: {r['final_equals_plan']} {r['final_differences'] or ''}")
    print(f"  tracebacks {r['tracebacks']}; SIGTERM exit {r['sigterm']['exit_code']} after {r['sigterm']['seconds']} s")


if __name__ == "__main__":
    raise SystemExit(main())
