"""Failure semantics (``agent/placement/policy.py``): the namespace's choice and the bounds
it documents (ungate after retries of at most 30 s, hold until a 10-minute deadline counted
from creation, fallback:<arch>), on a fake clock."""

from __future__ import annotations

import itertools

import pytest

from agent.placement.policy import (
    FALLBACK,
    HOLD,
    ON_ERROR_ANNOTATION,
    UNGATE,
    Bounds,
    OnError,
    after_failure,
    parse_on_error,
)

B = Bounds()


@pytest.mark.parametrize(("text", "want"), [
    (None, OnError()), ("ungate", OnError(UNGATE)), (" hold ", OnError(HOLD)), ("fallback:arm64", OnError(FALLBACK, "arm64")),
])
def test_the_annotation(text: str | None, want: OnError) -> None:
    assert parse_on_error({ON_ERROR_ANNOTATION: text} if text is not None else {}) == want


@pytest.mark.parametrize("text", ["", "keep", "fallback:", "fallback:ARM64", "fallback:arm64 amd64", "hold;rm -rf"])
def test_anything_else_is_ungate_with_a_reason(text: str) -> None:
    choice = parse_on_error({ON_ERROR_ANNOTATION: text})
    assert choice.mode == UNGATE and ON_ERROR_ANNOTATION in choice.problem


def run(choice: OnError, *, transient: bool = True, created: float = 0.0, start: float = 0.0) -> tuple[list[float], str]:
    """Retry times until the verdict acts; returns (attempt times, act)."""
    now, attempt, times = start, 1, [start]
    while True:
        verdict = after_failure(choice, transient=transient, now=now, first_attempt=start, created=created,
                                attempt=attempt, bounds=B)
        if verdict.retry_at is None:
            return times, verdict.act
        now, attempt = verdict.retry_at, attempt + 1
        times.append(now)


def test_ungate_retries_within_30_seconds_then_ungates() -> None:
    times, act = run(OnError())
    assert act == UNGATE and times[-1] <= 30.0 and times[:5] == [0.0, 1.0, 3.0, 7.0, 15.0]


def test_a_permanent_error_ungates_at_once() -> None:
    assert run(OnError(), transient=False) == ([0.0], UNGATE)
    assert run(OnError(FALLBACK, "amd64"), transient=False) == ([0.0], FALLBACK)


def test_hold_retries_until_the_deadline_from_creation_then_times_out() -> None:
    times, act = run(OnError(HOLD), transient=False, created=-100.0)
    assert act == "timeout" and times[-1] == pytest.approx(500.0) and all(b - a <= 8.0 for a, b in itertools.pairwise(times))


def test_the_deadline_counts_from_creation_not_from_a_controller_restart() -> None:
    assert run(OnError(HOLD), created=-700.0) == ([0.0], "timeout")
    times, act = run(OnError(), created=-590.0)  # 10 s left: the retry window is cut to the deadline
    assert act == UNGATE and times[-1] <= 10.0
