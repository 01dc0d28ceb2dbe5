"""Keys another writer keeps changing back (``agent.reconcile.contest``), on a hand clock."""

from __future__ import annotations

from agent.desired import DesiredNodeState, Taint
from agent.reconcile.contest import Contests, ContestSettings, change_ref
from agent.reconcile.model import Change, LiveNode
from tests.reconcile.nodes import node

KEY = "accelerators/edgetpu"
REF = ("label", KEY)
SETTINGS = ContestSettings(initial=10.0, maximum=40.0, limit=5, window=600.0)
WANTED = DesiredNodeState(labels={KEY: "true"})
WRITE = Change("label", "add", KEY, None, "true")
REWRITE = Change("label", "change", KEY, "false", "true")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def live(value: str | None) -> LiveNode:
    return LiveNode.from_dict(node({KEY: value} if value is not None else {}))


def contests() -> tuple[Contests, Clock]:
    clock = Clock()
    tracker = Contests(SETTINGS, clock)
    tracker.written([WRITE])
    return tracker, clock


def revert_and_rewrite(tracker: Contests, clock: Clock) -> float:
    """Someone sets the key back; the agent plans its rewrite: the delay the rewrite waits."""
    tracker.observe(live("false"), WANTED)
    (revert,) = tracker.reverts([REWRITE])
    assert not revert.given_up
    if revert.delay > 0:
        assert tracker.skip() == {REF} and tracker.next_due() == revert.delay
        clock.now += revert.delay
    assert tracker.skip() == frozenset() and tracker.reverts([REWRITE]) == []  # the rewrite is not a revert
    tracker.written([REWRITE])
    return revert.delay


def test_the_first_revert_is_rewritten_at_once_then_the_delay_doubles_to_its_cap():
    tracker, clock = contests()
    assert [revert_and_rewrite(tracker, clock) for _ in range(4)] == [0.0, 10.0, 20.0, 40.0]


def test_the_limit_th_revert_in_the_window_leaves_the_key_as_found_and_says_why():
    tracker, clock = contests()
    for _ in range(4):
        revert_and_rewrite(tracker, clock)
    tracker.observe(live("false"), WANTED)
    (revert,) = tracker.reverts([REWRITE])
    assert revert.given_up and revert.count == 5 and revert.found == "false"
    assert "set to 'false' by someone else after the agent wrote 'true', 5 times within 600s" in str(revert)
    assert tracker.skip() == {REF} and tracker.next_due() is None and tracker.contested() == 1
    clock.now += 10_000  # given up stays given up, whatever the time
    tracker.observe(live("false"), WANTED)
    assert tracker.skip() == {REF} and tracker.reverts([REWRITE]) == []


def test_a_change_of_the_agents_own_value_ends_the_contest():
    tracker, clock = contests()
    for _ in range(4):
        revert_and_rewrite(tracker, clock)
    tracker.observe(live("false"), WANTED)
    tracker.reverts([REWRITE])
    tracker.observe(live("false"), DesiredNodeState(labels={KEY: "yes"}))
    assert tracker.skip() == frozenset() and tracker.contested() == 0
    tracker.written([Change("label", "change", KEY, "false", "yes")])
    tracker.observe(live("false"), DesiredNodeState(labels={KEY: "yes"}))
    (revert,) = tracker.reverts([Change("label", "change", KEY, "false", "yes")])
    assert revert.count == 1 and revert.delay == 0.0  # a fresh contest


def test_the_node_showing_the_agents_value_again_ends_the_contest_but_not_its_count():
    tracker, clock = contests()
    for _ in range(4):
        revert_and_rewrite(tracker, clock)
    tracker.observe(live("false"), WANTED)
    tracker.reverts([REWRITE])
    tracker.observe(live("true"), WANTED)  # the other writer stopped and put the value back
    assert tracker.skip() == frozenset() and tracker.contested() == 0
    tracker.observe(live("false"), WANTED)
    (revert,) = tracker.reverts([REWRITE])
    assert revert.given_up and revert.count == 6  # still within the window


def test_reverts_older_than_the_window_are_forgotten():
    tracker, clock = contests()
    for _ in range(4):
        revert_and_rewrite(tracker, clock)
    clock.now += SETTINGS.window
    assert revert_and_rewrite(tracker, clock) == 0.0


def test_a_removal_by_someone_else_counts_and_the_agents_own_removal_forgets_the_key():
    tracker, _clock = contests()
    tracker.observe(live(None), WANTED)
    (revert,) = tracker.reverts([Change("label", "add", KEY, None, "true")])
    assert revert.found is None and "removed by someone else" in str(revert)
    tracker.written([Change("label", "remove", KEY, "true")])
    assert tracker.reverts([REWRITE]) == []  # nothing of the agent's is there any more


def test_only_values_the_agent_wrote_and_saw_accepted_are_contested():
    tracker, _clock = contests()
    other = Change("label", "add", "example.com/x", None, "1")
    assert tracker.reverts([other]) == []  # never written by the agent
    assert tracker.reverts([Change("record", "change", "node-feature-agent.io/owned-labels", None, KEY)]) == []


def test_every_kind_of_item_is_tracked_by_its_identity():
    taint = Taint("example.com/tpu", "NoSchedule", "true")
    assert change_ref(Change("taint", "add", taint.to_string(), None, taint.to_string())) == \
        ("taint", "example.com/tpu:NoSchedule")
    assert change_ref(Change("resource", "restore", "example.com/a", "0", "2")) == ("resource", "example.com/a")
    assert change_ref(Change("annotation", "change", "example.com/n", "a", "b")) == ("annotation", "example.com/n")
    assert change_ref(Change("label", "remove", KEY, "true")) is None
