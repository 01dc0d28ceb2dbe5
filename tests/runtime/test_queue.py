"""TriggerQueue: coalescing, debounce windows, blocking get, stop. A fake clock drives time."""

import threading

import pytest

from agent.runtime.queue import HOTPLUG, NODE, RESYNC, RETRY, RULES, STARTUP, TriggerQueue


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_triggers_coalesce_into_one_batch():
    clock = Clock()
    q = TriggerQueue(clock=clock)
    q.put(STARTUP, sources=None)
    q.put(RULES)
    q.put(NODE, node={"metadata": {"resourceVersion": "1"}})
    q.put(NODE, node={"metadata": {"resourceVersion": "2"}})
    batch = q.get(timeout=0)
    assert batch.kinds == {STARTUP, RULES, NODE}
    assert batch.sources is None  # rediscover everything
    assert batch.node["metadata"]["resourceVersion"] == "2"  # newest node wins
    assert q.get(timeout=0) is None


def test_hotplug_sources_union_and_full_discovery_dominates():
    clock = Clock()
    q = TriggerQueue(debounce=0.0, debounce_max=0.0, clock=clock)
    q.put(HOTPLUG, sources={"usb"})
    q.put(HOTPLUG, sources={"pci", "network"})
    assert q.get(timeout=0).sources == {"usb", "pci", "network"}
    q.put(HOTPLUG, sources={"usb"})
    q.put(RESYNC, sources=None)
    q.put(HOTPLUG, sources={"pci"})
    assert q.get(timeout=0).sources is None


def test_debounce_is_trailing_but_capped():
    clock = Clock()
    q = TriggerQueue(debounce=0.2, debounce_max=0.5, clock=clock)
    q.put(HOTPLUG, sources={"usb"})
    assert q.get(timeout=0) is None  # not due yet
    clock.now += 0.15
    q.put(HOTPLUG, sources={"usb"})  # burst continues: due moves to +0.35
    clock.now += 0.1
    assert q.get(timeout=0) is None
    clock.now += 0.11
    assert q.get(timeout=0).kinds == {HOTPLUG}
    # a never-ending burst is flushed debounce_max after its first event
    q.put(HOTPLUG, sources={"usb"})
    for _ in range(10):
        clock.now += 0.1
        q.put(HOTPLUG, sources={"usb"})
        if q.pending().due <= clock.now:
            break
    assert q.pending().due == pytest.approx(q.pending().burst_started + 0.5)


def test_retry_delay_holds_the_batch():
    clock = Clock()
    q = TriggerQueue(clock=clock)
    q.put(RETRY, delay=3.0)
    q.put(NODE)  # joins the batch, does not jump the backoff
    clock.now += 2.9
    assert q.get(timeout=0) is None
    clock.now += 0.2
    assert q.get(timeout=0).kinds == {RETRY, NODE}


def test_get_blocks_until_a_trigger_arrives_then_stop_wakes_it():
    q = TriggerQueue(debounce=0.01, debounce_max=0.05)
    got = []
    worker = threading.Thread(target=lambda: got.append(q.get()), daemon=True)
    worker.start()
    worker.join(0.05)
    assert worker.is_alive()  # blocked: nothing to do
    q.put(HOTPLUG, sources={"usb"})
    worker.join(10)
    assert not worker.is_alive() and got[0].sources == {"usb"}
    stopper = threading.Thread(target=lambda: got.append(q.get()), daemon=True)
    stopper.start()
    q.stop()
    stopper.join(10)
    assert not stopper.is_alive() and got[1] is None
    assert q.put(NODE) is False


def test_unknown_kind_and_bad_settings_refused():
    with pytest.raises(ValueError):
        TriggerQueue().put("bogus")
    with pytest.raises(ValueError):
        TriggerQueue(debounce=1.0, debounce_max=0.5)


def test_an_event_that_ends_its_burst_settles_it_without_the_quiet_gap():
    clock = Clock()
    q = TriggerQueue(debounce=0.04, debounce_max=0.25, settled_gap=0.005, clock=clock)
    q.put(HOTPLUG, sources={"usb"})  # usb_device add
    clock.now += 0.002
    q.put(HOTPLUG, sources={"usb"})  # interface add
    assert q.pending().due == pytest.approx(clock.now + 0.04)
    clock.now += 0.002
    q.put(HOTPLUG, sources={"usb"}, settled=True)  # usb_device bind: the burst is complete
    assert q.pending().due == pytest.approx(clock.now + 0.005)
    clock.now += 0.001
    q.put(HOTPLUG, sources={"network"})  # a straggler re-opens the quiet gap
    assert q.pending().due == pytest.approx(clock.now + 0.04)
    clock.now += 0.04
    assert q.get(timeout=0).sources == {"usb", "network"}


def test_a_hotplug_never_shortens_another_parts_delay_nor_is_stretched_by_it():
    clock = Clock()
    q = TriggerQueue(debounce=0.04, debounce_max=0.25, clock=clock)
    q.put(STARTUP, sources=None, delay=2.0)  # startup jitter
    q.put(HOTPLUG, sources={"usb"}, settled=True)
    assert q.pending().due == pytest.approx(clock.now + 2.0)
    clock.now += 2.0
    assert q.get(timeout=0).kinds == {STARTUP, HOTPLUG}
    q.put(HOTPLUG, sources={"usb"})
    clock.now += 0.01
    q.put(NODE)  # a Node delivery inside the gap does not move the settle time
    assert q.pending().due == pytest.approx(clock.now + 0.03)


def test_expedite_makes_the_batch_due_at_once():
    clock = Clock()
    q = TriggerQueue(clock=clock)
    q.put(RETRY, delay=5.0)
    q.put(NODE, expedite=True)
    assert q.get(timeout=0).kinds == {RETRY, NODE}
