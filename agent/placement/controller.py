"""The placement controller: gated pods in, one conditional PATCH per pod out.

Wiring: ``PodInformer`` (LIST + WATCH of pods labelled ``placement=gated``) feeds pod keys to
a ``WorkQueue``; ``workers`` threads take keys, resolve the pod's images with the shared
``Resolver`` (thread-safe, single flight per image, so concurrency is bounded by the pool and
by the resolver's per-registry rate limit), decide (``decide.decide``) and write. Only the
replica holding the Lease writes; the others keep their informer warm and take over within
the Lease duration.

Time: a pod's hard deadline counts from its ``creationTimestamp``, so a controller outage
does not extend it. Any pod left gated (``hold``, no common platform, API errors) is queued
again no later than its deadline, and a watchdog scan every ``watchdog_interval`` re-queues
whatever is past it; at the deadline the gate goes with ``ArchGateTimedOut``. Each attempt's
reads (namespace, pull secrets, registry) must end when its decision is due: at the end of
the retry window (``ungate``, ``fallback``) or at the hard deadline (``hold``, and any attempt
that starts after the window), so a hanging registry or API server delays no decision past
its bound.

Pods that leave the selection: the watch says DELETED both when a pod is deleted and when it
stops matching the label selector (the API server's watch cache sends the previous object
then, ``cacheWatcher.convertToWatchEvent`` in k8s.io/apiserver ``pkg/storage/cacher``), so
the controller cannot tell the two apart from the event. A pod it knew as gated is read again
(one GET): deleted or released, it is forgotten; still carrying our gate, its label no longer
asks for placement (removed, or set to ``disabled``), so the gate is removed at once without
affinity and its labels are left as they are (``ArchPlacementSkipped``). A read that fails is
retried; the watchdog re-queues such pods on every scan. Pods the selection never showed
(their label changed while no controller ran, or something else gave them our gate) are
found by a sweep of Pending pods (gated pods are Pending) when this replica becomes leader
and every half deadline after, so they too are released by their deadline.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.images import ImageError, Keyring
from agent.placement import decide, podspec, policy
from agent.placement.events import PodEvents
from agent.placement.informer import PodInformer, pod_key
from agent.placement.kube import PlacementApi
from agent.placement.lookups import Lookups
from agent.placement.metrics import PlacementMetrics
from agent.placement.workqueue import WorkQueue

log = logging.getLogger(__name__)
Json = dict[str, Any]
SWEEP_PAGE = 500
PENDING = "status.phase=Pending"


class ImageResolver(Protocol):
    def resolve(self, reference: str, credentials: Keyring | None = None, *, pull_always: bool = False,
                deadline: float | None = None) -> Any: ...


@dataclass(frozen=True)
class ControllerConfig:
    identity: str
    workers: int = 8
    taint_mode: bool = False
    bounds: policy.Bounds = field(default_factory=policy.Bounds)
    watchdog_interval: float = 30.0
    lookup_ttl: float = 30.0


@dataclass
class _PodState:
    first_attempt: float
    attempts: int = 0
    no_common: bool = False
    warned: bool = False


def created_at(pod: Mapping[str, Any]) -> float | None:
    """The pod's ``creationTimestamp`` as Unix seconds (None when absent or malformed)."""
    stamp = (pod.get("metadata") or {}).get("creationTimestamp")
    try:
        return _dt.datetime.strptime(str(stamp), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=_dt.UTC).timestamp()
    except ValueError:
        return None


