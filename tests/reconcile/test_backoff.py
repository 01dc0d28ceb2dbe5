"""Backoff for one Node (issue 15): 0.5 s doubling to 5 s, jitter 1.0, reset on the first success."""

import pytest

from agent.reconcile.backoff import Backoff, parse_retry_after


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_doubles_to_the_cap_without_jitter():
    clock = FakeClock()
    backoff = Backoff(clock=clock, random=lambda: 0.0)
    delays = [backoff.next_delay() for _ in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]


def test_full_jitter_adds_up_to_one_base_delay():
    backoff = Backoff(clock=FakeClock(), random=lambda: 0.999)
    first, second = backoff.next_delay(), backoff.next_delay()
    assert 0.5 <= first < 1.0 and 1.0 <= second < 2.0


def test_first_success_resets_at_once():
    backoff = Backoff(clock=FakeClock(), random=lambda: 0.0)
    for _ in range(5):
        backoff.next_delay()
    backoff.success()
    assert backoff.steps == 0
    assert backoff.next_delay() == 0.5


def test_never_waits_beyond_twice_the_cap_without_retry_after():
    backoff = Backoff(clock=FakeClock(), random=lambda: 0.999)
    assert max(backoff.next_delay() for _ in range(20)) < 10.0


def test_retry_after_wins_over_the_computed_delay_and_still_counts_a_step():
    backoff = Backoff(clock=FakeClock(), random=lambda: 0.0)
    assert backoff.next_delay(retry_after=3) == 3
    assert backoff.next_delay() == 1.0


def test_retry_after_is_bounded():
    assert Backoff(clock=FakeClock()).next_delay(retry_after=10_000) == 120


@pytest.mark.parametrize("raw,seconds", [("3", 3.0), (" 1 ", 1.0), ("0", 0.0), ("soon", None), (None, None), ("-1", None)])
def test_parse_retry_after(raw, seconds):
    assert parse_retry_after(raw) == seconds
