"""The agent: event sources -> one coalescing queue -> one worker that discovers and reconciles.

Threads (all daemon, all stopped by ``stop``): the worker (owns HostFS, discovery and
the Reconciler: neither is shared; catalogue reloads are locked), the hotplug monitor or
poller, the rules watcher, the Node watch, the HTTP server. Event threads only ``put``.

One pass (``_process``):

1. rules: the watcher thread judges each edit when seen (last good kept) and queues a
   ``rules`` trigger for an accepted one; a ``resync`` reloads too;
2. discovery: rerun the sources the batch names (hotplug -> the mapped ones; startup,
   resync -> all), keep the rest cached;
3. reconcile with ``plan_fn(node_labels) = rules.plan_node(features, labels, node_labels,
   catalogue)``, on the Node the watch last delivered when it is provably newer than our own
   last write, else on a fresh GET;
4. on error, end the pass and schedule a retry after the Reconciler's ``retry_after``
   (backoff, Retry-After); any event before then starts a fresh pass at once.

Node-only batches that are echoes of our own writes are dropped (``RecordingNodeApi``).
Resync: every ``resync_interval`` seconds +/- ``resync_jitter`` (a DaemonSet's agents spread
out), full rediscovery + reload; with a live watch it costs no API request when nothing changed.
Startup taints go after the first converged reconcile (the Reconciler does it).
Startup jitter: the first LIST (Node watch) and the first pass wait a random
``[0, startup_jitter)`` seconds, so the agents a rollout starts together do not hit the API
server in the same instant. A Node that is not registered (404) is retried as soon as the
watch sees it appear, not after the error backoff.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from agent.config import claim_policy
from agent.desired import Taint
from agent.discovery import DiscoveryConfig
from agent.hostfs import HostFS
from agent.reconcile import BackoffSettings, NodeApi, Reconciler
from agent.runtime import queue as q
from agent.runtime.api_metrics import instrument
from agent.runtime.discovery_cache import DiscoveryCache
from agent.runtime.event_sources import EventSource, EventSourceError, open_source, parse_mode
from agent.runtime.health import HealthServer
from agent.runtime.hotplug import HotplugMonitor, Poller
from agent.runtime.metrics import AgentMetrics
from agent.runtime.node_watch import DEFAULT_READ_TIMEOUT, DEFAULT_WATCH_TIMEOUT, NodeWatcher
from agent.runtime.pod_guard import PodGuard
from agent.runtime.recording_api import RecordingNodeApi
from agent.runtime.rules_state import RulesState
from agent.runtime.rules_watch import RulesWatcher
from agent.runtime.silent_monitor import SilentMonitorCheck
from agent.runtime.subsystems import ends_burst, sources_for
from agent.runtime.uevent import UEvent
from agent.sources import SOURCE_NAMES

log = logging.getLogger(__name__)

REASON_RULES_INVALID = "RulesInvalid"
REASON_CONFIG_INVALID = "ConfigInvalid"
REASON_SOURCE_DEGRADED = "DiscoverySourceFailed"


@dataclass
class Settings:
    node_name: str
    rules_dirs: Sequence[str]
    host_root: str = "/"
    sources: Sequence[str] = SOURCE_NAMES
    discovery_config: DiscoveryConfig | None = None
    config_path: str = ""  # --config: reloaded on edits (runtime.config_state)
    sources_from_flag: bool = False  # --sources given: the file's core.featureSources never applies
    rule_options: Any = None
    resync_interval: float = 600.0
    resync_jitter: float = 0.1
    startup_jitter: float = 0.0
    debounce: float = 0.04  # quiet gap that ends a burst of device events (queue.py)
    debounce_max: float = 0.25
    udev_mode: str = "kernel"
    poll_interval: float = 5.0
    startup_taints: Sequence[Taint] = ()
    pod_guard: bool = False
    evict_orphans: bool = False
    metrics_port: int | None = 8080  # None: no HTTP server
    metrics_host: str = ""
    watch_node: bool = True
    watch_rules: bool = True
    watch_timeout: int = DEFAULT_WATCH_TIMEOUT
    watch_read_timeout: float = DEFAULT_READ_TIMEOUT
    fresh_node_age: float = 150.0
    stuck_after: float = 300.0
    emit_events: bool = True
    retries: int = 1  # tries per request inside a pass; 1: a failure ends the pass, the retry is scheduled
    device_plugin: bool = False  # serve the catalogue's declared devices to kubelet (agent.runtime.device_service)
    device_plugin_dir: str = "/var/lib/kubelet/device-plugins"
    backoff: BackoffSettings = field(default_factory=BackoffSettings)


class Stopping(Exception):
    """Raised from the Reconciler's sleep when the agent is shutting down."""


