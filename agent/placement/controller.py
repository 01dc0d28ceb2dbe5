"""The placement controller: gated pods in, one conditional PATCH per pod out.

Wiring: ``PodInformer`` (LIST + WATCH of pods labelled ``placement=gated``) feeds pod keys to
a ``WorkQueue``; ``workers`` threads take keys, resolve the pod's images with the shared
``Resolver`` (thread-safe, single flight per image, so concurrency is bounded by the pool and
by the resolver's per-registry rate limit), decide (``decide.plan``) and write. Only the
replica holding the Lease writes; the others keep their informer warm and take over within
the Lease duration.

Time: a pod's hard deadline counts from its ``creationTimestamp``, so a controller outage
does not extend it. Any pod left gated (``hold``, no common platform, API errors) is queued
again no later than its deadline, and a watchdog scan every ``watchdog_interval`` re-queues
whatever is past it; at the deadline the gate goes with ``ArchGateTimedOut``.
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
from agent.placement.informer import PodInformer
from agent.placement.kube import PlacementApi
from agent.placement.lookups import Lookups
from agent.placement.metrics import PlacementMetrics
from agent.placement.workqueue import WorkQueue

log = logging.getLogger(__name__)
Json = dict[str, Any]
MAX_CONFLICTS = 5


class ImageResolver(Protocol):
    def resolve(self, reference: str, credentials: Keyring | None = None, *, pull_always: bool = False) -> Any: ...


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
            for key in self.informer.pod_keys():
                self.queue.add(key)

    # -- feeding the queue --------------------------------------------------------------------
    def _changed(self, key: str, pod: Json | None) -> None:
        with self._lock:
            if pod is not None and podspec.has_gate(pod):
                self._gated.add(key)
            else:
                self._gated.discard(key)
                self._states.pop(key, None)
            self._gauges()
        if pod is not None and podspec.has_gate(pod):
            self.queue.add(key)
        else:
            self.queue.forget(key)

    def _gauges(self) -> None:
        self.metrics.gated.set(len(self._gated))
        self.metrics.no_common.set(sum(1 for s in self._states.values() if s.no_common))

    def _watchdog(self) -> None:
        while not self._stop.wait(self.config.watchdog_interval):
            now = self._wall()
            for key in self.informer.pod_keys():
                pod = self.informer.get(key)
                created = created_at(pod) if pod else None
                if pod and podspec.has_gate(pod) and (created is None or now >= created + self.config.bounds.deadline):
                    self.queue.add(key)

    def _work(self) -> None:
        while (key := self.queue.get()) is not None:
            try:
                if self.leading():
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
        if pod is None or not podspec.has_gate(pod):
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
        try:
            answers = self._resolve(pod)
        except ImageError as exc:
            self._failed(key, pod, state, exc, created)
            return
        plan = decide.plan(pod, answers, taint_mode=self.config.taint_mode)
        if plan.action == decide.NO_COMMON:
            if not state.no_common:
                with self._lock:
                    state.no_common = True
                    self._gauges()
                self.metrics.pods.labels("no_common_arch").inc()
                self.events.post(pod, plan.reason, plan.message, plan.event_type)
            self.queue.add(key, self._mono(deadline))
            return
        outcome = {decide.PLACE: "resolved", decide.RESPECT: "respected", decide.CONFLICT: "conflict"}[plan.action]
        assert plan.patch is not None
        self._write(pod, plan.patch, outcome, plan.reason, plan.event_type, plan.message)

    def _resolve(self, pod: Json) -> list[decide.ImageAnswer]:
        keyring = self.lookups.keyring(pod)
        answers = []
        for use in podspec.images(pod):
            answer = self.resolver.resolve(use.reference, keyring, pull_always=use.pull_always)
            answers.append(decide.ImageAnswer(use.reference, str(answer.digest), tuple(answer.platforms)))
        return answers

    def _failed(self, key: str, pod: Json, state: _PodState, exc: ImageError, created: float) -> None:
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        choice = self.lookups.on_error(namespace)
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
        # again meanwhile) must see it released, not send the same PATCH on a stale version
        self.informer.remember(f"{namespace}/{name}", written)
        created = created_at(written)
        if created is not None:
            self.metrics.gate_seconds.observe(max(0.0, self._wall() - created))
        self.metrics.pods.labels(outcome).inc()
        self.events.post(written, reason, message, event_type)
        log.info("pod %s/%s: %s (%s)", namespace, name, reason, outcome, extra={"event": outcome})

    def _refused(self, pod: Json, exc: Any, plain_on_refusal: bool) -> None:
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        key = f"{namespace}/{name}"
        if exc.status == 404:
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
