"""Keys another writer keeps changing back: rewritten with a growing delay, then left alone.

The agent rewrites what it owns when someone else changes it: a label deleted by hand comes
back at once. But another controller that owns the same key (an NFD master with a different
rule, a second labeller, an admin's loop) answers every write with its own, and the two would
make a write storm: one Node PATCH per revert, each sent to every Node watcher in the cluster.
So, per key (a label, annotation, extended resource or taint the agent owns):

* a *revert* is a change (a write the diff asks for) of exactly the value the agent last wrote there and saw
  accepted: its wish did not change, so someone else changed the Node;
* the first revert within ``window`` is rewritten at once (a one-off edit, kubelet zeroing
  extended resources when it re-registers the node); the k-th waits ``initial * 2**(k-2)``
  seconds, at most ``maximum``, during which the key is left as it is;
* the ``limit``-th revert within ``window`` ends the contest: the key stays as the other
  writer set it, and the agent says so once (a ``Revert`` with ``given_up``: a Warning Event
  naming the value found; ``nfa_contested_keys``);
* the contest ends when the agent's own desired value for the key changes (a hotplug, a rule
  edit: the key is then treated afresh), or when the Node shows the agent's value again (the
  other writer stopped; earlier reverts still count within ``window``).

The ownership record annotations are not contested here: a write that adds an item must carry
its record entry, so the record cannot be left behind.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from agent.desired import DesiredNodeState, Taint
from agent.reconcile.model import Change, ItemRef, LiveNode, taint_ref
from agent.reconcile.quantity import canonical_count

log = logging.getLogger(__name__)

CONTESTED_KINDS = ("label", "annotation", "resource", "taint")


@dataclass(frozen=True)
class ContestSettings:
    initial: float = 10.0
    maximum: float = 300.0
    limit: int = 5
    window: float = 1800.0

    def delay(self, reverts: int) -> float:
        """How long the ``reverts``-th revert within the window waits before the rewrite."""
        return 0.0 if reverts <= 1 else min(self.maximum, self.initial * 2 ** (reverts - 2))


@dataclass(frozen=True)
class Revert:
    """Someone else changed a key after the agent's accepted write; ``delay`` before the
    rewrite, or ``given_up`` after ``count`` reverts within ``window`` seconds."""

    kind: str
    key: str
    wanted: str
    found: str | None
    count: int
    window: float
    delay: float
    given_up: bool

    def __str__(self) -> str:
        what = "removed" if self.found is None else f"set to {self.found!r}"
        head = f"{self.kind} {self.key}: {what} by someone else after the agent wrote {self.wanted!r}"
        if self.given_up:
            return (f"{head}, {self.count} times within {self.window:.0f}s; the agent leaves it as it is until its "
                    "own value for it changes")
        if self.delay <= 0:
            return f"{head}; rewritten"
        return f"{head} ({self.count} times within {self.window:.0f}s); rewriting it in {self.delay:.0f}s"


@dataclass
class _Key:
    value: str  # what the agent last wrote there and saw accepted
    reverts: list[float] = field(default_factory=list)  # when each revert within the window was seen
    due: float | None = None  # a counted revert's rewrite waits until then (None: none pending)
    given_up: bool = False


def change_ref(change: Change) -> ItemRef | None:
    """The item a change writes a value to (None: a removal, or the ownership record)."""
    if change.kind not in CONTESTED_KINDS or change.action not in ("add", "change", "restore") or change.new is None:
        return None
    if change.kind == "taint":
        return taint_ref(*Taint.parse(change.new).identity)
    return (change.kind, change.key)


def wishes(desired: DesiredNodeState) -> dict[ItemRef, str]:
    """The value the agent would write for each item, in the form its changes carry."""
    wanted: dict[ItemRef, str] = {("label", k): v for k, v in desired.labels.items()}
    wanted.update({("annotation", k): str(v) for k, v in desired.annotations.items()})
    wanted.update({("resource", k): canonical_count(str(v)) or str(v) for k, v in desired.extended_resources.items()})
    wanted.update({taint_ref(*t.identity): t.to_string() for t in desired.taints})
    return wanted


def live_value(live: LiveNode, ref: ItemRef) -> str | None:
    """The Node's value for an item, in the same form (None: absent)."""
    kind, key = ref
    if kind == "label":
        return live.labels.get(key)
    if kind == "annotation":
        return live.annotations.get(key)
    if kind == "resource":
        have = (live.capacity or {}).get(key)
        return None if have is None else canonical_count(str(have)) or str(have)
    for taint in live.taint_objects():
        if taint_ref(*taint.identity) == ref:
            return taint.to_string()
    return None


class Contests:
    def __init__(self, settings: ContestSettings = ContestSettings(),
                 clock: Callable[[], float] | None = None) -> None:
        import time

        self.settings = settings
        self._clock = clock or time.monotonic
        self._keys: dict[ItemRef, _Key] = {}

    def forget(self) -> None:
        """A new Node (uid): nothing the agent wrote is there any more."""
        self._keys.clear()

    def written(self, changes: Iterable[Change]) -> None:
        """A write went in: what it set is the agent's value there, with no rewrite pending."""
        for change in changes:
            ref = change_ref(change)
            if ref is None:
                if change.kind in CONTESTED_KINDS and change.action == "remove":
                    self._keys.pop((change.kind, change.key), None)
                continue
            key = self._keys.get(ref)
            if key is None or key.value != change.new:
                self._keys[ref] = _Key(change.new or "")
            else:
                key.due = None

    def observe(self, live: LiveNode, desired: DesiredNodeState) -> None:
        """Before the diff: forget keys whose wish changed; end a contest the Node no longer shows."""
        wanted = wishes(desired)
        for ref, key in list(self._keys.items()):
            if wanted.get(ref) != key.value:
                del self._keys[ref]
            elif key.given_up and live_value(live, ref) == key.value:
                key.given_up = False
                log.info("%s %s shows the agent's value again; contesting it again", ref[0], ref[1])

    def skip(self) -> frozenset[ItemRef]:
        """Items to leave as they are now: a rewrite still waiting, or a contest given up."""
        now = self._clock()
        return frozenset(ref for ref, key in self._keys.items()
                         if key.given_up or (key.due is not None and key.due > now))

    def reverts(self, changes: Iterable[Change]) -> list[Revert]:
        """Count the changes that redo an accepted write, each once."""
        now = self._clock()
        counted: list[Revert] = []
        for change in changes:
            ref = change_ref(change)
            key = self._keys.get(ref) if ref is not None else None
            if ref is None or key is None or key.value != change.new or key.due is not None or key.given_up:
                continue
            key.reverts = [t for t in key.reverts if now - t < self.settings.window] + [now]
            count = len(key.reverts)
            key.given_up = count >= self.settings.limit
            delay = 0.0 if key.given_up else self.settings.delay(count)
            key.due = None if key.given_up else now + delay
            counted.append(Revert(ref[0], ref[1], key.value, change.old, count, self.settings.window, delay,
                                  key.given_up))
        return counted

    def next_due(self) -> float | None:
        """Seconds until the earliest waiting rewrite (None: none waits)."""
        now = self._clock()
        waiting = [key.due - now for key in self._keys.values() if key.due is not None and key.due > now
                   and not key.given_up]
        return min(waiting) if waiting else None

    def contested(self) -> int:
        """Keys the agent currently leaves to another writer."""
        return sum(1 for key in self._keys.values() if key.given_up)

