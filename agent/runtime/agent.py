"""The agent: event sources -> one coalescing queue -> one worker that discovers and reconciles.

Threads (all daemon, all stopped by ``stop``): the worker (owns HostFS, discovery and
the Reconciler: neither is shared; catalogue reloads are locked), the hotplug monitor or
poller, the rules watcher, the Node watch, the HTTP server. Event threads only ``put``.

One pass (``_process``), each step a method:

1. skip our own echo: a Node-only batch carrying a version we wrote (``RecordingNodeApi``);
2. reload: the watcher threads judge each rules or ``--config`` edit when seen (last good
   kept) and queue a ``rules`` trigger for an accepted one; a ``resync`` reloads too;
3. rediscover the sources the batch names (hotplug -> the mapped ones; startup, resync ->
   all), keep the rest cached;
4. reconcile with the ``DesiredFromDiscovery`` of this discovery and catalogue, on the Node the watch
   last delivered when it is provably newer than our own last write, else on a fresh GET; on
   an error the pass ends and a retry is scheduled after the Reconciler's ``retry_after``
   (backoff, Retry-After); any event before then starts a fresh pass at once;
5. publish devices to the device plugins (``--device-plugin=on``) or the node's ResourceSlices
   and the kubelet DRA plugin (``--dra``, ``agent.runtime.dra_service``, ``agent.dra.plugin``);
6. report: the pass's one Event, metrics, a log line; readiness and the pod guard.

Resync: every ``resync_interval`` seconds +/- ``resync_jitter`` (a DaemonSet's agents spread
out), full rediscovery + reload; with a live watch it costs no API request when nothing changed.
Startup taints go after the first converged reconcile (the Reconciler does it).
Startup jitter: the first LIST (Node watch) and the first pass wait a random
``[0, startup_jitter)`` seconds, so the agents a rollout starts together do not hit the API
server in the same instant. A Node that is not registered (404) is retried as soon as the
watch sees it appear, not after the error backoff.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import threading
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from agent.config import claim_policy
from agent.discovery import DiscoveryConfig
from agent.hostfs import HostFS
from agent.reconcile import NodeApi, ReconcileOutcome, Reconciler
from agent.reconcile.events import REASON_READ_FAILED
from agent.rules.model import Catalogue
from agent.runtime import queue as q
from agent.runtime.api_metrics import instrument
from agent.runtime.cluster_objects import ClusterObjects
from agent.runtime.config_state import WorkerConfigState
from agent.runtime.desired_state import DesiredFromDiscovery
from agent.runtime.device_events import DeviceEvents
from agent.runtime.device_service import DeviceService
from agent.runtime.discovery_cache import DiscoveryCache
from agent.runtime.dra_service import DraPluginService, DraService
from agent.runtime.event_sources import EventSource
from agent.runtime.health import HealthServer
from agent.runtime.hotplug import HotplugMonitor, Poller
from agent.runtime.metrics import AgentMetrics
from agent.runtime.node_watch import NodeWatcher
from agent.runtime.parts import Part, Parts
from agent.runtime.pod_guard import PodGuard
from agent.runtime.recording_api import RecordingNodeApi
from agent.runtime.rules_state import RulesState
from agent.runtime.rules_watch import RulesWatcher
from agent.runtime.settings import Settings
from agent.runtime.subsystems import ends_burst, sources_for
from agent.runtime.uevent import UEvent

__all__ = ["Agent", "Settings", "Stopping"]

if TYPE_CHECKING:
    from agent.dra.plugin import KubeletPlugin

log = logging.getLogger(__name__)

REASON_RULES_INVALID = "RulesInvalid"
REASON_CONFIG_INVALID = "ConfigInvalid"
REASON_SOURCE_DEGRADED = "DiscoverySourceFailed"
REASON_CLUSTER_BOUNDED = "ClusterObjectsBounded"
REASON_DRA_FAILED = "ResourceSlicesNotWritten"
REASON_DRA_BOUNDED = "DraPluginReadBounded"


class Stopping(Exception):
    """Raised from the Reconciler's sleep when the agent is shutting down."""


