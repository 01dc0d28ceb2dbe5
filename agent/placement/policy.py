"""What to do when a pod's images cannot be resolved: the namespace's choice, and the time
bounds that hold whatever it is. Pure.

The namespace annotation ``node-feature-agent.io/placement-on-error`` says:

* ``ungate`` (default): retry transient failures for at most ``retry_window`` (30 s), then
  remove the gate without adding affinity, with a Warning ``ArchInspectionFailed``;
* ``hold``: keep the pod gated and keep retrying until the hard deadline;
* ``fallback:<arch>``: after the retry window, require ``kubernetes.io/os=linux`` and that
  architecture, and remove the gate.

A registry answer that will not change by retrying (401/403/404, a bad manifest) ends the
retries at once for ``ungate`` and ``fallback``; ``hold`` still waits, since someone may push
the image or fix the secret. Whatever the choice, nothing stays gated past the hard deadline
(``deadline``, 10 min, counted from the pod's creation so a controller outage does not reset
it): the watchdog then removes the gate with ``ArchGateTimedOut``. An annotation that says
anything else is reported once per pod and read as ``ungate``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

ON_ERROR_ANNOTATION = "node-feature-agent.io/placement-on-error"
UNGATE, HOLD, FALLBACK = "ungate", "hold", "fallback"
_ARCH = re.compile(r"^[a-z0-9]([a-z0-9_]{0,30}[a-z0-9])?$")


@dataclass(frozen=True)
class OnError:
    mode: str = UNGATE
    fallback_arch: str = ""
    problem: str = ""  # why the annotation was not used as written ("" when it was)


def parse_on_error(annotations: Mapping[str, str] | None) -> OnError:
    raw = (annotations or {}).get(ON_ERROR_ANNOTATION)
    if raw is None:
        return OnError()
    text = raw.strip()
    if text in (UNGATE, HOLD):
        return OnError(text)
    if text.startswith(FALLBACK + ":"):
        arch = text[len(FALLBACK) + 1:].strip()
        if _ARCH.match(arch):
            return OnError(FALLBACK, arch)
    return OnError(UNGATE, problem=f"{ON_ERROR_ANNOTATION}={raw!r} is not ungate, hold or fallback:<arch>; using ungate")


@dataclass(frozen=True)
class Bounds:
    retry_window: float = 30.0
    deadline: float = 600.0
    first_retry: float = 1.0
    max_retry: float = 8.0


def retry_delay(attempt: int, bounds: Bounds) -> float:
    """Seconds before attempt ``attempt + 1`` (1, 2, 4, 8, 8, ...)."""
    return float(min(bounds.max_retry, bounds.first_retry * 2 ** max(0, attempt - 1)))


@dataclass(frozen=True)
class Verdict:
    """``retry_at``: try again then; otherwise ``act`` now: ``ungate``, ``fallback`` or
    ``timeout`` (past the hard deadline)."""

    retry_at: float | None = None
    act: str = ""


def after_failure(policy: OnError, *, transient: bool, now: float, first_attempt: float, created: float,
                  attempt: int, bounds: Bounds) -> Verdict:
    """The next step after attempt number ``attempt`` (1-based) failed at ``now``. Times are
    seconds on one clock; ``created`` is the pod's creation on that clock."""
    hard = created + bounds.deadline
    if now >= hard:
        return Verdict(act="timeout")
    next_try = now + retry_delay(attempt, bounds)
    if policy.mode == HOLD:
        return Verdict(retry_at=min(next_try, hard))
    final = FALLBACK if policy.mode == FALLBACK else UNGATE
    if not transient or next_try > min(first_attempt + bounds.retry_window, hard):
        return Verdict(act=final)
    return Verdict(retry_at=next_try)
