"""The placement controller's Prometheus metrics, in a registry of its own.

``nfa_placement_gated_pods``                 pods carrying our gate (gauge)
``nfa_placement_no_common_arch_pods``        gated pods whose images share no platform (gauge)
``nfa_placement_gate_seconds``               pod creation to gate removal (histogram)
``nfa_placement_pods_total{outcome}``        resolved, respected, conflict, no_common_arch,
                                             inspection_failed, fallback, timed_out,
                                             skipped (left the selection while gated)
``nfa_placement_registry_requests_total{host,code}``  every registry request the resolver made
``nfa_placement_cache_lookups_total{cache,result}``   tag/platforms cache hits and misses
``nfa_placement_cache_hit_ratio``            hits / lookups over both caches since start
``nfa_placement_leader``                     1 on the replica holding the Lease
``nfa_placement_watch_ignored_total{reason}``  gated-pod watch items ignored (undecodable,
                                             wrong-kind, no-uid)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

OUTCOMES = ("resolved", "respected", "conflict", "no_common_arch", "inspection_failed", "fallback", "timed_out",
            "skipped")


class _ResolverCollector(Collector):
    """Reads the resolver's counters at scrape time (they live in the resolver)."""

    def __init__(self, snapshot: Callable[[], Any]) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Any]:
        snap = self.snapshot()
        requests = CounterMetricFamily("nfa_placement_registry_requests", "Registry requests by host and HTTP status",
                                       labels=["host", "code"])
        for (host, code), count in sorted(snap.requests.items(), key=str):
            requests.add_metric([str(host), str(code)], count)
        yield requests
        lookups = CounterMetricFamily("nfa_placement_cache_lookups", "Resolver cache lookups", labels=["cache", "result"])
        hits = total = 0
        for (cache, result), count in sorted(snap.cache.items()):
            lookups.add_metric([cache, result], count)
            total += count
            hits += count if result == "hit" else 0
        yield lookups
        ratio = GaugeMetricFamily("nfa_placement_cache_hit_ratio", "Resolver cache hits / lookups since start")
        ratio.add_metric([], hits / total if total else 0.0)
        yield ratio


class PlacementMetrics:
    def __init__(self, resolver_counters: Callable[[], Any] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.gated = Gauge("nfa_placement_gated_pods", "Pods carrying the architecture scheduling gate", registry=r)
        self.no_common = Gauge("nfa_placement_no_common_arch_pods",
                               "Gated pods whose images share no platform (kept gated until the deadline)", registry=r)
        self.gate_seconds = Histogram("nfa_placement_gate_seconds", "Seconds from pod creation to gate removal",
                                      registry=r, buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200))
        self.pods = Counter("nfa_placement_pods_total", "Gated pods handled, by outcome", ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.pods.labels(outcome)
        self.leader = Gauge("nfa_placement_leader", "1 on the replica holding the leader Lease", registry=r)
        self.watch_ignored = Counter("nfa_placement_watch_ignored_total",
                                     "Gated-pod watch items ignored: undecodable, wrong-kind, no-uid", ["reason"],
                                     registry=r)
        if resolver_counters is not None:
            r.register(_ResolverCollector(resolver_counters))

    def watch_item_ignored(self, _watch: str, reason: str) -> None:
        self.watch_ignored.labels(reason).inc()

    def render(self) -> bytes:
        return bytes(generate_latest(self.registry))
