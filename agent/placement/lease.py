"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's ``leaderelection``
does it (``tools/leaderelection/leaderelection.go``, ``resourcelock/leaselock.go``):

* try every ``retry_period`` (2 s): read the Lease; create it when missing; take it over
  when its holder is empty, is us, or has not renewed for ``lease_duration`` (15 s) *as
  observed on our own clock* (no trust in the other replica's clock); renew it while ours;
* every write carries the resourceVersion we read (a conditional merge patch, where client-go
  sends a PUT: the same precondition, and RBAC needs ``patch`` rather than ``update``), so of
  two replicas racing for an expired Lease exactly one wins (the other gets 409);
* a leader that cannot renew for ``renew_deadline`` (10 s) stops leading before anyone else
  may take over (10 < 15), so two leaders never act at once;
* ``release`` (on SIGTERM) empties ``holderIdentity`` so a successor starts at once.

Identity is the pod name: a restarted container of the same pod takes its Lease back at once.
"""

from __future__ import annotations

import datetime as _dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from agent.placement.kube import PlacementApi

log = logging.getLogger(__name__)
Json = dict[str, Any]


def _micro_time(now: float) -> str:
    """A ``metav1.MicroTime`` (RFC 3339 with microseconds)."""
    return _dt.datetime.fromtimestamp(now, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(self, api: PlacementApi, namespace: str, name: str, identity: str, *, lease_duration: float = 15.0,
                 renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self.api, self.namespace, self.name, self.identity = api, namespace, name, identity
        self.lease_duration, self.renew_deadline, self.retry_period = lease_duration, renew_deadline, retry_period
        self._clock, self._wall = clock, wall
        self._leading = threading.Event()
        self._stop = threading.Event()
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self._last_renew = 0.0
        self._thread: threading.Thread | None = None
        self.transitions = 0

    def is_leader(self) -> bool:
        return self._leading.is_set()

    def start(self, on_change: Callable[[bool], None]) -> None:
        self._thread = threading.Thread(target=self._run, args=(on_change,), name="placement-lease", daemon=True)
        self._thread.start()

    def _run(self, on_change: Callable[[bool], None]) -> None:
        while not self._stop.is_set():
            was = self.is_leader()
            try:
                won = self._try_acquire_or_renew()
            except Exception as exc:  # noqa: BLE001 - API errors: retry; leadership lapses by the deadline below
                log.warning("lease %s/%s: %s", self.namespace, self.name, " ".join(str(exc).split())[:300])
                won = was and self._clock() - self._last_renew < self.renew_deadline
            if won:
                self._leading.set()
            else:
                self._leading.clear()
            if won != was:
                log.info("lease %s/%s: %s", self.namespace, self.name, "leading" if won else "not leading",
                         extra={"event": "leader" if won else "standby"})
                on_change(won)
            self._stop.wait(self.retry_period)

    def _try_acquire_or_renew(self) -> bool:
        from kubernetes.client.exceptions import ApiException

        now = self._clock()
        spec: Json = {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                      "renewTime": _micro_time(self._wall())}
        try:
            lease = self.api.get_lease(self.namespace, self.name)
        except ApiException as exc:
            if exc.status != 404:
                raise
            spec["acquireTime"] = spec["renewTime"]
            body: Json = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}
            return self._written(now, spec, lambda: self.api.create_lease(self.namespace, body))
        held = lease.get("spec") or {}
        holder = str(held.get("holderIdentity") or "")
        observed = (holder, str(held.get("renewTime") or ""))
        if observed != self._observed:
            self._observed, self._observed_at = observed, now
        duration = float(held.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False
        transitions = int(held.get("leaseTransitions") or 0)
        if holder != self.identity:
            spec.update(acquireTime=spec["renewTime"], leaseTransitions=transitions + 1)
        else:
            spec.update(acquireTime=held.get("acquireTime") or spec["renewTime"], leaseTransitions=transitions)
        version = (lease.get("metadata") or {}).get("resourceVersion")
        return self._written(now, spec, lambda: self.api.patch_lease(
            self.namespace, self.name, {"metadata": {"resourceVersion": version}, "spec": spec}))

    def _written(self, now: float, spec: Json, write: Callable[[], Json]) -> bool:
        """Make the conditional write; a 409 means another replica wrote first (not ours)."""
        from kubernetes.client.exceptions import ApiException

        try:
            write()
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._renewed(now, spec)
        return True

    def _renewed(self, now: float, spec: Json) -> None:
        self._last_renew = now
        self._observed, self._observed_at = (self.identity, str(spec["renewTime"])), now

    def stop(self, release: bool = True) -> None:
        """Stop trying; when leading and ``release``, hand the Lease back."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if release and self.is_leader():
            try:
                lease = self.api.get_lease(self.namespace, self.name)
                if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                    self.api.patch_lease(self.namespace, self.name, {
                        "metadata": {"resourceVersion": (lease.get("metadata") or {}).get("resourceVersion")},
                        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1}})
            except Exception as exc:  # noqa: BLE001 - best effort: the Lease expires anyway
                log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, exc)
        self._leading.clear()
