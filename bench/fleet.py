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
import json
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
from agent.kube.light_core import LightCoreV1Api  # noqa: E402
from agent.reconcile import BackoffSettings, NodeApi, Reconciler  # noqa: E402
from agent.runtime.agent import Agent, Settings  # noqa: E402
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

        def desired_state(node_labels):
            return rules.desired_state(found.features, found.labels, node_labels, catalogue, None, found.label_origins)

        return desired_state

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
        self.rec[name] = Reconciler(api, name, emit_events=True, backoff=BackoffSettings(initial=0.05, maximum=1.0))

    def run(self, names, job) -> list:
        with cf.ThreadPoolExecutor(self.workers) as pool:
            return list(pool.map(job, names))

    def reconcile(self, name: str, use_seen: bool) -> int:
        # one pass, as the run loop holds it: its Events aggregated into one (events.aggregate)
        with self.rec[name].events.deferred():
            outcome = self.rec[name].reconcile(self.plans[self.case[name]],
                                               live_node=self.seen.get(name) if use_seen else None)
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
        elif r.method == "POST" and r.path.endswith("/events"):
            c["EVENT"] += 1
        else:
            c[r.method] += 1
        if r.method in ("PATCH", "PUT") and 200 <= r.status < 300:
            c["writes"] += 1
        if r.method == "POST" and r.path.endswith("/events") and 200 <= r.status < 300:
            c["event_writes"] += 1
    return c


def writes_per_node(requests) -> collections.Counter:
    """Accepted writes per node: PATCHes of the Node and Event POSTs about it."""
    out: collections.Counter = collections.Counter()
    for r in requests:
        if not 200 <= r.status < 300:
            continue
        if r.method in ("PATCH", "PUT") and r.node:
            out[r.node] += 1
        elif r.method == "POST" and r.path.endswith("/events"):
            body = r.body if isinstance(r.body, dict) else json.loads(r.body or b"{}")
            out[(body.get("involvedObject") or {}).get("name", "?")] += 1
    return out


def sample_agents(server: FakeApiServer, fleet: Fleet, k: int, window: float, *, resync: float = 1.0,
                  watch: int = 2, heartbeat_every: float = 0.5, restart_too: bool = True) -> dict:
    """Real run-loop objects (Events on) for k labelled nodes: a restart, then an idle window
    at the given timers with kubelet heartbeats; every request in the window is counted."""
    names = list(fleet.case)[:k]
    settings = lambda name: Settings(  # noqa: E731
        node_name=name, rules_dirs=[str(LABELS)], host_root=str(FIXTURES / fleet.case[name]), udev_mode="off",
        metrics_port=None, watch_rules=False, resync_interval=resync, resync_jitter=0.1, watch_timeout=watch,
        emit_events=True, backoff=BackoffSettings(initial=0.05, maximum=1.0))
    restart = collections.Counter()
    if restart_too:
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
    # (a) idle sample: fresh agents, kubelet heartbeats, everything counted over the window
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
    beats = collections.Counter()

    def heartbeat() -> None:
        while not stop.wait(heartbeat_every):
            for name in names:
                server.edit_node(name, lambda n: n["status"]["conditions"][0].update(
                    lastHeartbeatTime=time.strftime("%Y-%m-%dT%H:%M:%SZ")) and None)
                beats["sent"] += 1

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    time.sleep(window)
    idle = count(server.requests, since)
    passes = sum(a.passes for a in agents) - passes0
    renewals = sum(a.node_watcher.watches for a in agents) - watches0
    stop.set()
    beat.join(5)
    for agent in agents:
        agent.stop(timeout=5)
    requests = sum(v for kk, v in idle.items() if kk not in ("writes", "event_writes"))
    non_watch = requests - idle["WATCH"]
    out = {"k": k, "restart": restart, "idle": idle, "passes": passes, "renewals": renewals, "window": window,
           "resync_s": resync, "watch_s": watch, "heartbeats": beats["sent"], "requests": requests,
           "measured_per_node_hour": requests * 3600 / (k * window)}
    # at compressed timers: per-cycle costs, and what they add up to at the defaults (arithmetic)
    out["per_renewal"] = idle["WATCH"] / renewals if renewals else float("nan")
    out["non_watch_per_pass"] = non_watch / passes if passes else float("nan")
    # a pass is a resync or a Node change (kubelet heartbeat every 10 s at defaults)
    out["per_node_hour"] = (3600 / DEFAULT_WATCH * out["per_renewal"]
                            + (3600 / DEFAULT_RESYNC + 3600 / 10) * (out["non_watch_per_pass"] if passes else 0.0))
    return out


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
        per_node = writes_per_node(server.requests)
        out["storm"] = (count(server.requests), time.monotonic() - t, sum(writes), len(changed),
                        collections.Counter(per_node[name] for name in changed))
        # after the storm: one more pass everywhere must write nothing (converged, no echo loop)
        server.clear_requests()
        writes = fleet.run(names, lambda name: fleet.reconcile(name, use_seen=True))
        out["after_storm"] = (count(server.requests), sum(writes))
    return out


