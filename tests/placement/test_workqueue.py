"""The delaying, de-duplicating work queue: a key is handed to one worker at a time, queued
once, re-queued when it changed while being worked on; waits are on a condition, not polls."""

from __future__ import annotations

import threading

from agent.placement.workqueue import WorkQueue


def test_keys_are_deduplicated_and_the_earliest_due_time_wins() -> None:
    now = [100.0]
    queue = WorkQueue(lambda: now[0])
    queue.add("a", 105.0)
    queue.add("a", 101.0)
    queue.add("b", 102.0)
    queue.add("a", 110.0)
    assert len(queue) == 2
    now[0] = 103.0
    assert queue.get() == "a" and queue.get() == "b"


def test_a_key_changed_while_active_comes_back_after_done_not_to_a_second_worker() -> None:
    queue = WorkQueue()
    queue.add("a")
    assert queue.get() == "a"
    queue.add("a")
    got: list[str | None] = []
    thread = threading.Thread(target=lambda: got.append(queue.get()))
    thread.start()
    thread.join(0.2)
    assert got == []  # not handed out while active
    queue.done("a")
    thread.join(5)
    assert got == ["a"]


def test_forget_and_stop() -> None:
    queue = WorkQueue()
    queue.add("a")
    queue.forget("a")
    assert len(queue) == 0
    queue.stop()
    assert queue.get() is None
