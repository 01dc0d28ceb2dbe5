"""Backoff mirrors client-go's reflector: 0.8 s doubling to 30 s, jitter 1.0, reset after 2 min."""

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
    assert delays == [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0]


def test_full_jitter_adds_up_to_one_base_delay():
    backoff = Backoff(clock=FakeClock(), random=lambda: 0.999)
    first, second = backoff.next_delay(), backoff.next_delay()
    assert 0.8 <= first < 1.6 and 1.6 <= second < 3.2


def test_resets_two_minutes_after_the_last_failure():
    clock = FakeClock()
    backoff = Backoff(clock=clock, random=lambda: 0.0)
    for _ in range(5):
        backoff.next_delay()
    clock.now += 119
    backoff.success()
    assert backoff.next_delay() == pytest.approx(25.6)  # not reset yet
    clock.now += 120
    backoff.success()
    assert backoff.next_delay() == 0.8


def test_retry_after_wins_over_the_computed_delay_and_still_counts_a_step():
    backoff = Backoff(clock=FakeClock(), random=lambda: 0.0)
    assert backoff.next_delay(retry_after=3) == 3
    assert backoff.next_delay() == 1.6


def test_retry_after_is_bounded():
    assert Backoff(clock=FakeClock()).next_delay(retry_after=10_000) == 120


@pytest.mark.parametrize("raw,seconds", [("3", 3.0), (" 1 ", 1.0), ("0", 0.0), ("soon", None), (None, None), ("-1", None)])
def test_parse_retry_after(raw, seconds):
    assert parse_retry_after(raw) == seconds