class Controller:
    def __init__(self, api: PlacementApi, resolver: ImageResolver, config: ControllerConfig,
                 metrics: PlacementMetrics, *, leading: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.api, self.resolver, self.config, self.metrics = api, resolver, config, metrics
        self.leading, self._clock, self._wall = leading, clock, wall
        self.queue = WorkQueue(clock)
        self.lookups = Lookups(api, config.lookup_ttl, clock)
        self.events = PodEvents(api, config.identity)
        self.informer = PodInformer(api, f"{podspec.SELECTOR_LABEL}={podspec.GATED}", self._changed,
                                    on_ignored=metrics.watch_item_ignored)
        self._states: dict[str, _PodState] = {}
        self._gated: set[str] = set()
        self._strays: set[str] = set()  # left the selection while gated: read again, released
        self._next_sweep = 0.0  # controller clock; 0: at the watchdog's next scan
        self.sweeps = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        self.informer.start()
        for n in range(self.config.workers):
            self._spawn(self._work, f"placement-worker-{n}")
        self._spawn(self._watchdog, "placement-watchdog")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.informer.stop()
        self.queue.stop()
        for thread in self._threads:
            thread.join(5)

    def leadership(self, leading: bool) -> None:
        """Lease callback: a new leader looks at every gated pod at once."""
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            self._next_sweep = 0.0
            for key in self.informer.pod_keys() + self._stray_keys():
                self.queue.add(key)

    def _stray_keys(self) -> list[str]:
        with self._lock:
            return list(self._strays)

    def _is_stray(self, key: str) -> bool:
        with self._lock:
            return key in self._strays

    # -- feeding the queue --------------------------------------------------------------------
    def _changed(self, key: str, pod: Json | None) -> None:
        gated = pod is not None and podspec.has_gate(pod)
        with self._lock:
            if gated:
                self._gated.add(key)
                self._strays.discard(key)
            else:
                if pod is None and key in self._gated:  # deleted, or no longer selected: read it again
                    self._strays.add(key)
                self._gated.discard(key)
                self._states.pop(key, None)
            recheck = key in self._strays
            self._gauges()
        if gated or recheck:
            self.queue.add(key)
        else:
            self.queue.forget(key)

    def _gauges(self) -> None:
        self.metrics.gated.set(len(self._gated))
        self.metrics.no_common.set(sum(1 for s in self._states.values() if s.no_common))

    def _watchdog(self) -> None:
        while not self._stop.wait(self.config.watchdog_interval):
            if self.leading() and self._clock() >= self._next_sweep:
                self._sweep()
            now = self._wall()
            for key in self._stray_keys():
                self.queue.add(key)
            for key in self.informer.pod_keys():
                pod = self.informer.get(key)
                created = created_at(pod) if pod else None
                if pod and podspec.has_gate(pod) and (created is None or now >= created + self.config.bounds.deadline):
                    self.queue.add(key)

    def _sweep(self) -> None:
        """Every Pending pod carrying our gate that the selection does not show becomes a
        stray (read again, released); a LIST that fails is tried again at the next scan."""
        known = set(self.informer.pod_keys())
        found: list[str] = []
        token = ""
        try:
            while True:
                page = self.api.list_pods(field_selector=PENDING, limit=SWEEP_PAGE, continue_token=token)
                found += [k for p in page.get("items") or [] if isinstance(p, dict) and podspec.has_gate(p)
                          and (k := pod_key(p)) not in known]
                token = str((page.get("metadata") or {}).get("continue") or "")
                if not token:
                    break
        except Exception as exc:  # noqa: BLE001 - not listed is not absent: the next scan lists again
            log.warning("sweep for gated pods outside the selection failed (%s); trying again at the next scan",
                        " ".join(str(exc).split())[:200])
            return
        self.sweeps += 1
        self._next_sweep = self._clock() + self.config.bounds.deadline / 2
        with self._lock:
            self._strays.update(found)
        for key in found:
            self.queue.add(key)

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                if self.leading() or self._is_stray(key):
                    self.process(key)
            except Exception:
                log.exception("placement of %s failed; retrying", key)
                self.queue.add(key, self._clock() + self.config.bounds.max_retry)
            finally:
                self.queue.done(key)

    # -- one pod ------------------------------------------------------------------------------
    def _mono(self, wall_time: float) -> float:
        return self._clock() + (wall_time - self._wall())

    def process(self, key: str) -> None:
        pod = self.informer.get(key)
        if pod is None:
            if self._is_stray(key):
                self._recheck(key)
            return
        if not podspec.has_gate(pod) or not self.leading():
            return
        created = created_at(pod) or self._wall()
        deadline = created + self.config.bounds.deadline
        if self._wall() >= deadline:
            self._write(pod, podspec.ungate_patch(pod), "timed_out", "ArchGateTimedOut", "Warning",
                        f"gate removed without architecture affinity: still gated {self.config.bounds.deadline:.0f}s "
                        "after creation (hard deadline)")
            return
        with self._lock:
            state = self._states.setdefault(key, _PodState(self._clock()))
            state.attempts += 1
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        hard, started = self._mono(deadline), self._clock()
        choice = self.lookups.on_error(namespace, self.decision_due(state, hard, started))
        until = self.decision_due(state, hard, started, choice)
        try:
            answers = self._resolve(pod, until)
        except ImageError as exc:
            self._failed(key, pod, state, exc, created, choice)
            return
        decision = decide.decide(pod, answers, taint_mode=self.config.taint_mode)
        if decision.action == decide.NO_COMMON:
            if not state.no_common:
                with self._lock:
                    state.no_common = True
                    self._gauges()
                self.metrics.pods.labels("no_common_arch").inc()
                self.events.post(pod, decision.reason, decision.message, decision.event_type)
            self.queue.add(key, self._mono(deadline))
            return
        outcome = {decide.PLACE: "resolved", decide.RESPECT: "respected", decide.CONFLICT: "conflict"}[decision.action]
        assert decision.patch is not None
        self._write(pod, decision.patch, outcome, decision.reason, decision.event_type, decision.message)

    def _recheck(self, key: str) -> None:
        """A pod that left the selection while it carried our gate (see the module docstring)."""
        from kubernetes.client.exceptions import ApiException

        namespace, _, name = key.partition("/")
        try:
            pod = self.api.get_pod(namespace, name)
        except ApiException as exc:
            if exc.status != 404:
                raise  # unreadable is not gone: the worker queues it again
            pod = None
        if pod is None or not podspec.has_gate(pod):
            with self._lock:
                self._strays.discard(key)
            return
        labels = podspec.meta_of(pod).get("labels")
        label = labels.get(podspec.SELECTOR_LABEL) if isinstance(labels, Mapping) else None
        if label == podspec.GATED or not self.leading():
            return  # selected again (the watch brings it back), or not ours to write: the watchdog asks again
        if label == podspec.OPTED_OUT:
            event_type, why = "Normal", f"the pod opted out ({podspec.SELECTOR_LABEL}={podspec.OPTED_OUT})"
        elif label is None:
            event_type, why = "Warning", f"the pod's {podspec.SELECTOR_LABEL} label was removed while it was gated"
        else:
            event_type, why = "Warning", f"the pod's {podspec.SELECTOR_LABEL} label is now {str(label)[:63]!r}, not {podspec.GATED!r}"
        self._write(pod, podspec.ungate_patch(pod, keep_label=True), "skipped", "ArchPlacementSkipped", event_type,
                    f"gate removed without architecture affinity: {why}")

    def decision_due(self, state: _PodState, hard: float, started: float, choice: policy.OnError | None = None) -> float:
        """When the decision of the attempt that ``started`` is due (controller clock): the end
        of the retry window when it started within it, unless the namespace holds (``choice``
        None: not known yet, the earlier bound); otherwise the hard deadline ``hard``."""
        window_end = min(state.first_attempt + self.config.bounds.retry_window, hard)
        holding = choice is not None and choice.mode == policy.HOLD
        return hard if holding or started >= window_end else window_end

    def _resolve(self, pod: Json, until: float) -> list[decide.ImageAnswer]:
        keyring = self.lookups.keyring(pod, until)
        answers = []
        for use in podspec.images(pod):
            answer = self.resolver.resolve(use.reference, keyring, pull_always=use.pull_always,
                                           deadline=self._resolver_time(until))
            answers.append(decide.ImageAnswer(use.reference, str(answer.digest), tuple(answer.platforms)))
        return answers

    def _resolver_time(self, until: float) -> float:
        """``until`` on the resolver's clock (``time.monotonic``) from the controller's."""
        return time.monotonic() + (until - self._clock())

    def _failed(self, key: str, pod: Json, state: _PodState, exc: ImageError, created: float,
                choice: policy.OnError) -> None:
        verdict = policy.after_failure(choice, transient=bool(getattr(exc, "transient", False)), now=self._clock(),
                                       first_attempt=state.first_attempt, created=self._mono(created),
                                       attempt=state.attempts, bounds=self.config.bounds)
        why = f"the registry's answer: {exc}"
        if choice.problem and not state.warned:
            self.events.post(pod, "ArchInspectionFailed", choice.problem, "Warning")
        if verdict.retry_at is not None:
            if choice.mode == policy.HOLD and not state.warned:
                self.events.post(pod, "ArchInspectionFailed", f"holding the gate and retrying until the deadline; {why}",
                                 "Warning")
            state.warned = True
            self.queue.add(key, verdict.retry_at)
            return
        if verdict.act == "timeout":
            self._write(pod, podspec.ungate_patch(pod), "timed_out", "ArchGateTimedOut", "Warning",
                        f"gate removed without architecture affinity at the hard deadline; {why}")
        elif verdict.act == policy.FALLBACK and podspec.user_arch_choice(pod, {choice.fallback_arch}) is None:
            self._write(pod, decide.fallback_patch(pod, choice.fallback_arch, taint_mode=self.config.taint_mode),
                        "fallback", "ArchInspectionFailed", "Warning",
                        f"required linux/{choice.fallback_arch} (namespace fallback) and removed the gate; {why}")
        else:
            self._write(pod, podspec.ungate_patch(pod), "inspection_failed", "ArchInspectionFailed", "Warning",
                        f"gate removed without architecture affinity after {state.attempts} attempt(s); {why}")

    def _write(self, pod: Json, patch: Json, outcome: str, reason: str, event_type: str, message: str,
               *, plain_on_refusal: bool = True) -> None:
        from kubernetes.client.exceptions import ApiException

        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        try:
            written = self.api.patch_pod(namespace, name, patch)
        except ApiException as exc:
            self._refused(pod, exc, plain_on_refusal)
            return
        # the watch delivers this write later: until then a second look at the pod (queued
        # again meanwhile) must see it released, not send the same PATCH on a stale version;
        # and the DELETED it brings (the pod leaves the selection) needs no second read
        key = f"{namespace}/{name}"
        self.informer.remember(key, written)
        with self._lock:
            self._gated.discard(key)
            self._strays.discard(key)
            self._gauges()
        created = created_at(written)
        if created is not None:
            self.metrics.gate_seconds.observe(max(0.0, self._wall() - created))
        self.metrics.pods.labels(outcome).inc()
        self.events.post(written, reason, message, event_type)  # logged there, at the Event's level

    def _refused(self, pod: Json, exc: Any, plain_on_refusal: bool) -> None:
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        key = f"{namespace}/{name}"
        if exc.status == 404:
            with self._lock:
                self._strays.discard(key)
            return
        if exc.status == 409:  # the pod changed since we read it: decide again on the fresh one
            fresh = self.api.get_pod(namespace, name)
            if podspec.has_gate(fresh):
                self.informer.remember(key, fresh)
                self.queue.add(key)
            return
        if exc.status == 422 and plain_on_refusal:
            log.warning("pod %s: the API server refused our placement patch (%s); removing the gate only", key,
                        " ".join(str(exc.body or exc).split())[:300])
            self._write(pod, podspec.ungate_patch(pod), "inspection_failed", "ArchInspectionFailed", "Warning",
                        "the API server refused the affinity patch; gate removed without it", plain_on_refusal=False)
            return
        log.warning("pod %s: PATCH failed (%s); retrying", key, exc.status)
        self.queue.add(key, self._clock() + self.config.bounds.max_retry)
