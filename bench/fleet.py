#!/usr/bin/env python3
"""API load of a fleet of agents on one in-repo API server: steady state, rolling restart,
hotplug storm; compared with NFD's documented model.

    .venv/bin/python bench/fleet.py                      # 100, 1000, 5000 nodes
    .venv/bin/python bench/fleet.py --nodes 100 --quick

What is simulated, and how (printed with the results, so the figures are never quoted alone):

* one ``FakeApiServer`` (real HTTP) holding N Nodes registered as kubelet does;
* each node is assigned one of the 10 recorded hosts (fixtures/sysfs/<case>, rotating).
  Discovery runs ONCE per case (read-only fixture trees, shared) and the catalogue is loaded
  once; every node of a case plans from that result. Per-node discovery is CPU on the node,
  not API load, so sharing it changes no request count;
* the full-N phases run the agent's real reconcile logic (``Reconciler`` on a
  ``RecordingNodeApi`` over the light client the ``run`` command uses, real HTTP) from a pool
  of threads, NOT N agent processes: this 2-core machine cannot hold N real agents with N
  open watch streams. Where the real agent would use the Node its watch delivered, the pool
  passes the Node the server last returned to that agent (what the watch would hold);
* the per-node idle and restart behaviour is measured on a SAMPLE of real run-loop objects
  (``agent.runtime.agent.Agent``: node watch, resync timer, worker; device events off) with
  timers compressed (resync 1 s, watch renewal 2 s), and extrapolated to the DaemonSet's
  defaults (resync 600 s +/-10 %, watch renewal 900 s) as cost-per-cycle x cycles-per-hour.

Phases: (0) first rollout, every node labelled; (a) steady state; (b) rolling restart of all
agents against already-labelled nodes; (c) hotplug storm, 10 % of nodes change hardware at
once (they switch to the next recorded host in the rotation).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kubernetes.client import ApiClient  # noqa: E402

from agent import rules  # noqa: E402
from agent.discovery import DiscoveryConfig, discover  # noqa: E402
from agent.hostfs import HostFS  # noqa: E402
from agent.reconcile import BackoffSettings, NodeApi, Reconciler  # noqa: E402
from agent.runtime.agent import Agent, Settings  # noqa: E402
from agent.runtime.light_core import LightCoreV1Api  # noqa: E402
from agent.runtime.recording_api import RecordingNodeApi  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402

FIXTURES = REPO / "fixtures" / "sysfs"
LABELS = REPO / "labels"
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())
DEFAULT_RESYNC, DEFAULT_WATCH = 600.0, 900.0
NFD_SLEEP, NFD_MASTER_RESYNC = 60.0, 3600.0


def node_name(i: int) -> str:
    return f"node-{i:05d}"


class Plans:
    """Discovery once per recorded host, catalogue once; plan functions per case."""

    def __init__(self) -> None:
        started = time.perf_counter()
        self.catalogue = rules.load_catalogue([str(LABELS)])
        self.found = {case: discover(HostFS(str(FIXTURES / case)), DiscoveryConfig(node_name="fleet"))
                      for case in CASES}
        self.seconds = time.perf_counter() - started
        self._fns = {case: self._make(case) for case in CASES}

    def _make(self, case: str):
        found, catalogue = self.found[case], self.catalogue

        def plan(node_labels):
            return rules.plan_node(found.features, found.labels, node_labels, catalogue, None, found.label_origins)

        return plan

    def __getitem__(self, case: str):
        return self._fns[case]


class Fleet:
    """N nodes' agent state (reconciler, api, case, last Node seen) on one shared client."""

    def __init__(self, server: FakeApiServer, n: int, plans: Plans, workers: int) -> None:
        self.server, self.n, self.plans, self.workers = server, n, plans, workers
        self.client = LightCoreV1Api(ApiClient(server.client_configuration()))
        self.client.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] = workers
        self.case = {node_name(i): CASES[i % len(CASES)] for i in range(n)}
        self.api: dict[str, RecordingNodeApi] = {}
        self.rec: dict[str, Reconciler] = {}
        self.seen: dict[str, dict] = {}
        for name in self.case:
            self.fresh_agent(name)

    def fresh_agent(self, name: str) -> None:
        """A new agent process for this node: no memory of earlier writes."""
        api = RecordingNodeApi(self.client, request_timeout=(5.0, 30.0))
        self.api[name] = api
        self.rec[name] = Reconciler(api, name, emit_events=False, backoff=BackoffSettings(initial=0.05, maximum=1.0))

    def run(self, names, job) -> list:
        with cf.ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(job, names))

    def reconcile(self, name: str, use_seen: bool) -> int:
        outcome = self.rec[name].reconcile(self.plans[self.case[name]], live_node=self.seen.get(name) if use_seen else None)
        if outcome.error:
            raise RuntimeError(f"{name}: {outcome.error}")
        if self.api[name].last_node is not None:
            self.seen[name] = self.api[name].last_node
        return outcome.writes

    def startup(self, name: str) -> int:
        """What a (re)started agent sends: the node watch's LIST, then its first reconcile on the
        listed Node (the real agent uses it when the LIST landed first, else it GETs)."""
        self.fresh_agent(name)
        body = self.client.list_node(field_selector=f"metadata.name={name}", _preload_content=False,
                                     _request_timeout=(5.0, 30.0))
        import json

        items = json.loads(body.data).get("items") or []
        self.seen[name] = items[0]
        return self.reconcile(name, use_seen=True)


