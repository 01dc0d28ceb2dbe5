"""Time-related behaviour against real registries: a retagged image seen after the tag TTL,
``429 Retry-After`` honoured once, a stopped or silent registry failing within the bound, and
the per-registry rate limit.

Time is read through the resolver's clock, which the tests shift forward instead of sleeping;
the one real wait is the issue's lower bound (``Retry-After: 2`` waits at least 2 s).
"""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.images import (
    RateLimitedError,
    RegistryUnavailableError,
    Resolver,
    ResolverConfig,
)
from tests.images.conftest import Layouts
from tests.images.layouts import EXPECTED
from tests.images.registries import RegistryProcess, Throttle, push


class ShiftedClock:
    """``time.monotonic`` plus an offset the test moves forward."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset


def test_retagged_image_is_seen_after_the_tag_ttl(plain_registry: RegistryProcess, layouts: Layouts) -> None:
    clock = ShiftedClock()
    resolver = Resolver(ResolverConfig(insecure_registries=frozenset({plain_registry.host}), tag_ttl=30), clock=clock)
    ref = f"{plain_registry.host}/test/retag:1"
    push(layouts.root, "pair", ref)
    assert resolver.resolve(ref).platforms == EXPECTED["pair"]
    push(layouts.root, "single", ref)  # the tag now names another image
    since = len(plain_registry.requests())
    assert resolver.resolve(ref).platforms == EXPECTED["pair"]  # within the TTL: the cached digest
    assert plain_registry.ours(since) == []
    assert resolver.resolve(ref, pull_always=True).platforms == EXPECTED["single"]  # Always: asked again
    clock.offset += 31
    assert resolver.resolve(ref).platforms == EXPECTED["single"]
    seen = Counter((r.method, r.path) for r in plain_registry.ours(since))
    assert seen[("HEAD", "/v2/test/retag/manifests/1")] == 2


@pytest.fixture
def throttle(plain_registry: RegistryProcess) -> Iterator[Throttle]:
    proxy = Throttle(plain_registry.host, retry_after="2")
    yield proxy
    proxy.stop()


def test_429_retry_after_is_waited_once(throttle: Throttle, plain_registry: RegistryProcess) -> None:
    resolver = Resolver(ResolverConfig(insecure_registries=frozenset({throttle.host})))
    throttle.limits["/v2/test/pair/manifests/1"] = 1
    since = len(plain_registry.requests())
    started = time.monotonic()
    assert resolver.resolve(f"{throttle.host}/test/pair:1").platforms == EXPECTED["pair"]
    assert time.monotonic() - started >= 2.0
    assert [s for s in throttle.seen if s[1] == "/v2/test/pair/manifests/1"] == [("HEAD", "/v2/test/pair/manifests/1", 429),
                                                                               ("HEAD", "/v2/test/pair/manifests/1", 200)]
    assert Counter(r.method for r in plain_registry.ours(since)) == {"HEAD": 1, "GET": 1}
    assert resolver.counters().requests[(throttle.host, "429")] == 1


def test_429_twice_is_an_error_quoting_the_registry(throttle: Throttle, layouts: Layouts) -> None:
    waits: list[float] = []
    resolver = Resolver(ResolverConfig(insecure_registries=frozenset({throttle.host})), sleep=waits.append)
    digest = layouts.refs["single"]["digest"]
    throttle.limits[f"/v2/test/single/manifests/{digest}"] = 2  # a GET: its body has the registry's words
    with pytest.raises(RateLimitedError) as caught:
        resolver.resolve(f"{throttle.host}/test/single@{digest}")
    assert caught.value.registry_message == "TOOMANYREQUESTS: slow down" and caught.value.transient
    assert len(waits) == 1 and 1.5 < waits[0] <= 2.0  # once, for Retry-After (this sleep does not sleep)


def test_retry_after_beyond_the_bound_fails_at_once(plain_registry: RegistryProcess) -> None:
    proxy = Throttle(plain_registry.host, retry_after="3600")
    try:
        waits: list[float] = []
        resolver = Resolver(ResolverConfig(insecure_registries=frozenset({proxy.host})), sleep=waits.append)
        proxy.limits["/v2/test/pair/manifests/1"] = 1
        with pytest.raises(RateLimitedError, match="Retry-After 3600s is beyond the time bound"):
            resolver.resolve(f"{proxy.host}/test/pair:1")
        assert waits == []
    finally:
        proxy.stop()


def test_a_stopped_registry_is_a_clear_error_within_the_bound(tmp_path: Path, layouts: Layouts) -> None:
    with RegistryProcess(tmp_path, "doomed").running() as registry:
        push(layouts.root, "pair", f"{registry.host}/test/pair:1")
        resolver = Resolver(ResolverConfig(insecure_registries=frozenset({registry.host}), total_timeout=10))
        assert resolver.resolve(f"{registry.host}/test/pair:1").platforms == EXPECTED["pair"]
    started = time.monotonic()
    with pytest.raises(RegistryUnavailableError, match="Connection refused") as caught:
        resolver.resolve(f"{registry.host}/test/pair:1", pull_always=True)
    assert time.monotonic() - started < 10 and caught.value.transient
    assert resolver.counters().requests[(registry.host, "error")] == 3  # bounded retries


def test_a_silent_registry_times_out_within_the_bound() -> None:
    with socket.socket() as listener:  # accepts connections (kernel backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        host = f"127.0.0.1:{listener.getsockname()[1]}"
        resolver = Resolver(ResolverConfig(insecure_registries=frozenset({host}), request_timeout=1, total_timeout=3))
        started = time.monotonic()
        with pytest.raises(RegistryUnavailableError, match=r"timed out|time bound"):
            resolver.resolve(f"{host}/test/pair:1")
        assert time.monotonic() - started < 3 + 5  # the bound, plus scheduling slack on a loaded machine


def test_a_caller_s_deadline_cuts_the_request_and_the_wait_for_one_in_flight() -> None:
    """Request timeout 10 s, bound 20 s, the caller's deadline 1 s away: one request, cut at
    the deadline (uncut, two 10 s requests); a second caller for the same image waiting on the
    first gives up at its own, earlier deadline."""
    import threading

    with socket.socket() as listener:  # accepts connections (kernel backlog), never answers
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        host = f"127.0.0.1:{listener.getsockname()[1]}"
        resolver = Resolver(ResolverConfig(insecure_registries=frozenset({host}), request_timeout=10, total_timeout=20))
        errors: list[Exception] = []

        def first() -> None:
            try:
                resolver.resolve(f"{host}/test/pair:1", deadline=time.monotonic() + 1.0)
            except RegistryUnavailableError as exc:
                errors.append(exc)

        leader = threading.Thread(target=first)
        leader.start()
        listener.settimeout(5)
        connection, _ = listener.accept()  # the leader's request is out: the next call is a follower
        with connection:  # held open, never answered
            with pytest.raises(RegistryUnavailableError, match="in flight") as follower:
                resolver.resolve(f"{host}/test/pair:1", deadline=time.monotonic())
            leader.join(30)
    assert follower.value.transient
    assert len(errors) == 1 and errors[0].transient and "timed out" in str(errors[0])
    assert resolver.counters().requests == {(host, "error"): 1}


def test_rate_limit_per_registry(plain_registry: RegistryProcess) -> None:
    """Six requests at 2 per second with a burst of 2: the sixth cannot start before 2 s after
    the first (a lower bound, so a loaded machine cannot break it), and the limiter is what
    made them wait."""
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        time.sleep(seconds)

    resolver = Resolver(ResolverConfig(insecure_registries=frozenset({plain_registry.host}), requests_per_second=2,
                                       burst=2), sleep=sleep)
    started = time.monotonic()
    for name in ("pair", "levels", "multi"):  # HEAD + GET each
        resolver.resolve(f"{plain_registry.host}/test/{name}:1")
    assert time.monotonic() - started >= 2.0
    assert len(waits) >= 1 and sum(resolver.counters().requests.values()) == 6