class Agent:
    def __init__(self, settings: Settings, api: NodeApi, *, metrics: AgentMetrics | None = None,
                 event_source: EventSource | None = None, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or AgentMetrics()
        self.api = api if isinstance(api, RecordingNodeApi) else RecordingNodeApi.wrap(api)
        instrument(self.api.core.api_client, self.metrics.api_request)
        self._rng = rng or random.Random()
        self.queue = q.TriggerQueue(debounce=settings.debounce, debounce_max=max(settings.debounce, settings.debounce_max))
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self._busy_since: float | None = None
        self._worker = threading.Thread(target=self._work, name="reconcile-worker", daemon=True)
        self.rules = RulesState(settings.rules_dirs, settings.rule_options, on_rejected=self._rules_rejected)
        self.cluster = ClusterObjects(settings.node_name, self._cluster_rules_changed,
                                      on_problem=self._cluster_problem, options=settings.rule_options,
                                      taints=settings.enable_taints, on_bounded=self._cluster_bounded) \
            if settings.rules_from_cluster else None
        self._cluster_held: str | None = None
        self.reconciler = Reconciler(self.api, settings.node_name, emit_events=settings.emit_events,
                                     startup_taints=settings.startup_taints, sleep=self._sleep,
                                     max_attempts=max(1, settings.retries), backoff=settings.backoff,
                                     contests=settings.contest,
                                     claims=claim_policy(settings.rule_options, self.catalogue,
                                                         settings.startup_taints))
        self.discovery = DiscoveryCache(HostFS(settings.host_root),
                                        settings.discovery_config or DiscoveryConfig(node_name=settings.node_name),
                                        settings.sources, observe=self._observe_discovery,
                                        on_degraded=self._source_degraded, on_undetermined=self._feature_undetermined)
        self.devices: DeviceService | None = None
        self.dra: DraService | None = None
        self.dra_plugin: KubeletPlugin | None = None
        self.dra_plugin_service: DraPluginService | None = None
        if settings.dra:  # DRA serves every declared resource: no device plugin beside it
            from agent.dra.claims import ApiClaims  # grpcio and the generated stubs only in this mode
            from agent.dra.plugin import KubeletPlugin

            self.dra = DraService(self.api.core.api_client, settings.host_root, settings.node_name, settings.dra,
                                  taints=settings.dra_device_taints, metrics=self.metrics,
                                  on_problem=lambda text: self._warn_in_next_pass(REASON_DRA_FAILED, text),
                                  warn=self._device_nodes_undetermined, on_warning=self._warn_in_next_pass)
            self.dra_plugin = KubeletPlugin(
                settings.node_name, ApiClaims(self.api.core, settings.dra),
                plugin_dir=settings.dra_plugin_dir, registry_dir=settings.dra_registry_dir, cdi_dir=settings.cdi_dir,
                observe=self.metrics.dra_plugin,
                warn=lambda text: self._warn_in_next_pass(REASON_DRA_BOUNDED, text))
            self.dra.consumers.append(self.dra_plugin.publish)
            self.dra_plugin_service = DraPluginService(self.dra_plugin)
        elif settings.device_plugin:
            self.devices = DeviceService(settings.host_root, settings.device_plugin_dir, self.metrics, settings.node_name,
                                         warn=self._device_nodes_undetermined)
        self.pod_guard = PodGuard(self.api, settings.node_name, evict=settings.evict_orphans) if settings.pod_guard else None
        self.device_events = DeviceEvents(settings.udev_mode, settings.host_root, settings.poll_interval,
                                          settings.sources, settings.node_name, self.metrics, self._hotplug,
                                          event_source)
        self.rules_watcher: RulesWatcher | None = None
        self.config_watcher: RulesWatcher | None = None
        self.worker_config = self._worker_config_state()
        self._config_generation = 0
        self.node_watcher: NodeWatcher | None = None
        self.http: HealthServer | None = None
        self.parts = Parts()
        self.passes = 0
        self.last_outcome: ReconcileOutcome | None = None
        self._derivation_key: tuple[object, ...] | None = None
        self._derivation: DesiredFromDiscovery | None = None
        self._desired_labels: frozenset[str] = frozenset()
        self._next_resync = 0.0
        self._retry_at: float | None = None
        self._rules_generation = self._rule_generations()
        self._node_missing = False
        self._node_deliveries = 0

    @property
    def monitor(self) -> HotplugMonitor | None:
        return self.device_events.monitor

    @property
    def poller(self) -> Poller | None:
        return self.device_events.poller

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> Agent:
        s = self.settings
        if s.metrics_port is not None:
            self.http = HealthServer(s.metrics_port, self.metrics.render, self.healthy, self.is_ready,
                                     host=s.metrics_host)
            self.parts.start(Part("metrics server", self.http.start, self.http.alive, self.http.stop, after_worker=True))
        self.parts.start(Part("device events", self.device_events.start, lambda: not self.device_events.dead(),
                              self.device_events.stop))
        if self.devices is not None:
            self.parts.start(Part("device plugin", self.devices.start, self.devices.alive, self.devices.stop,
                                  after_worker=True))
        if self.dra is not None:
            self.parts.start(Part("DRA slices", self.dra.start, self.dra.alive, self.dra.stop, after_worker=True))
        if self.dra_plugin_service is not None:
            service = self.dra_plugin_service
            self.parts.start(Part("DRA kubelet plugin", service.start, service.alive, service.stop, after_worker=True))
        if s.watch_rules:
            self.rules_watcher = RulesWatcher(s.rules_dirs, self._rules_edited)
            self.parts.start(Part("rules watcher", self.rules_watcher.start, self.rules_watcher.alive,
                                  self.rules_watcher.stop))
            if self.worker_config is not None:
                self.config_watcher = RulesWatcher([os.path.dirname(os.path.abspath(s.config_path))],
                                                   self._config_edited, recursive=False,
                                                   what="the config file's directory",
                                                   fallback="config edits are picked up at the next resync")
                self.parts.start(Part("config watcher", self.config_watcher.start, self.config_watcher.alive,
                                      self.config_watcher.stop))
        delay = self._rng.random() * s.startup_jitter if s.startup_jitter > 0 else 0.0
        if self.cluster is not None:
            cluster = self.cluster
            self.parts.start(Part("NFD object watch", lambda: cluster.start(
                self.api.core, timeout_seconds=s.watch_timeout, read_timeout=s.watch_read_timeout,
                on_ignored=self.metrics.watch_item_ignored), cluster.alive, cluster.stop))
        if s.watch_node:
            self.node_watcher = NodeWatcher(self.api.core, s.node_name, self._node_changed,
                                            timeout_seconds=s.watch_timeout, read_timeout=s.watch_read_timeout,
                                            backoff=s.backoff, initial_delay=delay,
                                            on_ignored=self.metrics.watch_item_ignored)
            self.parts.start(Part("node watch", self.node_watcher.start, self.node_watcher.alive,
                                  self.node_watcher.stop))
        self.queue.put(q.STARTUP, sources=None, delay=delay)
        self._worker.start()
        log.info("agent started for node %s (udev mode %s, resync %.0fs, first pass in %.2fs)", s.node_name,
                 s.udev_mode, s.resync_interval, delay, extra={"node": s.node_name, "event": "started"})
        return self

    def stop(self, timeout: float = 4.0) -> bool:
        """Stop everything; True if the worker finished (False: an in-flight call was abandoned)."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self.queue.stop()
        self.parts.stop(deadline, after_worker=False, cap=1.0)
        finished = True
        if self._worker.is_alive():
            self._worker.join(max(0.1, deadline - time.monotonic()))
            finished = not self._worker.is_alive()
            if not finished:
                log.warning("an API call was still in flight at shutdown; abandoned (labels stay as they are)",
                            extra={"node": self.settings.node_name, "event": "stopped"})
        self.parts.stop(deadline, after_worker=True, cap=0.5)
        log.info("agent stopped", extra={"node": self.settings.node_name, "event": "stopped"})
        return finished

    def resync(self) -> None:
        """A full pass now, as the periodic resync: rules and ``--config`` re-read, every source
        rediscovered, the Node reconciled (``run``'s SIGHUP)."""
        self.queue.put(q.RESYNC, sources=None)

    def _sleep(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise Stopping()

    # -- health ---------------------------------------------------------------------------
    def healthy(self) -> tuple[bool, str]:
        if not self._worker.is_alive():
            return False, "reconcile worker is not running"
        busy = self._busy_since
        if busy is not None and time.monotonic() - busy > self.settings.stuck_after:
            return False, f"one reconcile pass has been running for {time.monotonic() - busy:.0f}s"
        dead = self.device_events.dead() or self.parts.dead()
        if dead and not self._stopping.is_set():
            return False, f"{dead} thread died"
        return True, "ok"

    def is_ready(self) -> tuple[bool, str]:
        degraded = dict(self.discovery.degraded)
        if degraded:
            return False, "SourceDegraded: " + "; ".join(f"{n}: {why}" for n, why in sorted(degraded.items()))
        if self.device_events.degraded:
            return False, self.device_events.degraded
        partial = self.reconciler.partial
        if partial:
            return False, "PartiallyApplied: the Node got only part of a pass's writes; still missing: " + "; ".join(partial)
        if self.ready.is_set():
            return True, "ok"
        return False, "first reconcile of this node has not succeeded yet"

    def _source_degraded(self, source: str, why: str | None) -> None:
        """A source failed as a whole (``why``) or recovered (None): metric and a Warning Event."""
        self.metrics.source_degraded.labels(source=source).set(1 if why else 0)
        if why:
            self.reconciler.events.record(self.reconciler.node_uid, REASON_SOURCE_DEGRADED,
                                          f"discovery source {source} failed as a whole ({why}); its previous "
                                          "features are kept and nothing it contributed is removed", warning=True)

    # -- event inputs (other threads) -----------------------------------------------------

    def _device_nodes_undetermined(self, text: str) -> None:
        """A /dev read (device plugin or DRA) stopped at a bound or failed: a Warning Event (the pass's)."""
        self.reconciler.events.record(self.reconciler.node_uid, REASON_READ_FAILED, text, warning=True)

    def _feature_undetermined(self, feature: str, why: str | None) -> None:
        """A feature could not be read (``why``) or reads again (None): metric and a Warning Event."""
        self.metrics.feature_undetermined.labels(feature=feature).set(1 if why else 0)
        if why:
            self.reconciler.events.record(self.reconciler.node_uid, REASON_READ_FAILED,
                                          f"{feature} could not be determined ({why}); what it decides (labels, "
                                          "extended resources, device plugin devices) is held at its last value "
                                          "until it reads again", warning=True)
    def _hotplug(self, event: UEvent) -> None:
        self.metrics.hotplug(event.subsystem, event.action)
        sources = sources_for(event.subsystem, self.settings.sources)
        log.debug("device event %s %s %s", event.action, event.subsystem, event.devpath,
                  extra={"node": self.settings.node_name, "event": "hotplug"})
        self.device_events.silent.event(sources)
        if sources:
            self.queue.put(q.HOTPLUG, sources=sources, settled=ends_burst(event.subsystem, event.action, event.properties))

    def _node_changed(self, node: dict[str, Any]) -> None:
        # after a 404 the pending retry waits out the backoff; the node appearing ends the wait
        self._node_deliveries += 1
        self.queue.put(q.NODE, sources=(), node=node, expedite=self._node_missing)

    def _observe_discovery(self, source: str, seconds: float) -> None:
        self.metrics.discovery_duration.labels(source).observe(seconds)

    def _cluster_rules_changed(self) -> None:
        self.queue.put(q.RULES)

    def _rules_edited(self) -> None:
        """Judge each edit when it is seen, in the watcher thread: a busy or backing-off
        worker would see only the last of several quick edits, and an invalid one in between
        would get no log line, Event or metric. Only an accepted edit queues a pass."""
        if self.rules.reload().changed:
            self.metrics.rules_reloads.labels("accepted").inc()
            self.queue.put(q.RULES)

    def _worker_config_state(self) -> WorkerConfigState | None:
        if not self.settings.config_path:
            return None
        return WorkerConfigState(self.settings.config_path, self.settings.node_name,
                                 on_rejected=self._config_rejected, initial=self.settings.worker_config)

    def _config_edited(self) -> None:
        """As ``_rules_edited``, for the --config file: an accepted edit queues a full
        rediscovery, which the worker runs with the new configuration (``_apply_config``)."""
        if self.worker_config is not None and self.worker_config.reload():
            self.queue.put(q.RULES, sources=None)

    def _config_rejected(self, text: str) -> None:
        self._warn_in_next_pass(REASON_CONFIG_INVALID, text)

    def _warn_in_next_pass(self, reason: str, text: str) -> None:
        """A Warning judged in a watcher thread goes into a pass's one Event (events.py): held
        for the next pass, which a ``rules`` trigger starts when none is due (it changes
        nothing else: unchanged rules end the pass before discovery)."""
        uid = self.last_outcome.node_uid if self.last_outcome else ""
        if self.reconciler.events.hold_for_next_pass(uid, reason, text, warning=True):
            self.queue.put(q.RULES)

    def _apply_config(self) -> bool:
        """In the worker: hand discovery the configuration in use if it changed (True)."""
        state = self.worker_config
        if state is None or state.generation == self._config_generation:
            return False
        self._config_generation = state.generation
        self.discovery.config = state.current.discovery
        if not self.settings.sources_from_flag:
            self.discovery.sources = tuple(sorted(state.current.feature_sources))
            self.settings.sources = tuple(state.current.feature_sources)
        return True

    def catalogue(self) -> Catalogue:
        """The rule files' catalogue, with the cluster's NodeFeatureRule objects when read."""
        files = self.rules.catalogue
        return files if self.cluster is None else self.cluster.catalogue(files)

    def _rule_generations(self) -> tuple[int, int]:
        return self.rules.generation, self.cluster.generation if self.cluster is not None else 0

    def _cluster_bounded(self, bound: str, why: str | None) -> None:
        """A bound on the cluster's objects passed (``why``) or fits again: metric, one Warning Event."""
        self.metrics.cluster_bounded.labels(bound=bound).set(1 if why else 0)
        if why:
            self._warn_in_next_pass(REASON_CLUSTER_BOUNDED, f"{why}; what the cluster's objects gave this node "
                                    "is held (deploy/metrics.md \"Bounds on cluster objects\")")

    def _cluster_undetermined(self) -> bool:
        """Whether the cluster's output is undetermined now; said in the log when that changes."""
        assert self.cluster is not None
        why = self.cluster.undetermined()
        self.metrics.cluster_undetermined.set(1 if why else 0)
        if why != self._cluster_held:
            if why:
                log.info("cluster objects undetermined (%s): every item the agent owns on the Node is held",
                            why, extra={"node": self.settings.node_name, "event": "cluster-held"})
            elif self._cluster_held:
                log.info("cluster objects read: nothing held for them any more",
                         extra={"node": self.settings.node_name, "event": "cluster-held"})
            self._cluster_held = why
        return why is not None

    def _cluster_problem(self, text: str) -> None:
        """A NodeFeatureRule/NodeFeature object with problems: a Warning, not a refused reload."""
        self._warn_in_next_pass(REASON_RULES_INVALID, text)

    def _rules_rejected(self, text: str) -> None:
        self.metrics.rules_reloads.labels("rejected").inc()
        self._warn_in_next_pass(REASON_RULES_INVALID, text)

    # -- the worker -----------------------------------------------------------------------
    def _schedule_retry(self, delay: float) -> None:
        """The failed pass has ended; try again after ``delay`` unless an event comes first.
        The retry is kept out of the queue on purpose: a retry's delay in the pending batch
        would hold back a hotplug, rule edit or Node change arriving meanwhile, and those
        must start a fresh pass from the current host state at once."""
        self._retry_at = time.monotonic() + max(0.0, delay)

    def _jittered(self) -> float:
        s = self.settings
        return s.resync_interval * (1 + s.resync_jitter * (2 * self._rng.random() - 1))

    def _work(self) -> None:
        self._next_resync = time.monotonic() + self._jittered()
        while True:
            self._busy_since = None
            wake = self._next_resync if self._retry_at is None else min(self._next_resync, self._retry_at)
            batch = self.queue.get(timeout=max(0.0, wake - time.monotonic()))
            if self.queue.stopped:
                return
            if batch is None:
                if self._retry_at is not None and self._retry_at <= time.monotonic():
                    self._retry_at = None
                    self.queue.put(q.RETRY)
                    continue
                self.queue.put(q.RESYNC, sources=None)
                self._next_resync = time.monotonic() + self._jittered()
                continue
            self._busy_since = time.monotonic()
            try:
                # one Event per pass (events.aggregate); the cluster watches' work waits for the pass
                with self.reconciler.events.deferred(), self.cluster.gate if self.cluster else nullcontext():
                    self._process(batch)
            except Stopping:
                return
            except Exception:  # a bug in one pass must not end the loop
                log.exception("reconcile pass failed", extra={"node": self.settings.node_name, "event": "error"})
                self.metrics.reconciled("error")
                self._schedule_retry(self.reconciler.backoff.next_delay())
            if q.RESYNC in batch.kinds:
                self._next_resync = time.monotonic() + self._jittered()

    def _desired_function(self) -> DesiredFromDiscovery:
        """The desired-state function for this pass, rebuilt only when discovery, rules or the set
        of undetermined features changed (the Reconciler recomputes for a new one)."""
        assert self.discovery.current is not None
        unanswered = self.discovery.unanswered_labels()
        key = (self.discovery.generation, self._rule_generations(), tuple(unanswered.items()))
        if self._derivation is None or key != self._derivation_key:
            desired = DesiredFromDiscovery.build(self.discovery.current, self.catalogue(), self.settings.rule_options,
                                                unanswered, handing_over=self.devices is not None or self.dra is not None)
            if self.cluster is not None:  # this node's NodeFeature objects, as nfd-master merges them
                features, labels, origins = self.cluster.join(desired.features, desired.raw_labels,
                                                                 desired.label_origins)
                held = self._cluster_undetermined()
                desired = dataclasses.replace(desired, features=features, raw_labels=labels, label_origins=origins,
                                              hold_everything=held)
            self._derivation = desired
            self._derivation_key = key
        return self._derivation

    def _live_node(self) -> dict[str, Any] | None:
        """The watched Node when it is at least as new as our last write, else None (GET)."""
        if self.node_watcher is None:
            return None
        return self.node_watcher.node_after(self.api.last_own_version(), self.settings.fresh_node_age)

    def _process(self, batch: q.Batch) -> None:
        """One pass: skip our own echo, reload, rediscover, reconcile, publish devices, report."""
        started = time.perf_counter()
        if self._own_echo(batch):
            return
        rules_changed = self._reload(batch)
        if batch.kinds == {q.RULES} and not rules_changed:
            return  # nothing to redo; a Warning held for this pass still goes out (``_work``)
        rerun = self._rediscover(batch)
        desired = self._desired_function()
        outcome = self._reconcile(desired)
        self._publish_devices(outcome, desired)
        self._report(batch, outcome, rerun, started)
        self._follow_up(outcome, rerun, rules_changed)

    def _own_echo(self, batch: q.Batch) -> bool:
        """A Node-only batch carrying a version we wrote: the Reconciler already saw that state."""
        if batch.kinds != {q.NODE}:
            return False
        node = batch.node or {}
        return self.api.is_own_version(str((node.get("metadata") or {}).get("resourceVersion") or ""))

    def _reload(self, batch: q.Batch) -> bool:
        """Whether the catalogue or the ``--config`` in force changed since the last pass. A
        resync also reloads both, for an edit their watchers missed."""
        if q.RESYNC in batch.kinds:
            if self.rules.reload().changed:
                self.metrics.rules_reloads.labels("accepted").inc()
            if self.worker_config is not None:
                self.worker_config.reload()
        config_changed = self._apply_config()
        rules_changed = self._rule_generations() != self._rules_generation or config_changed
        self._rules_generation = self._rule_generations()
        return rules_changed

    def _rediscover(self, batch: q.Batch) -> tuple[str, ...]:
        """Rerun the sources the batch names (None: all); returns those rerun. A resync that
        finds devices changed with no device event means the monitor is silent: poll too."""
        if batch.sources is not None and not batch.sources:
            return ()
        mark, current = self.device_events.silent.mark(), self.discovery.current
        before = current.results if current is not None else None
        rerun = self.discovery.refresh(batch.sources)
        events = self.device_events
        if events.monitor is not None and rerun and self.discovery.current is not None:
            resync_only = q.RESYNC in batch.kinds and q.HOTPLUG not in batch.kinds
            silent = events.silent.judge(mark, resync_only, rerun, before, self.discovery.current.results)
            if silent and events.poller is None:
                events.events_silent(silent)
        return rerun

    def _reconcile(self, desired: DesiredFromDiscovery) -> ReconcileOutcome:
        """Take the Node to ``desired``; on an error schedule the retry (at once when the Node
        registered while this pass got its 404: that event came before ``_node_missing``)."""
        deliveries = self._node_deliveries
        # this pass starts from the current state and schedules its own retry; a batch that
        # ended before reconciling (our own echo, an unchanged rules file) keeps the pending one
        self._retry_at = None
        outcome = self.reconciler.reconcile(desired, live_node=self._live_node())
        self._node_missing = outcome.node_missing
        self.metrics.partially_applied.set(1 if outcome.partial else 0)
        if outcome.error and outcome.node_missing and self._node_deliveries != deliveries:
            self.queue.put(q.RETRY)
        elif outcome.error:
            self._schedule_retry(outcome.retry_after if outcome.retry_after is not None else 1.0)
        elif outcome.rewrite_in is not None:  # a key another writer changed back: its rewrite waits
            self._schedule_retry(outcome.rewrite_in)
        return outcome

    def _publish_devices(self, outcome: ReconcileOutcome, desired: DesiredFromDiscovery) -> None:
        """The device plugins get this pass's devices whatever the API server said."""
        if self.devices is not None:
            self.devices.publish(outcome.desired if outcome.desired is not None else desired({}), self.api.last_node)
        if self.dra is not None:
            self.dra.publish(outcome.desired if outcome.desired is not None else desired({}), self._freshest_node())

    def _freshest_node(self) -> dict[str, Any] | None:
        """The newer of the Node we last read or wrote and the one the watch last delivered (a
        pass on the watched Node makes no request)."""
        watched = self.node_watcher.latest if self.node_watcher is not None else None
        found = [n for n in (self.api.last_node, watched) if n is not None]

        def version(node: dict[str, Any]) -> int:
            text = str((node.get("metadata") or {}).get("resourceVersion") or "0")
            return int(text) if text.isdigit() else 0

        return max(found, key=version) if found else None

    def _report(self, batch: q.Batch, outcome: ReconcileOutcome, rerun: tuple[str, ...], started: float) -> None:
        """The pass's one Event, its metrics and its log line."""
        self.reconciler.events.release()  # discovery's Warnings included
        desired = outcome.desired if outcome.ok else None
        result = pass_result(outcome)
        self.metrics.reconciled(result, owned_labels=len(desired.labels) if desired else None,
                                owned_resources=len(desired.extended_resources) if desired else None)
        self.metrics.contested_keys.set(self.reconciler.contested)
        partly = rerun and len(rerun) < len(self.discovery.sources)
        log.info("reconcile (%s%s): %s, %d write(s) in %.0f ms", ",".join(sorted(batch.kinds)),
                 f"; rediscovered {','.join(rerun)}" if partly else "",
                 result, outcome.writes, (time.perf_counter() - started) * 1000,
                 extra={"node": self.settings.node_name, "event": "reconcile",
                        "change": "; ".join(outcome.applied)[:500] if outcome.applied else ""})

    def _follow_up(self, outcome: ReconcileOutcome, rerun: tuple[str, ...], rules_changed: bool) -> None:
        """Readiness after the first success; the pod guard for labels the hardware took away.
        ``passes`` and ``last_outcome`` change last, so whoever reads them sees the whole pass."""
        if outcome.ok:
            if not self.ready.is_set():
                self.ready.set()
                log.info("node %s labelled: ready", self.settings.node_name,
                         extra={"node": self.settings.node_name, "event": "ready"})
            labels_now = frozenset(outcome.desired.labels) if outcome.desired else frozenset()
            removed = self._desired_labels - labels_now
            self._desired_labels = labels_now
            if self.pod_guard is not None and removed and rerun and not rules_changed:
                node = self.api.last_node or {}
                self.pod_guard.check(removed, (node.get("metadata") or {}).get("labels") or {})
        self.passes += 1
        self.last_outcome = outcome


def pass_result(outcome: ReconcileOutcome) -> str:
    """``nfa_reconcile_total``'s ``result``: error, rejected (the server refused an item), applied, unchanged."""
    if outcome.error:
        return "error"
    if any(p.origin == "api-server" for p in outcome.problems):
        return "rejected"
    return "applied" if outcome.writes else "unchanged"