def count(requests, since: float = 0.0) -> collections.Counter:
    c: collections.Counter = collections.Counter()
    for r in requests:
        if r.at < since:
            continue
        if r.method == "GET" and r.query.get("watch") in ("true", "1"):
            c["WATCH"] += 1
        elif r.method == "GET" and r.path == "/api/v1/nodes":
            c["LIST"] += 1
        elif r.method == "GET":
            c["GET"] += 1
        else:
            c[r.method] += 1
        if r.method in ("PATCH", "PUT") and 200 <= r.status < 300:
            c["writes"] += 1
    return c


def sample_agents(server: FakeApiServer, fleet: Fleet, k: int, window: float) -> dict:
    """Real run-loop objects for k labelled nodes, timers compressed; per-cycle costs."""
    names = list(fleet.case)[:k]
    settings = lambda name: Settings(  # noqa: E731
        node_name=name, rules_dirs=[str(LABELS)], host_root=str(FIXTURES / fleet.case[name]), udev_mode="off",
        metrics_port=None, watch_rules=False, resync_interval=1.0, resync_jitter=0.1, watch_timeout=2,
        emit_events=False, backoff=BackoffSettings(initial=0.05, maximum=1.0))
    # (b) restart sample: start each agent on its labelled node, wait for its first pass
    server.clear_requests()
    agents = []
    for name in names:
        agent = Agent(settings(name), NodeApi(LightCoreV1Api(ApiClient(server.client_configuration()))))
        agent.settings.resync_interval = 3600.0  # no resync inside the startup measurement
        agents.append(agent.start())
    for agent in agents:
        if not agent.ready.wait(60):
            raise RuntimeError("a sample agent did not become ready")
    time.sleep(0.5)  # the watch established after the first pass
    restart = count(server.requests)
    for agent in agents:
        agent.stop(timeout=5)
    # (a) idle sample: fresh agents, compressed resync and watch renewal, kubelet heartbeats
    agents = [Agent(settings(name), NodeApi(LightCoreV1Api(ApiClient(server.client_configuration()))))
              for name in names]
    for agent in agents:
        agent.start()
    for agent in agents:
        agent.ready.wait(60)
    time.sleep(1.0)
    passes0 = sum(a.passes for a in agents)
    watches0 = sum(a.node_watcher.watches for a in agents)
    since = time.monotonic()
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(0.5):
            for name in names:
                server.edit_node(name, lambda n: n["status"]["conditions"][0].update(
                    lastHeartbeatTime=time.strftime("%Y-%m-%dT%H:%M:%SZ")) and None)

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    time.sleep(window)
    idle = count(server.requests, since)
    resyncs = sum(a.passes for a in agents) - passes0
    renewals = sum(a.node_watcher.watches for a in agents) - watches0
    stop.set()
    beat.join(5)
    for agent in agents:
        agent.stop(timeout=5)
    non_watch = sum(v for kk, v in idle.items() if kk not in ("WATCH", "writes"))
    per_resync = non_watch / resyncs if resyncs else float("nan")
    # a renewal is one WATCH request; measured as WATCH requests per node-second over the
    # window at a 2 s watch length, scaled to the default 900 s length
    watch_per_node_s = idle["WATCH"] / (k * window)
    per_renewal = watch_per_node_s * 2.0
    per_hour = 3600 * watch_per_node_s * 2.0 / DEFAULT_WATCH + 3600 / DEFAULT_RESYNC * per_resync
    return {"k": k, "restart": restart, "idle": idle, "resyncs": resyncs, "renewals": renewals,
            "per_resync": per_resync, "per_renewal": per_renewal, "per_node_hour": per_hour, "window": window}


