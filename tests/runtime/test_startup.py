"""Starting up: the jittered first request (a rollout's agents spread out) and a Node that is
not registered yet (labelled as soon as it appears, not after the error backoff)."""

from __future__ import annotations

import random

import pytest

from agent.desired import Taint
from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime import queue as q
from agent.runtime.agent import Agent, Settings
from tests.conftest import LABELS_DIR
from tests.runtime.helpers import CoralHost, has_edgetpu, wait_for
from tests.support.apiserver import FakeApiServer

NODE = "late-1"
TAINT = {"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}
#: an error backoff far longer than any wait below: only an event-driven retry can label in time
SLOW_BACKOFF = BackoffSettings(initial=300.0, maximum=300.0)


class FixedRandom(random.Random):
    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        yield srv


def make_agent(tmp_path, server, rng=None, **overrides):
    host = CoralHost(tmp_path)
    settings = Settings(node_name=NODE, rules_dirs=[str(LABELS_DIR)], host_root=str(host.root), metrics_port=None,
                        udev_mode="off", watch_rules=False, watch_timeout=30, backoff=SLOW_BACKOFF,
                        startup_taints=(Taint.parse("node-feature-agent.io/not-ready:NoSchedule"),), **overrides)
    return Agent(settings, NodeApi.from_configuration(server.client_configuration()), rng=rng)


def test_a_node_registering_after_the_agent_started_is_labelled_at_once(tmp_path, server):
    agent = make_agent(tmp_path, server).start()
    try:
        wait_for(lambda: agent.last_outcome is not None, what="first pass")
        assert agent.last_outcome.node_missing and not agent.ready.is_set()
        # the retry now waits out a 300 s backoff (jitter takes off at most half): only the
        # node's appearing can label it within the wait below
        server.add_node(NODE, register_taints=[TAINT])
        wait_for(agent.ready.is_set, what="the node labelled after it registered")
        node = server.node(NODE)
        assert has_edgetpu(node) == (True, True)
        assert TAINT["key"] not in [t["key"] for t in node["spec"].get("taints") or []]
    finally:
        assert agent.stop(timeout=5)


def test_a_wrong_node_name_keeps_its_backoff(tmp_path, server):
    """Only the node appearing cuts the wait short: other nodes' events change nothing."""
    agent = make_agent(tmp_path, server).start()
    try:
        wait_for(lambda: agent.last_outcome is not None, what="first pass")
        server.add_node("someone-else")
        wait_for(lambda: agent.node_watcher.watches >= 1, what="the watch")
        assert agent.passes == 1 and agent.last_outcome.node_missing
        assert agent.queue.pending() is None  # nothing queued: the 300 s backoff stands
    finally:
        assert agent.stop(timeout=5)


def test_startup_jitter_delays_the_first_request(tmp_path, server):
    server.add_node(NODE)
    agent = make_agent(tmp_path, server, startup_jitter=60.0, rng=FixedRandom(0.5))
    agent.start()
    try:
        assert agent.node_watcher.initial_delay == 30.0
        pending = agent.queue.pending()
        assert pending is not None and q.STARTUP in pending.kinds
        assert pending.due - pending.created == pytest.approx(30.0, abs=1.0)
        assert server.requests == []  # neither the LIST nor the GET has gone out
    finally:
        assert agent.stop(timeout=5)  # the wait is interruptible: stopping does not take 30 s
    assert server.requests == []


def test_no_jitter_starts_at_once(tmp_path, server):
    server.add_node(NODE)
    agent = make_agent(tmp_path, server, startup_jitter=0.0).start()
    try:
        assert agent.node_watcher.initial_delay == 0.0
        wait_for(agent.ready.is_set, what="first reconcile")
    finally:
        assert agent.stop(timeout=5)