def fmt_counts(c: collections.Counter) -> str:
    keys = ("LIST", "WATCH", "GET", "PATCH", "EVENT", "POST")
    return ", ".join(f"{'POST event' if k == 'EVENT' else k} {c[k]}" for k in keys if c[k]) or "none"


def requests_of(c: collections.Counter) -> int:
    return sum(v for k, v in c.items() if k not in ("writes", "event_writes"))


def report(results: list[dict], plans: Plans, workers: int) -> None:
    print(" ".join(__doc__.splitlines()[:2]))
    print(f"\nMeasured: every full-N phase (rollout, restart, storm, pass after the storm) is run for each fleet size "
          f"with the real Reconciler logic, Events on and one Event per pass, from a pool of {workers} threads over "
          f"real HTTP (not N processes); discovery once per recorded host ({len(CASES)} cases, "
          f"{plans.seconds * 1000:.0f} ms). Steady state is measured on a sample of real Agent run loops per size "
          f"(compressed timers) and the cluster rate is that per-agent rate x N: N open watch streams do not fit this "
          f"machine. The measured idle window at default timers is bench/fleet.py --idle-defaults.\n")
    for res in results:
        s = res["sample"]
        r = s["restart"]
        print(f"{res['n']} nodes, sample of {s['k']} real agents, idle {s['window']:.0f} s (resync {s['resync_s']:.0f} s, "
              f"watch {s['watch_s']} s, heartbeats every 0.5 s: {s['heartbeats']} sent): {s['passes']} passes, "
              f"{s['renewals']} watch renewals; requests {fmt_counts(s['idle'])}; {s['idle']['writes']} PATCH, "
              f"{s['idle']['event_writes']} Event POST. Per renewal {s['per_renewal']:.2f} request(s), per pass "
              f"{s['non_watch_per_pass']:.2f} => at defaults {s['per_node_hour']:.2f} requests per node-hour "
              f"(computed from those per-cycle costs). Restart of the {s['k']}: {fmt_counts(r)}, "
              f"{r['writes']} PATCH, {r['event_writes']} Event POST.")
    print("\n| nodes | phase | requests (cluster) | Node PATCHes | Event POSTs | per node | wall time | target |")
    print("|---|---|---|---|---|---|---|---|")
    for res in results:
        n = res["n"]
        c, secs, _w = res["rollout"]
        print(f"| {n} | first rollout | {fmt_counts(c)} | {c['writes']} | {c['event_writes']} | "
              f"{requests_of(c) / n:.2f} req | {secs:.1f} s | |")
        s = res["sample"]
        per_hour = s["per_node_hour"]
        idle_writes = s["idle"]["writes"] + s["idle"]["event_writes"]
        print(f"| {n} | steady (sample rate x N) | {n * per_hour / 3600:.3f} req/s | {s['idle']['writes']} | "
              f"{s['idle']['event_writes']} | {per_hour / 12:.2f} req / 5 min | | ≤ 1 req / 5 min / node, 0 writes: "
              f"{'met' if per_hour / 12 <= 1 and idle_writes == 0 else 'NOT met'} |")
        c, secs, _w = res["restart"]
        watch = s["restart"]["WATCH"] / s["k"]
        total_w = c["writes"] + c["event_writes"]
        print(f"| {n} | rolling restart (all) | {fmt_counts(c)} (+{watch:.0f} WATCH/agent) | {c['writes']} | "
              f"{c['event_writes']} | {requests_of(c) / n + watch:.2f} req | {secs:.1f} s | 0 writes: "
              f"{'met' if total_w == 0 else 'NOT met'} |")
        c, secs, _w, changed, hist = res["storm"]
        dist = ", ".join(f"{k} write(s): {v} node(s)" for k, v in sorted(hist.items()))
        worst = max(hist) if hist else 0
        print(f"| {n} | hotplug storm ({changed} nodes) | {fmt_counts(c)} | {c['writes']} | {c['event_writes']} | "
              f"{(c['writes'] + c['event_writes']) / changed:.2f} writes/changed ({dist}) | {secs:.1f} s | "
              f"≤ 3 per changed node: {'met' if worst <= 3 else f'NOT met for {hist[worst]} node(s)'} |")
        c, _w = res["after_storm"]
        print(f"| {n} | pass after storm (all) | {fmt_counts(c)} | {c['writes']} | {c['event_writes']} | | | 0 writes |")
    print("\nNFD's documented model (worker configuration reference, core.sleepInterval; master command-line reference, -resync-period; kubernetes-sigs.github.io/node-feature-discovery): \"Each worker sends one GET per interval "
          "(about N/60 GET/s cluster wide; issue #1891) and one Update only when something changed\"; "
          "sleepInterval \"defaults to 60s\"; nfd-master runs \"a periodic full reconcile every resyncPeriod "
          "(default 1 h)\" (GET the Node, patch) and on a restart the worker's NodeFeature changes "
          "(\"worker.pod.uid: It tells the master that a new worker finished discovery\"). NFD posts no Events "
          "for label changes.\n")
    print("| nodes | NFD steady | ours steady | NFD restart (all) | ours restart | NFD hotplug (per node) | ours |")
    print("|---|---|---|---|---|---|---|")
    for res in results:
        n = res["n"]
        nfd = n / NFD_SLEEP + n / NFD_MASTER_RESYNC
        ours = n * res["sample"]["per_node_hour"] / 3600
        c, _secs, _w = res["restart"]
        watch = res["sample"]["restart"]["WATCH"] / res["sample"]["k"]
        reads = requests_of(c) - c["PATCH"] - c["EVENT"] + watch * n
        cs, _s, _ws, changed, _h = res["storm"]
        print(f"| {n} | {nfd:.2f} req/s ({n / NFD_SLEEP * 300 / n:.0f} GET / 5 min / node) | {ours:.3f} req/s | "
              f"{2 * n} reads + {n} writes (NodeFeature CR, not Node) | {reads:.0f} reads + "
              f"{c['writes'] + c['event_writes']} writes | 1 NF update + 1 GET + 1-2 patches, after ≤ 60 s | "
              f"{cs['writes'] / changed:.2f} PATCH + {cs['event_writes'] / changed:.2f} Event, "
              f"{(requests_of(cs) - cs['PATCH'] - cs['EVENT']) / changed:.2f} reads |")