def run_size(n: int, plans: Plans, workers: int, sample: int, window: float) -> dict:
    out: dict = {"n": n}
    with FakeApiServer(bookmark_interval=0.5, watch_timeout=30) as server:
        for i in range(n):
            server.add_node(node_name(i))
        fleet = Fleet(server, n, plans, workers)
        names = list(fleet.case)
        # (0) first rollout
        server.clear_requests()
        t = time.monotonic()
        writes = fleet.run(names, lambda name: fleet.reconcile(name, use_seen=False))
        out["rollout"] = (count(server.requests), time.monotonic() - t, sum(writes))
        # (a)+(b) per-node behaviour of the real loop, on a sample
        out["sample"] = sample_agents(server, fleet, min(sample, n), window)
        # (b) rolling restart of all N: fresh agents, startup LIST + reconcile on labelled nodes
        server.clear_requests()
        t = time.monotonic()
        writes = fleet.run(names, fleet.startup)
        out["restart"] = (count(server.requests), time.monotonic() - t, sum(writes))
        # (c) hotplug storm: 10 % of nodes switch to the next recorded host, all at once
        changed = names[:: 10]
        for name in changed:
            fleet.case[name] = CASES[(CASES.index(fleet.case[name]) + 1) % len(CASES)]
        server.clear_requests()
        t = time.monotonic()
        writes = fleet.run(changed, lambda name: fleet.reconcile(name, use_seen=True))
        out["storm"] = (count(server.requests), time.monotonic() - t, sum(writes), len(changed),
                        collections.Counter(writes))
        # after the storm: one more pass everywhere must write nothing (converged, no echo loop)
        server.clear_requests()
        writes = fleet.run(names, lambda name: fleet.reconcile(name, use_seen=True))
        out["after_storm"] = (count(server.requests), sum(writes))
    return out


def fmt_counts(c: collections.Counter) -> str:
    keys = ("LIST", "WATCH", "GET", "PATCH", "POST")
    return ", ".join(f"{k} {c[k]}" for k in keys if c[k]) or "none"


