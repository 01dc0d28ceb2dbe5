"""Discovery results kept between passes; a hotplug reruns only the sources it can change.

``refresh(None)`` runs every enabled source; ``refresh({"usb", "network"})`` reruns those and
keeps the cached results of the others. A rerun source that failed as a whole
(``agent.discovery_evidence``: its evidence path unreadable where it read before, or nothing
but errors) keeps its previous result instead, and is listed in ``degraded`` until it reads
again: removal needs positive evidence. Likewise a feature a source could not determine this
pass (``SourceResult.undetermined``: one CPU's topology file unreadable) keeps its previous
answer, listed in ``carried`` until a pass reads it again. One with no earlier answer (the
agent's first pass, or every pass since has failed to read it) is also in ``unanswered``: the
desired state then keeps the labels it decides as the Node has them (``unanswered_labels``,
``agent.rules.held``), since the previous agent instance may have put exactly those there. ``generation`` increases on every refresh whose results differ from the
last ones, so the loop rebuilds its desired-state function (the Reconciler caches the desired
state per function) only then: a resync that finds the same host does not recompute it over
hundreds of instances.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping

from agent.discovery import Discovery, DiscoveryConfig, discover
from agent.discovery_evidence import carry_undetermined, evidence_readable, wholesale_failure
from agent.features import SourceResult
from agent.hostfs import HostFS

log = logging.getLogger(__name__)

Report = Callable[[str, "str | None"], None]
"""(source or "source.feature", why it fails, or None when it reads again)"""


def release_free_heap() -> None:
    """Hand memory freed by a discovery pass back to the kernel (glibc ``malloc_trim``).

    A pass on a big host allocates and frees tens of thousands of small strings and
    descriptors' worth of bookkeeping; glibc keeps the freed pages in the process, which on a
    DaemonSet that sits idle between passes is resident memory for nothing (``bench/memory.py``
    measures the agent's RSS).  Not glibc (musl, other platforms): nothing to do."""
    global _malloc_trim
    if _malloc_trim is None:
        _malloc_trim = False
        try:
            import ctypes

            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):
            pass
    if callable(_malloc_trim):
        _malloc_trim(0)


_malloc_trim: Callable[[int], object] | bool | None = None  # None: not looked up yet; False: none here


