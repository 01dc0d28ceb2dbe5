"""The slice publisher: this pass's devices -> the node's ResourceSlices, in its own thread.

``publish(resources)`` takes the same ``Mapping[resource, ResourceDevices]`` the device plugin
and the kubelet DRA plugin take, keeps only the latest, and returns at once; the thread syncs
it (``SliceWriter.sync``) against the node's slices as a watch holds them
(``agent.dra.watched``, the reflector every watch of the agent runs on). A sync with nothing
changed makes no request; so a discovery pass costs none, and neither does a restart that finds
the slices as they were.

The thread syncs on each publish and on each change the watch delivers: a slice of ours changed
or deleted by someone else is put back at once, a write waiting for the watch goes on when the
watch has caught up. Before the first LIST, or while the watch cannot be read, nothing is
written (``held``); past the watch's bounds (``agent.dra.watched.SliceBounds``) neither
(``bounded``) until a LIST fits again. A write that failed is retried after a backoff (1 s doubling to 30 s); what
the server holds stays as it is meanwhile. The writer needs nothing of the kubelet plugin:
slices are published whether or not it runs. Shared devices go in the form the server keeps
(``agent.dra.sharing``).

Another writer on the same slices (``Contest``): putting back content someone else changed is
a *repair*. The ``limit``-th repair within ``window`` seconds starts a hold: the slices are left
as the other writer set them for ``hold`` seconds (doubling on each hold of one contest, up to
``max_hold``), then one repair tells whether it still fights; ``on_contested`` is told when a
contest starts (a Warning Event, ``nfa_dra_slices_contested``) and ends (no repair needed for
``window`` seconds, judged at the next sync). A change of the devices themselves is written
whatever the contest.

Attributes a device could not carry (``Published.dropped``: a value past 64 bytes, past 32
attributes + capacities) are logged and told to ``on_dropped`` once per change of that device.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.deviceplugin.model import ResourceDevices
from agent.dra.sharing import SharingProbe
from agent.dra.slices import Node, NotYet, Published, ReadFailed, Refused, SliceWriter, dropped_text, published_devices
from agent.dra.watched import SETTINGS, Bounded, SliceBounds, WatchedSlices
from agent.kube.backoff import Backoff, BackoffSettings
from agent.kube.reflector import ReflectorSettings

log = logging.getLogger(__name__)


#: a failed sync is retried after 1 s doubling to 30 s (no jitter: one agent, its own slices)
RETRY = BackoffSettings(initial=1.0, maximum=30.0, jitter=0.0)


@dataclass(frozen=True)
class ContestSettings:
    limit: int = 5
    """Repairs within ``window`` that make a contest."""
    window: float = 60.0
    hold: float = 60.0
    """How long the first hold of a contest leaves the slices as the other writer set them."""
    max_hold: float = 900.0


class Contest:
    """Whether a repair may be written now (``allow``), and whether a contest is on."""

    def __init__(self, settings: ContestSettings, on_contested: Callable[[str | None], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.on_contested = on_contested
        self.clock = clock
        self.repairs: collections.deque[float] = collections.deque()
        self.until: float | None = None  # the hold in force ends then
        self.contested = False
        self._hold = settings.hold
        self._probing = False

    def allow(self) -> bool:
        """A repair is due: True to write it, False to leave the slices as they are (a hold)."""
        now = self.clock()
        if self.until is not None:
            if now < self.until:
                return False
            self.until = None  # the hold is over: one repair tells whether the other writer stopped
            self._probing = True
            self.repairs.clear()
            self.repairs.append(now)
            return True
        self._forget(now)
        if (self._probing and self.repairs) or len(self.repairs) >= self.settings.limit:
            self._start_hold(now)
            return False
        self.repairs.append(now)
        return True

    def wait(self) -> float | None:
        """Seconds until the hold in force ends (None: no hold)."""
        return None if self.until is None else max(0.0, self.until - self.clock())

    def settle(self) -> None:
        """No repair is due: the contest ends once none was needed for ``window`` seconds."""
        now = self.clock()
        if self.until is None:
            self._forget(now)
            if not self.repairs and self.contested:
                self.contested, self._probing, self._hold = False, False, self.settings.hold
                self.on_contested(None)

    def _forget(self, now: float) -> None:
        while self.repairs and now - self.repairs[0] > self.settings.window:
            self.repairs.popleft()
        if not self.repairs:
            self._probing = False

    def _start_hold(self, now: float) -> None:
        self.until = now + self._hold
        why = (f"another writer changed this node's ResourceSlices back {self.settings.limit} times within "
               f"{self.settings.window:.0f} s; they are left as it set them for {self._hold:.0f} s, then put back "
               "once more (deploy/dra.md \"Another writer\")")
        self._hold = min(self.settings.max_hold, self._hold * 2)
        log.warning("%s", why, extra={"event": "dra-contested"})  # once per hold: at most one a minute
        if not self.contested:
            self.contested = True
            self.on_contested(why)


class SlicePublisher:
    def __init__(self, api_client: Any, node: Node, version: str, *, taints: bool,
                 on_write: Callable[[str], None] = lambda _op: None,
                 on_sync: Callable[[str], None] = lambda _result: None,
                 on_contested: Callable[[str | None], None] = lambda _why: None,
                 on_dropped: Callable[[str, Mapping[str, str]], None] = lambda _device, _lost: None,
                 backoff: BackoffSettings = RETRY, contest: ContestSettings = ContestSettings(),
                 watch_settings: ReflectorSettings = SETTINGS, bounds: SliceBounds = SliceBounds(),  # noqa: B008
                 on_ignored: Callable[[str, str], None] | None = None,
                 on_bounded: Callable[[str | None], None] = lambda _why: None) -> None:
        self.watched = WatchedSlices(api_client, node.name, version, on_change=self._watched_change,
                                     settings=watch_settings, bounds=bounds, on_ignored=on_ignored,
                                     on_bounded=on_bounded)
        self.writer = SliceWriter(api_client, node, version, self.watched, on_write=on_write)
        self.sharing = SharingProbe(self.writer._call, node, version)
        self.taints = taints
        self.on_sync = on_sync
        self.retry = Backoff(backoff)
        self.contest = Contest(contest, on_contested)
        self.on_dropped = on_dropped
        self._dropped: Mapping[str, Mapping[str, str]] = {}  # as last reported
        self.published: Published | None = None  # the last devices handed over (for explain, metrics)
        self.synced = threading.Event()  # set after a sync of the latest publish succeeded
        self._pending: Mapping[str, ResourceDevices] | None = None
        self._confirmed: tuple[dict[str, Any], ...] | None = None  # the devices last seen on the server
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dra-slices", daemon=True)

    def start(self) -> SlicePublisher:
        self.watched.start()
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive() and self.watched.alive()

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        self._wake.set()
        self.watched.stop(timeout)
        if self._thread.is_alive():
            self._thread.join(timeout)

    def publish(self, resources: Mapping[str, ResourceDevices]) -> None:
        """Hand over this pass's devices (never waits on the API server)."""
        with self._lock:
            self._pending = dict(resources)
            self.synced.clear()
        self._wake.set()

    def _watched_change(self, foreign: bool) -> None:
        if foreign:  # debug: a writer fighting over the slices would flood the log (the contest warns)
            log.debug("a ResourceSlice of this node was changed by another writer; comparing",
                     extra={"node": self.writer.node.name, "event": "dra-foreign-change"})
        self._wake.set()

    def _run(self) -> None:
        delay: float | None = None
        latest: Mapping[str, ResourceDevices] | None = None
        while not self._stop.is_set():
            self._wake.wait(delay)
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                if self._pending is not None:
                    latest, self._pending = self._pending, None
            if latest is None:
                continue
            delay = self._sync(latest)

    def _devices(self, resources: Mapping[str, ResourceDevices]) -> Published:
        """This sync's devices: shared ones once where the server keeps consumable capacity (asked
        once; the watched slices must still show it kept), else as replicas."""
        consumable = self.sharing.consumable(resources)
        if consumable and not self.sharing.verify(self.watched.state()):
            consumable = False
        published = published_devices(resources, taints=self.taints, consumable=consumable)
        self.published = published
        self._report_dropped(published)
        return published

    def _report_dropped(self, published: Published) -> None:
        """Attributes left out of a device: told once per device change, not per pass."""
        for device, lost in sorted(published.dropped.items()):
            if self._dropped.get(device) != lost:
                log.warning("device %s published without attribute(s) %s", device, dropped_text(lost),
                            extra={"node": self.writer.node.name, "event": "dra-attributes-dropped"})
                self.on_dropped(device, lost)
        self._dropped = published.dropped

    def _sync(self, resources: Mapping[str, ResourceDevices]) -> float | None:
        """One sync; returns when to try again unwoken (None: at the next publish or watch
        change). Only a failed read or write moves the retry backoff on; a sync that
        succeeds resets it."""
        try:
            published = self._devices(resources)
            if not self.writer.differs(published.devices):
                self.contest.settle()
                self._done(published, "unchanged")
                return None
            if published.devices == self._confirmed and not self.contest.allow():
                self.on_sync("contested")
                return self.contest.wait()
            self.writer.sync(published.devices)
        except NotYet:
            return self.watched.wait_hint()  # the watch's next delivery wakes the thread
        except Refused as exc:
            log.info("%s", exc, extra={"node": self.writer.node.name, "event": "dra-conflict"})
            self.on_sync("conflict")
            return self.watched.wait_hint()  # the watch's delivery of the newer version wakes it
        except Bounded:
            self.on_sync("bounded")  # told once per episode (on_bounded); the watch's recovery wakes the thread
            return None
        except ReadFailed as exc:
            log.warning("ResourceSlices not read (%s); they are held as they are", exc,
                        extra={"node": self.writer.node.name, "event": "dra-held"})
            self.on_sync("held")
            return self.retry.next_delay()  # the watch's recovery wakes the thread sooner; a failed probe needs the timer
        except Exception as exc:  # noqa: BLE001 - a refused write, a lost connection: retry
            log.warning("writing ResourceSlices failed (%s); retrying", exc,
                        extra={"node": self.writer.node.name, "event": "dra-error"})
            self.on_sync("error")
            return self.retry.next_delay()
        self._done(published, "written")
        return None

    def _done(self, published: Published, result: str) -> None:
        self.retry.reset()
        self._confirmed = published.devices
        self.on_sync(result)
        with self._lock:
            if self._pending is None:
                self.synced.set()