def idle_defaults(window: float, k: int) -> None:
    """k real agents at the DaemonSet's timers (resync 600 s +/-10 %, watch 900 s), kubelet
    heartbeats every 10 s, for ``window`` seconds: counted, not computed."""
    plans = Plans()
    with FakeApiServer(bookmark_interval=60.0) as server:
        for i in range(k):
            server.add_node(node_name(i))
        fleet = Fleet(server, k, plans, workers=4)
        fleet.run(list(fleet.case), lambda name: fleet.reconcile(name, use_seen=False))
        s = sample_agents(server, fleet, k, window, resync=DEFAULT_RESYNC, watch=int(DEFAULT_WATCH),
                          heartbeat_every=10.0, restart_too=False)
    print(f"Idle at default timers, measured: {k} real agents (Events on) for {window:.0f} s, resync "
          f"{DEFAULT_RESYNC:.0f} s +/-10 %, watch renewal {DEFAULT_WATCH:.0f} s, kubelet heartbeat every 10 s per node "
          f"({s['heartbeats']} sent). In the window: {s['passes']} passes (resyncs and heartbeat Node changes), "
          f"{s['renewals']} watch renewals; requests {fmt_counts(s['idle'])}; {s['idle']['writes']} PATCH, "
          f"{s['idle']['event_writes']} Event POST.")
    print(f"  => {s['measured_per_node_hour']:.2f} requests per node-hour (the window's count / agents x 3600 / window) "
          f"= {s['measured_per_node_hour'] / 12:.2f} per 5 min (target ≤ 1, 0 writes)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="100,1000,5000", help="comma-separated fleet sizes")
    parser.add_argument("--quick", action="store_true", help="100 nodes, small sample, short idle window")
    parser.add_argument("--workers", type=int, default=8, help="threads running agents' reconcile logic")
    parser.add_argument("--sample", type=int, default=20, help="real run-loop agents for the idle/restart sample")
    parser.add_argument("--window", type=float, default=8.0, help="idle window for the sample, seconds")
    parser.add_argument("--idle-defaults", type=float, metavar="SECONDS",
                        help="only measure --sample real agents idle at the default timers for this long (>= 900 "
                             "holds a watch renewal and a resync)")
    args = parser.parse_args()
    if args.idle_defaults:
        import logging

        logging.basicConfig(level=logging.ERROR)
        idle_defaults(args.idle_defaults, args.sample)
        return 0
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