def report(results: list[dict], plans: Plans, workers: int) -> None:
    s0 = results[0]["sample"]
    print(" ".join(__doc__.splitlines()[:2]))
    print(f"\nDiscovery: once per recorded host ({len(CASES)} cases, {plans.seconds * 1000:.0f} ms in all, catalogue"
          f" included), shared by every node of that case. Full-N phases: the real Reconciler logic from a pool of "
          f"{workers} threads over real HTTP, not N processes. Idle/restart behaviour: {s0['k']} real Agent run loops,"
          f" timers compressed, extrapolated to resync {DEFAULT_RESYNC:.0f} s / watch renewal {DEFAULT_WATCH:.0f} s.\n")
    s = s0
    print(f"Sample of {s['k']} real agents, idle {s['window']:.0f} s with kubelet heartbeats every 0.5 s: "
          f"{s['resyncs']} resync passes, {s['renewals']} watch renewals; requests {fmt_counts(s['idle'])}, "
          f"writes {s['idle']['writes']}.")
    print(f"  cost per resync: {s['per_resync']:.2f} requests; per watch renewal: {s['per_renewal']:.2f}; "
          f"=> {s['per_node_hour']:.2f} requests per node per idle hour at defaults "
          f"({s['per_node_hour'] / 12:.2f} per 5 min).")
    r = s["restart"]
    print(f"  restart of {s['k']} real agents on labelled nodes: {fmt_counts(r)}, writes {r['writes']} "
          f"({(r['LIST'] + r['GET'] + r['WATCH']) / s['k']:.2f} requests per agent).\n")
    print("| nodes | phase | requests (cluster) | writes | per node | wall time | target |")
    print("|---|---|---|---|---|---|---|")
    for res in results:
        n = res["n"]
        c, secs, w = res["rollout"]
        print(f"| {n} | first rollout | {fmt_counts(c)} | {w} | {sum(v for k, v in c.items() if k != 'writes') / n:.2f} req "
              f"| {secs:.1f} s | |")
        per_hour = res["sample"]["per_node_hour"]
        print(f"| {n} | steady (extrapolated) | {n * per_hour / 3600:.3f} req/s | 0 | {per_hour / 12:.2f} req / 5 min "
              f"| | ≤ 1 req / 5 min / node, 0 writes: {'met' if per_hour / 12 <= 1 and res['sample']['idle']['writes'] == 0 else 'NOT met'} |")
        c, secs, w = res["restart"]
        total = sum(v for k, v in c.items() if k != "writes")
        watch = res["sample"]["restart"]["WATCH"] / res["sample"]["k"]
        print(f"| {n} | rolling restart (all) | {fmt_counts(c)} (+{watch:.0f} WATCH/agent) | {w} | "
              f"{total / n + watch:.2f} req | {secs:.1f} s | 0 writes: {'met' if w == 0 else 'NOT met'} |")
        c, secs, w, changed, hist = res["storm"]
        dist = ", ".join(f"{k} write(s): {v}" for k, v in sorted(hist.items()))
        print(f"| {n} | hotplug storm ({changed} nodes) | {fmt_counts(c)} | {w} | {w / changed:.2f} writes/changed "
              f"({dist}) | {secs:.1f} s | 1-2 per changed node |")
        c, w = res["after_storm"]
        print(f"| {n} | pass after storm (all) | {fmt_counts(c)} | {w} | | | 0 writes |")
    print("\nNFD's documented model (shared/reference/nfd.md section 6): \"Each worker sends one GET per interval "
          "(about N/60 GET/s cluster wide; issue #1891) and one Update only when something changed\"; "
          "sleepInterval \"defaults to 60s\"; nfd-master runs \"a periodic full reconcile every resyncPeriod "
          "(default 1 h)\" (GET the Node, patch) and on a restart the worker's NodeFeature changes "
          "(\"worker.pod.uid: It tells the master that a new worker finished discovery\").\n")
    print("| nodes | NFD steady | ours steady | NFD restart (all) | ours restart | NFD hotplug (per node) | ours |")
    print("|---|---|---|---|---|---|---|")
    for res in results:
        n = res["n"]
        nfd = n / NFD_SLEEP + n / NFD_MASTER_RESYNC
        ours = n * res["sample"]["per_node_hour"] / 3600
        c, _secs, w = res["restart"]
        watch = res["sample"]["restart"]["WATCH"] / res["sample"]["k"]
        total = sum(v for k, v in c.items() if k != "writes") + watch * n
        cs, _s, ws, changed, _h = res["storm"]
        print(f"| {n} | {nfd:.2f} req/s ({n / NFD_SLEEP * 300 / n:.0f} GET / 5 min / node) | {ours:.3f} req/s | "
              f"{2 * n} reads + {n} writes (NodeFeature CR, not Node) | {total:.0f} reads + {w} writes | "
              f"1 NF update + 1 GET + 1-2 patches, after ≤ 60 s | {ws / changed:.2f} writes, "
              f"{sum(v for k, v in cs.items() if k not in ('writes', 'PATCH')) / changed:.2f} reads |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000", help="comma-separated fleet sizes")
    parser.add_argument("--quick", action="store_true", help="100 nodes, small sample, short idle window")
    parser.add_argument("--workers", type=int, default=8, help="threads running agents' reconcile logic")
    parser.add_argument("--sample", type=int, default=20, help="real run-loop agents for the idle/restart sample")
    parser.add_argument("--window", type=float, default=8.0, help="idle window for the sample, seconds")
    args = parser.parse_args()
    sizes = [100] if args.quick else [int(x) for x in args.nodes.split(",") if x.strip()]
    sample, window = (min(args.sample, 10), min(args.window, 5.0)) if args.quick else (args.sample, args.window)
    import logging

    logging.basicConfig(level=logging.ERROR)
    plans = Plans()
    results = []
    for n in sizes:
        started = time.monotonic()
        results.append(run_size(n, plans, args.workers, sample, window))
        print(f"[{n} nodes done in {time.monotonic() - started:.0f} s]", file=sys.stderr, flush=True)
    report(results, plans, args.workers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
