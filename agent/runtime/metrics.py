"""The agent's Prometheus metrics, in a registry of its own (several agents per test process).

Names are the documented ones (deploy/metrics.md "Metrics"), plus
``nfa_rules_reload_total{result}`` (accepted / rejected rule edits).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from agent.runtime.subsystems import metric_labels

RECONCILE_RESULTS = ("applied", "unchanged", "rejected", "error")


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.discovery_duration = Histogram(
            "nfa_discovery_duration_seconds", "Time each discovery source took per pass", ["source"], registry=r,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0))
        self.reconcile_total = Counter("nfa_reconcile_total", "Reconcile passes by outcome", ["result"], registry=r)
        self.api_requests = Counter("nfa_api_requests_total", "Kubernetes API calls by verb and HTTP status",
                                    ["verb", "code"], registry=r)
        self.owned_labels = Gauge("nfa_owned_labels", "Labels this agent currently owns on its Node", registry=r)
        self.owned_resources = Gauge("nfa_owned_extended_resources",
                                     "Extended resources this agent currently owns", registry=r)
        self.hotplug_events = Counter("nfa_hotplug_events_total", "Device events received",
                                      ["subsystem", "action"], registry=r)
        self.last_success = Gauge("nfa_last_success_timestamp_seconds", "Unix time of the last successful reconcile",
                                  registry=r)
        self.udev_fallback = Gauge("nfa_udev_fallback_active",
                                   "1 while the configured event monitoring failed and the agent uses a fallback (kernel uevents or polling)", registry=r)
        self.source_degraded = Gauge("nfa_source_degraded",
                                     "1 while a discovery source fails as a whole and its previous features are kept",
                                     ["source"], registry=r)
        self.feature_undetermined = Gauge(
            "nfa_feature_undetermined",
            "1 while a read of a discovery feature fails and what it decides is held at its last value",
            ["feature"], registry=r)
        self.cluster_bounded = Gauge(
            "nfa_cluster_objects_bounded",
            "1 while a bound on NFD's objects in the cluster is passed (bound: NodeFeatureRule, NodeFeature: "
            "objects or bytes; budget: all rule objects together) and what they gave is held",
            ["bound"], registry=r)
        self.cluster_undetermined = Gauge(
            "nfa_cluster_objects_undetermined",
            "1 while the output of NFD's objects in the cluster cannot be told and every owned item is held",
            registry=r)
        self.partially_applied = Gauge(
            "nfa_node_partially_applied",
            "1 while the agent's Node carries only part of the last pass's writes (e.g. a label without its extended resource)",
            registry=r)
        self.contested_keys = Gauge(
            "nfa_contested_keys",
            "Keys the agent owns that another writer changed back after each of its writes, left as that writer set them",
            registry=r)
        self.rules_reloads = Counter("nfa_rules_reload_total", "Rule catalogue reloads by result", ["result"],
                                     registry=r)
        self.device_plugin_registrations = Counter(
            "nfa_device_plugin_registrations_total",
            "Registrations of a device plugin resource with kubelet, by result (registered, failed)",
            ["resource", "result"], registry=r)
        self.device_plugin_allocations = Counter(
            "nfa_device_plugin_allocations_total",
            "Allocate calls from kubelet, by result (allocated, refused: unknown or unhealthy device)",
            ["resource", "result"], registry=r)
        self.device_plugin_devices = Gauge(
            "nfa_device_plugin_devices", "Devices a device plugin resource advertises to kubelet, by health",
            ["resource", "health"], registry=r)
        self.dra_slice_writes = Counter(
            "nfa_dra_slice_writes_total", "ResourceSlice writes in DRA mode, by operation (create, update, delete)",
            ["op"], registry=r)
        self.dra_syncs = Counter(
            "nfa_dra_syncs_total", "ResourceSlice syncs in DRA mode, by result (unchanged, written, held: the "
            "slices could not be read, error: a write failed, conflict: a write met a newer version, "
            "contested: a repair not written while another writer fights, bounded: past the slice watch's bounds)", ["result"], registry=r)
        self.dra_slices_contested = Gauge(
            "nfa_dra_slices_contested",
            "1 while another writer keeps changing this node's ResourceSlices back and the agent holds its repairs",
            registry=r)
        self.dra_slices_bounded = Gauge(
            "nfa_dra_slices_bounded",
            "1 while the ResourceSlices naming this node and the driver are past the slice watch's bounds "
            "(slices, bytes, one slice's size) and the agent neither writes nor deletes them", registry=r)
        self.dra_attributes_dropped = Counter(
            "nfa_dra_attributes_dropped_total",
            "Device attributes left out of a ResourceSlice, once per device change, by reason (too-long: a value "
            "past 64 bytes; bound: past 32 attributes + capacities; invalid-name)", ["reason"], registry=r)
        self.dra_plugin_registrations = Counter(
            "nfa_dra_plugin_registrations_total",
            "Registrations of the kubelet DRA plugin, by result (registered, failed: kubelet refused it)",
            ["result"], registry=r)
        self.dra_plugin_claims = Counter(
            "nfa_dra_plugin_claims_total",
            "Claims kubelet asked the DRA plugin to prepare or unprepare, by operation and result "
            "(prepared, unprepared, error)", ["operation", "result"], registry=r)
        self.dra_plugin_bounded = Counter(
            "nfa_dra_plugin_bounded_total",
            "Reads of the kubelet DRA plugin stopped at a bound, by bound (claim: a ResourceClaim answer "
            "past 2 MiB; checkpoint: a checkpoint past 16 MiB)", ["bound"], registry=r)
        self.device_plugin_undetermined = Gauge(
            "nfa_device_plugin_undetermined",
            "1 while a device plugin resource's /dev patterns could not be read whole (a pattern past its "
            "match bound, a failed read) and the devices not read are held",
            ["resource"], registry=r)
        self.watch_ignored = Counter(
            "nfa_watch_ignored_total",
            "Watch and LIST items ignored: undecodable, wrong-kind (not the watched kind), no-uid",
            ["watch", "reason"], registry=r)
        for result in RECONCILE_RESULTS:
            self.reconcile_total.labels(result)

    def api_request(self, verb: str, code: str) -> None:
        self.api_requests.labels(verb, code).inc()

    def watch_item_ignored(self, watch: str, reason: str) -> None:
        self.watch_ignored.labels(watch, reason).inc()

    def hotplug(self, subsystem: str, action: str) -> None:
        self.hotplug_events.labels(*metric_labels(subsystem, action)).inc()

    def reconciled(self, result: str, *, owned_labels: int | None = None, owned_resources: int | None = None) -> None:
        self.reconcile_total.labels(result).inc()
        if result in ("applied", "unchanged", "rejected"):
            self.last_success.set(time.time())
        if owned_labels is not None:
            self.owned_labels.set(owned_labels)
        if owned_resources is not None:
            self.owned_resources.set(owned_resources)

    def device_plugin_registration(self, resource: str, result: str) -> None:
        self.device_plugin_registrations.labels(resource, result).inc()

    def device_plugin_allocation(self, resource: str, result: str) -> None:
        self.device_plugin_allocations.labels(resource, result).inc()

    def device_plugin_advertised(self, resource: str, healthy: int, unhealthy: int) -> None:
        self.device_plugin_devices.labels(resource, "Healthy").set(healthy)
        self.device_plugin_devices.labels(resource, "Unhealthy").set(unhealthy)

    def dra_slice_write(self, op: str) -> None:
        self.dra_slice_writes.labels(op).inc()

    def dra_sync(self, result: str) -> None:
        self.dra_syncs.labels(result).inc()

    def dra_dropped(self, lost: Mapping[str, str]) -> None:
        for why in lost.values():
            self.dra_attributes_dropped.labels(why).inc()

    def dra_plugin(self, operation: str, result: str) -> None:
        """The kubelet DRA plugin's ``observe``: ``registration``, ``prepare``, ``unprepare`` or
        ``bounded`` (the result names the bound)."""
        if operation == "registration":
            self.dra_plugin_registrations.labels(result).inc()
        elif operation == "bounded":
            self.dra_plugin_bounded.labels(result).inc()
        else:
            self.dra_plugin_claims.labels(operation, result).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
