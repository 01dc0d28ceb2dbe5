"""Backoff for one Node: 0.5 s doubling to 5 s, jitter down to half a delay (never above
the cap, so a retry comes at most 5 s after the API heals), reset on the first success."""

import pytest

from agent.kube.backoff import Backoff, parse_retry_after


def test_doubles_to_the_cap_without_jitter():
    backoff = Backoff(random=lambda: 0.0)
    delays = [backoff.next_delay() for _ in range(8)]
    assert delays == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0]


def test_jitter_takes_off_up_to_half_a_delay():
    backoff = Backoff(random=lambda: 0.999)
    first, second = backoff.next_delay(), backoff.next_delay()
    assert 0.25 < first <= 0.5 and 0.5 < second <= 1.0


def test_first_success_resets_at_once():
    backoff = Backoff(random=lambda: 0.0)
    for _ in range(5):
        backoff.next_delay()
    backoff.success()
    assert backoff.steps == 0
    assert backoff.next_delay() == 0.5


@pytest.mark.parametrize("rand", [0.0, 0.5, 0.999])
def test_never_waits_beyond_the_cap_without_retry_after(rand):
    backoff = Backoff(random=lambda: rand)
    delays = [backoff.next_delay() for _ in range(20)]
    assert max(delays) <= 5.0 and min(delays[6:]) >= 2.5


def test_retry_after_wins_over_the_computed_delay_and_still_counts_a_step():
    backoff = Backoff(random=lambda: 0.0)
    assert backoff.next_delay(retry_after=3) == 3
    assert backoff.next_delay() == 1.0


def test_retry_after_is_bounded():
    assert Backoff().next_delay(retry_after=10_000) == 120


@pytest.mark.parametrize("raw,seconds", [("3", 3.0), (" 1 ", 1.0), ("0", 0.0), ("soon", None), (None, None), ("-1", None)])
def test_parse_retry_after(raw, seconds):
    assert parse_retry_after(raw) == seconds