class Agent:
    def __init__(self, settings: Settings, api: NodeApi, *, metrics: AgentMetrics | None = None,
                 event_source: EventSource | None = None, rng: random.Random | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or AgentMetrics()
        self.hotplug_degraded = ""  # why device events come from a fallback (not ready while set)
        self.api = api if isinstance(api, RecordingNodeApi) else RecordingNodeApi.wrap(api)
        instrument(self.api.core.api_client, self.metrics.api_request)
        self._event_source = event_source
        self._rng = rng or random.Random()
        self.queue = q.TriggerQueue(debounce=settings.debounce, debounce_max=max(settings.debounce, settings.debounce_max))
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self._busy_since: float | None = None
        self._worker = threading.Thread(target=self._work, name="reconcile-worker", daemon=True)
        self.reconciler = Reconciler(self.api, settings.node_name, emit_events=settings.emit_events,
                                     startup_taints=settings.startup_taints, sleep=self._sleep,
                                     max_attempts=max(1, settings.retries), backoff=settings.backoff,
                                     claims=claim_policy(settings.rule_options, lambda: self.rules.catalogue,
                                                         settings.startup_taints))
        self.rules = RulesState(settings.rules_dirs, settings.rule_options, on_rejected=self._rules_rejected)
        self.discovery = DiscoveryCache(HostFS(settings.host_root),
                                        settings.discovery_config or DiscoveryConfig(node_name=settings.node_name),
                                        settings.sources, observe=self._observe_discovery,
                                        on_degraded=self._source_degraded)
        self.devices = None
        if settings.device_plugin:
            from agent.runtime.device_service import DeviceService

            self.devices = DeviceService(settings.host_root, settings.device_plugin_dir, self.metrics, settings.node_name)
        self.pod_guard = PodGuard(self.api, settings.node_name, evict=settings.evict_orphans) if settings.pod_guard else None
        self.monitor: HotplugMonitor | None = None
        self.poller: Poller | None = None
        self.rules_watcher: RulesWatcher | None = None
        self.config_watcher: RulesWatcher | None = None
        self.worker_config = self._worker_config_state()
        self._config_generation = 0
        self.node_watcher: NodeWatcher | None = None
        self.http: HealthServer | None = None
        self.passes = 0
        self.last_outcome = None
        self._plan_key: tuple | None = None
        self._plan = None
        self._desired_labels: frozenset[str] = frozenset()
        self._next_resync = 0.0
        self._retry_at: float | None = None
        self._rules_generation = self.rules.generation
        self._node_missing = False
        self._node_deliveries = 0
        self._silent = SilentMonitorCheck()

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> "Agent":
        s = self.settings
        if s.metrics_port is not None:
            self.http = HealthServer(s.metrics_port, self.metrics.render, self.healthy, self.is_ready,
                                     host=s.metrics_host).start()
        self._start_hotplug()
        if self.devices is not None:
            self.devices.start()
        if s.watch_rules:
            self.rules_watcher = RulesWatcher(s.rules_dirs, self._rules_edited).start()
            if self.worker_config is not None:
                self.config_watcher = RulesWatcher([os.path.dirname(os.path.abspath(s.config_path))],
                                                   self._config_edited, recursive=False).start()
        delay = self._rng.random() * s.startup_jitter if s.startup_jitter > 0 else 0.0
        if s.watch_node:
            self.node_watcher = NodeWatcher(self.api.core, s.node_name, self._node_changed,
                                            timeout_seconds=s.watch_timeout, read_timeout=s.watch_read_timeout,
                                            backoff=s.backoff, initial_delay=delay).start()
        self.queue.put(q.STARTUP, sources=None, delay=delay)
        self._worker.start()
        log.info("agent started for node %s (udev mode %s, resync %.0fs, first pass in %.2fs)", s.node_name,
                 s.udev_mode, s.resync_interval, delay, extra={"node": s.node_name, "event": "started"})
        return self

    def _start_hotplug(self) -> None:
        mode, _path = parse_mode(self.settings.udev_mode)
        source = self._event_source
        if source is None and mode not in ("poll", "off"):
            try:
                source = open_source(self.settings.udev_mode, self._monitored())
            except EventSourceError as err:
                source = self._fallback_source(mode, err)
                mode = "kernel" if source is not None else "poll"
        if source is not None:
            self.monitor = HotplugMonitor(source, self._hotplug).start()
        elif mode == "poll":
            self.poller = Poller(HostFS(self.settings.host_root), self._hotplug, self.settings.poll_interval).start()

    def _fallback_source(self, mode: str, err: EventSourceError) -> EventSource | None:
        """No silent loss of device events: udev mode without udevd's socket falls back to kernel
        uevents (they reach a pod's own network namespace), anything else to polling; either way
        a log line, ``nfa_udev_fallback_active`` and a not-ready reason say so."""
        source = None
        if mode == "udev":
            try:
                source = open_source("kernel", self._monitored())
            except EventSourceError as kernel_err:
                err = EventSourceError(f"{err}; kernel uevents: {kernel_err}")
        instead = ("kernel uevents instead" if source is not None else
                   f"polling PCI/USB/net/block/device-tree listings every {self.settings.poll_interval:.0f}s instead")
        log.warning("cannot receive device events (%s); %s", err, instead,
                    extra={"node": self.settings.node_name, "event": "udev-fallback"})
        self.metrics.udev_fallback.set(1)
        self.hotplug_degraded = f"HotplugFallback: --udev-mode={mode} unusable ({err}); using {instead}"
        return source

    def _events_silent(self, sources: list[str]) -> None:
        """The monitor opened but delivers nothing (``silent_monitor``): poll as well, and say so."""
        why = (f"a resync found {'/'.join(s.upper() for s in sources)} devices changed that no device event "
               f"announced (--udev-mode={self.settings.udev_mode} delivers nothing in this pod)")
        log.warning("%s; polling every %.0fs as well", why, self.settings.poll_interval,
                    extra={"node": self.settings.node_name, "event": "udev-fallback"})
        self.metrics.udev_fallback.set(1)
        self.hotplug_degraded = f"HotplugSilent: {why}; polling every {self.settings.poll_interval:.0f}s as well"
        self.poller = Poller(HostFS(self.settings.host_root), self._hotplug, self.settings.poll_interval).start()

    def _monitored(self) -> list[str]:
        from agent.runtime.subsystems import SUBSYSTEM_SOURCES

        return sorted(k for k, v in SUBSYSTEM_SOURCES.items() if set(v) & set(self.settings.sources))

    def stop(self, timeout: float = 4.0) -> bool:
        """Stop everything; True if the worker finished (False: an in-flight call was abandoned)."""
        deadline = time.monotonic() + timeout
        self._stopping.set()
        self.queue.stop()
        for part in (self.monitor, self.poller, self.rules_watcher, self.config_watcher, self.node_watcher):
            if part is not None:
                part.stop(timeout=max(0.1, min(1.0, deadline - time.monotonic())))
        finished = True
        if self._worker.is_alive():
            self._worker.join(max(0.1, deadline - time.monotonic()))
            finished = not self._worker.is_alive()
            if not finished:
                log.warning("an API call was still in flight at shutdown; abandoned (labels stay as they are)",
                            extra={"node": self.settings.node_name, "event": "stopped"})
        if self.devices is not None:
            self.devices.stop(timeout=max(0.1, min(0.5, deadline - time.monotonic())))
        if self.http is not None:
            self.http.stop(timeout=0.5)
        log.info("agent stopped", extra={"node": self.settings.node_name, "event": "stopped"})
        return finished

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
        for name, part in (("hotplug monitor", self.monitor), ("poller", self.poller),
                           ("node watch", self.node_watcher), ("rules watcher", self.rules_watcher),
                           ("device plugin", self.devices),
                           ("config watcher", self.config_watcher)):
            if part is not None and not part.alive() and not self._stopping.is_set():
                return False, f"{name} thread died"
        return True, "ok"

    def is_ready(self) -> tuple[bool, str]:
        degraded = dict(self.discovery.degraded)
        if degraded:
            return False, "SourceDegraded: " + "; ".join(f"{n}: {why}" for n, why in sorted(degraded.items()))
        if self.hotplug_degraded:
            return False, self.hotplug_degraded
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
    def _hotplug(self, event: UEvent) -> None:
        self.metrics.hotplug(event.subsystem, event.action)
        sources = sources_for(event.subsystem, self.settings.sources)
        log.debug("device event %s %s %s", event.action, event.subsystem, event.devpath,
                  extra={"node": self.settings.node_name, "event": "hotplug"})
        self._silent.event(sources)
        if sources:
            self.queue.put(q.HOTPLUG, sources=sources, settled=ends_burst(event.subsystem, event.action, event.properties))

    def _node_changed(self, node: dict[str, Any]) -> None:
        # after a 404 the pending retry waits out the backoff; the node appearing ends the wait
        self._node_deliveries += 1
        self.queue.put(q.NODE, sources=(), node=node, expedite=self._node_missing)

    def _observe_discovery(self, source: str, seconds: float) -> None:
        self.metrics.discovery_duration.labels(source).observe(seconds)

    def _rules_edited(self) -> None:
        """Judge each edit when it is seen, in the watcher thread: a busy or backing-off
        worker would see only the last of several quick edits, and an invalid one in between
        would get no log line, Event or metric (issue 15). Only an accepted edit queues a pass."""
        if self.rules.reload().changed:
            self.metrics.rules_reloads.labels("accepted").inc()
            self.queue.put(q.RULES)

    def _worker_config_state(self):
        if not self.settings.config_path:
            return None
        from agent.runtime.config_state import WorkerConfigState

        return WorkerConfigState(self.settings.config_path, self.settings.node_name,
                                 on_rejected=self._config_rejected)

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

    def _rules_rejected(self, text: str) -> None:
        self.metrics.rules_reloads.labels("rejected").inc()
        self._warn_in_next_pass(REASON_RULES_INVALID, text)

    # -- the worker -----------------------------------------------------------------------
    def _schedule_retry(self, delay: float) -> None:
        """The failed pass has ended; try again after ``delay`` unless an event comes first.
        The retry is kept out of the queue on purpose: a retry's delay in the pending batch
        would hold back a hotplug, rule edit or Node change arriving meanwhile, and those
        must start a fresh pass from the current host state at once (issue 15)."""
        self._retry_at = time.monotonic() + max(0.0, delay)

    def retry_in(self) -> float | None:
        """Seconds until the scheduled retry of a failed pass (None: none scheduled)."""
        retry_at = self._retry_at
        return None if retry_at is None else max(0.0, retry_at - time.monotonic())

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
                with self.reconciler.events.deferred():  # one Event per pass (events.aggregate)
                    self._process(batch)
            except Stopping:
                return
            except Exception:  # a bug in one pass must not end the loop
                log.exception("reconcile pass failed", extra={"node": self.settings.node_name, "event": "error"})
                self.metrics.reconciled("error")
                self._schedule_retry(self.reconciler.backoff.next_delay())
            if q.RESYNC in batch.kinds:
                self._next_resync = time.monotonic() + self._jittered()

    def _plan_fn(self):
        unanswered = self.discovery.unanswered_labels()
        key = (self.discovery.generation, self.rules.generation, tuple(unanswered.items()))
        if key != self._plan_key:
            import dataclasses

            from agent import rules
            from agent.rules.held import held_label_keys

            found, catalogue, options = self.discovery.current, self.rules.catalogue, self.settings.rule_options
            features, labels, origins = found.features, found.labels, found.label_origins

            handing_over = self.devices is not None
            # a feature this pass cannot decide, with no earlier answer: keep the Node's labels it decides
            held = held_label_keys(catalogue, options, unanswered) if unanswered else frozenset()

            def plan(node_labels):
                state = rules.plan_node(features, labels, node_labels, catalogue, options, origins)
                if unanswered:
                    state = dataclasses.replace(state, held_labels=held or frozenset(), hold_every_label=held is None)
                if handing_over:
                    from agent.runtime.device_service import hand_to_kubelet

                    state = hand_to_kubelet(state)
                return state

            self._plan, self._plan_key = plan, key
        return self._plan

    def _live_node(self) -> dict[str, Any] | None:
        """The watched Node when it is at least as new as our last write, else None (GET)."""
        if self.node_watcher is None:
            return None
        return self.node_watcher.node_after(self.api.last_own_version(), self.settings.fresh_node_age)

    def _process(self, batch: q.Batch) -> None:
        started = time.perf_counter()
        kinds = batch.kinds
        if kinds == {q.NODE}:
            node = batch.node or {}
            rv = str((node.get("metadata") or {}).get("resourceVersion") or "")
            if self.api.is_own_version(rv):
                return  # the echo of our own write: the Reconciler already saw this state
        if q.RESYNC in kinds and self.rules.reload().changed:  # an edit the watcher missed
            self.metrics.rules_reloads.labels("accepted").inc()
        if q.RESYNC in kinds and self.worker_config is not None:
            self.worker_config.reload()  # an edit the watcher missed
        config_changed = self._apply_config()
        rules_changed = self.rules.generation != self._rules_generation or config_changed
        self._rules_generation = self.rules.generation
        if kinds == {q.RULES} and not rules_changed:
            return
        mark, before = self._silent.mark(), (self.discovery.current.results if self.discovery.current else None)
        rerun = self.discovery.refresh(batch.sources) if (batch.sources is None or batch.sources) else ()
        if self.monitor is not None and rerun:
            silent = self._silent.judge(mark, q.RESYNC in kinds and q.HOTPLUG not in kinds, rerun, before,
                                        self.discovery.current.results)
            if silent and self.poller is None:
                self._events_silent(silent)
        plan = self._plan_fn()
        deliveries = self._node_deliveries
        # this pass starts from the current state and schedules its own retry; a batch that ends
        # above (the echo of our own write, an unchanged rules file) must keep the pending one
        self._retry_at = None
        outcome = self.reconciler.reconcile(plan, live_node=self._live_node())
        self.passes += 1
        self.last_outcome = outcome
        self._node_missing = outcome.node_missing
        self.metrics.partially_applied.set(1 if outcome.partial else 0)
        if self.devices is not None:  # the same pass, whatever the API server said
            self.devices.publish(outcome.desired or plan({}), self.api.last_node)
        self.reconciler.events.release()  # the pass's one Event (discovery's Warnings included)
        desired = outcome.desired
        if outcome.error:
            result = "error"
        elif any(p.origin == "api-server" for p in outcome.problems):
            result = "rejected"
        else:
            result = "applied" if outcome.writes else "unchanged"
        self.metrics.reconciled(result, owned_labels=len(desired.labels) if desired and outcome.ok else None,
                                owned_resources=len(desired.extended_resources) if desired and outcome.ok else None)
        log.info("reconcile (%s%s): %s, %d write(s) in %.0f ms", ",".join(sorted(kinds)),
                 f"; rediscovered {','.join(rerun)}" if rerun and len(rerun) < len(self.discovery.sources) else "",
                 result, outcome.writes, (time.perf_counter() - started) * 1000,
                 extra={"node": self.settings.node_name, "event": "reconcile",
                        "change": "; ".join(outcome.applied)[:500] if outcome.applied else ""})
        if outcome.error:
            # a node that registered while this pass got its 404 was delivered before the flag was set
            if outcome.node_missing and self._node_deliveries != deliveries:
                self.queue.put(q.RETRY)
            else:
                self._schedule_retry(outcome.retry_after if outcome.retry_after is not None else 1.0)
            return
        if not self.ready.is_set():
            self.ready.set()
            log.info("node %s labelled: ready", self.settings.node_name,
                     extra={"node": self.settings.node_name, "event": "ready"})
        labels_now = frozenset(desired.labels) if desired else frozenset()
        removed = self._desired_labels - labels_now
        self._desired_labels = labels_now
        if self.pod_guard is not None and removed and rerun and not rules_changed:
            node = self.api.last_node or {}
            self.pod_guard.check(removed, (node.get("metadata") or {}).get("labels") or {})