class DiscoveryCache:
    def __init__(self, host: HostFS, config: DiscoveryConfig, sources: Iterable[str], *,
                 observe: Callable[[str, float], None] | None = None, on_degraded: Report | None = None,
                 on_undetermined: Report | None = None) -> None:
        self.host = host
        self.config = config
        self.sources = tuple(sorted(sources))
        self.observe = observe  # observe(source, seconds)
        self.current: Discovery | None = None
        self.generation = 0
        #: source -> why its previous result is kept (it failed as a whole this time)
        self.degraded: dict[str, str] = {}
        #: source -> whether its evidence path read when its current result was taken
        self._had_evidence: dict[str, bool] = {}
        #: "source.feature" -> the error that left it undetermined; its previous answer is kept
        self.carried: dict[str, str] = {}
        #: the subset of ``carried`` with no earlier answer to keep: their labels are held
        self.unanswered: dict[str, str] = {}
        self.on_degraded = on_degraded  # on_degraded(source, why or None when it recovered)
        self.on_undetermined = on_undetermined  # on_undetermined("source.feature", why or None when it reads again)

    def refresh(self, sources: Iterable[str] | None) -> tuple[str, ...]:
        """Rediscover ``sources`` (None or no cache yet: all); returns the names rerun."""
        if sources is None or self.current is None:
            names = self.sources
        else:
            names = tuple(sorted(set(sources) & set(self.sources)))
        if not names:
            return ()
        for notes in (self.carried, self.unanswered):  # a source no longer run has no answer left
            for key in [k for k in notes if k.partition(".")[0] not in self.sources]:
                del notes[key]
        started = time.perf_counter()
        found = self._discover(names)
        results = {name: self._judged(name, found.results.get(name)) for name in names}
        self._merge(names, results, found.durations)
        log.debug("rediscovered %s in %.1f ms", ",".join(names), (time.perf_counter() - started) * 1000)
        return names

    def _discover(self, names: tuple[str, ...]) -> Discovery:
        found = discover(self.host, self.config, names)
        # nothing of the pass's path cache or open directories is needed until the next one
        self.host.clear_cache()
        release_free_heap()
        if self.observe is not None:
            for name, seconds in found.durations.items():
                self.observe(name, seconds)
        return found

    def _judged(self, name: str, result: SourceResult | None) -> SourceResult | None:
        """The result to keep for ``name``: this pass's (its undetermined features carried), or
        the previous one when the source failed as a whole (``degraded`` says why)."""
        previous = self.current.results.get(name) if self.current is not None else None
        why = None
        if result is not None:
            readable = evidence_readable(self.host, name)
            why = wholesale_failure(self.host, name, result, previous,
                                    had_evidence=self._had_evidence.get(name, True), readable=readable)
            if not why:
                self._had_evidence[name] = readable
                result = self._carry(result, previous)
        if why:
            if self.degraded.get(name) != why:
                log.warning("source %s failed as a whole (%s): keeping its previous features; nothing it "
                            "contributed is removed until it reads again", name, why,
                            extra={"event": "source-degraded", "change": name})
                self._notify(name, why)
            self.degraded[name] = why
            return previous
        if self.degraded.pop(name, None) is not None:
            log.info("source %s reads again", name, extra={"event": "source-recovered", "change": name})
            self._notify(name, None)
        return result

    def _merge(self, names: tuple[str, ...], results: dict[str, SourceResult | None],
               durations: Mapping[str, float]) -> None:
        """The new current discovery; ``generation`` moves when a rerun source's result changed."""
        kept = {name: result for name, result in results.items() if result is not None}
        before = self.current
        if before is None or set(names) == set(self.sources):
            self.current = Discovery(kept, durations)
        else:
            self.current = Discovery({**before.results, **kept}, {**before.durations, **durations})
        if before is None or any(before.results.get(n) != self.current.results.get(n) for n in names):
            self.generation += 1

    def _carry(self, new: SourceResult, previous: SourceResult | None) -> SourceResult:
        """``new`` with its undetermined features answered as last time; logged when that starts
        and when the feature reads again."""
        source = new.source
        for feature in new.undetermined:
            key = f"{source}.{feature}"
            if key not in self.carried:
                why = next((str(e) for e in reversed(new.errors)), "a read failed")
                kept = previous is not None
                log.warning("%s could not be determined (%s): %s", key, why,
                            "keeping the previous answer until it reads again" if kept else
                            "no earlier answer to keep, so the labels it decides stay on the Node as they are "
                            "until it reads again", extra={"event": "feature-undetermined", "change": source})
                self.carried[key] = why
                if not kept:
                    self.unanswered[key] = why
                self._report(self.on_undetermined, key, why)
        for key in [k for k in self.carried if k.partition(".")[0] == source]:
            if key.partition(".")[2] not in new.undetermined:
                del self.carried[key]
                self.unanswered.pop(key, None)
                log.info("%s reads again", key, extra={"event": "feature-recovered", "change": source})
                self._report(self.on_undetermined, key, None)
        return carry_undetermined(new, previous)

    def unanswered_labels(self) -> dict[str, tuple[str, ...]]:
        """"source.feature" -> the raw label keys it decides, for each undetermined feature
        with no earlier answer (what the desired state must keep as the Node has it)."""
        results = self.current.results if self.current is not None else {}
        out = {}
        for key in sorted(self.unanswered):
            source, _, feature = key.partition(".")
            result = results.get(source)
            out[key] = tuple(result.undetermined.get(feature, ())) if result is not None else ()
        return out

    def _notify(self, name: str, why: str | None) -> None:
        self._report(self.on_degraded, name, why)

    @staticmethod
    def _report(callback: Report | None, name: str, why: str | None) -> None:
        if callback is not None:
            try:
                callback(name, why)
            except Exception:
                log.exception("reporting the state of %s failed", name)
