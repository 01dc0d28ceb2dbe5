"""Kubernetes Events on our Node, so ``kubectl describe node`` says what the agent did and why.

At most one Event per pass (not per label, not per write): everything a pass has to say —
its label write, its ``status.capacity`` write, Warnings for clashes, refused items or a
degraded source — is held until the pass's writes are done and then posted as one Event
(``aggregate``): a hotplug costs two PATCHes and one POST, not two of each. The aggregate
keeps the most telling reason (the first Warning's, else the first change's) and its type
(Warning if any part is one); its message lists every part as ``Reason: text``, so
``kubectl describe node`` still shows each; its ``firstTimestamp`` is its oldest part's.
Events never fail or hold up the reconcile.

Two kinds of Warning arise outside a pass, and they join a pass's one Event too:

* judged in another thread (a rejected rules or ``--config`` edit, seen by its watcher):
  ``hold_for_next_pass`` keeps it for the next pass, and the caller queues one;
* kept after a failed POST: a Normal Event that cannot be posted is logged and dropped; the
  Warning parts of an Event that could not be posted wait in a small backlog, and the next
  successful pass carries them all in its one Event (``flush``), since each may be the only
  trace an operator sees in ``kubectl describe node`` of something the agent refused while
  the API server was flaky. After an outage that is still one POST, not one per
  Warning kept.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from agent.kube import events as kube_events
from agent.kube.events import MAX_MESSAGE, NODE_EVENT_NAMESPACE, EventPoster, Involved, Reporter
from agent.reconcile.node_api import NodeApi

log = logging.getLogger(__name__)

COMPONENT = "node-feature-agent"
EVENT_NAMESPACE = NODE_EVENT_NAMESPACE
"""Node events live in ``default`` (as kubelet's); ``kubectl describe node`` searches all namespaces."""
MAX_BACKLOG = 16
"""Warnings kept for a later retry; the oldest goes first when more fail (logged)."""

REASON_LABELS = "NodeFeaturesUpdated"
REASON_RESOURCES = "ExtendedResourcesUpdated"
REASON_RESTORED = "ExtendedResourcesRestored"
REASON_CLASH = "ForeignValueKept"
REASON_REJECTED = "ChangeRejected"
REASON_CLEANED = "NodeFeaturesRemoved"
REASON_RECORD_REJECTED = "OwnershipRecordRejected"
REASON_RECORD_REBUILT = "OwnershipRecordRebuilt"
REASON_READ_FAILED = "DiscoveryReadFailed"
REASON_ANNOTATIONS_OVER_BUDGET = "AnnotationBudgetExceeded"
"""A host file could not be read: what it decides is held as the Node has it."""
REASON_CONTESTED = "LabelContested"
"""Another writer changed a key back after each of the agent's writes; the agent stopped (``contest``)."""


def summarize(changes: Iterable[str], limit: int = MAX_MESSAGE) -> str:
    """Changes joined by ``; `` and cut at ``limit`` with a count of what was left out."""
    items = list(changes)
    text = ""
    for index, item in enumerate(items):
        candidate = f"{text}; {item}" if text else item
        if len(candidate) > limit - 20:
            return f"{text}; ... and {len(items) - index} more"
        text = candidate
    return text


def event_body(node_name: str, node_uid: str, reason: str, message: str, event_type: str,
               now: _dt.datetime) -> dict[str, Any]:
    """A core/v1 Event whose involvedObject is the Node (what ``describe node`` looks up)."""
    return kube_events.event_body(Involved("Node", node_name, uid=node_uid), reason, message, event_type,
                                  Reporter(COMPONENT, node_name, host=node_name), now)


def aggregate(bodies: list[dict[str, Any]], limit: int = MAX_MESSAGE) -> dict[str, Any]:
    """Several Event bodies of one pass -> one. Warnings first, each group in the order
    recorded; reason and type from the first; message ``Reason: text`` per part, joined by
    `` | ``, each part cut to a fair share of ``limit`` (short parts leave their room to
    long ones). A single body is returned unchanged."""
    if len(bodies) == 1:
        return bodies[0]
    parts = [b for b in bodies if b["type"] == "Warning"] + [b for b in bodies if b["type"] != "Warning"]
    texts = [f"{b['reason']}: {b['message']}" for b in parts]
    budget = limit - len(" | ") * (len(texts) - 1)
    shares = {}
    remaining = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    while remaining:
        share = budget // len(remaining)
        index = remaining.pop(0)
        shares[index] = min(len(texts[index]), max(0, share))
        budget -= shares[index]
    cut = [t if len(t) <= shares[i] else t[:max(0, shares[i] - 3)] + "..." for i, t in enumerate(texts)]
    first = parts[0]
    body = {**first, "message": " | ".join(cut)[:limit],
            "firstTimestamp": min(b["firstTimestamp"] for b in parts),
            "lastTimestamp": max(b["lastTimestamp"] for b in parts)}
    uid = next((b["involvedObject"].get("uid") for b in parts if b["involvedObject"].get("uid")), "")
    body["involvedObject"] = {**first["involvedObject"], "uid": uid}
    return body


class EventRecorder:
    """Posts Events for one node; disabled recorders only log."""

    def __init__(self, api: NodeApi, node_name: str, *, enabled: bool = True,
                 now: Callable[[], _dt.datetime] = lambda: _dt.datetime.now(_dt.UTC)) -> None:
        self.api = api
        self.node_name = node_name
        self.enabled = enabled
        self._now = now
        self._poster = EventPoster(api.create_event, node=node_name)
        self.backlog: collections.deque[dict[str, Any]] = collections.deque()
        self._local = threading.local()  # Events held by this thread's pass (``deferred``)
        self._next_pass: list[dict[str, Any]] = []  # from other threads, for the next pass (hold_for_next_pass)
        self._next_pass_lock = threading.Lock()

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold this thread's Events until the (outermost) block ends, then post them as one
        (``aggregate``). A pass's two writes (labels, then status.capacity) must go out back to
        back: on a slow API server an Event POST between them would keep the Node half-written
        for the whole POST. Nested blocks join the outer one, so the run loop
        can hold a whole pass (discovery's Warnings included) around the Reconciler's own."""
        if getattr(self._local, "held", None) is not None:
            yield
            return
        with self._next_pass_lock:
            waiting, self._next_pass = self._next_pass, []
        self._local.held = [(body, body["type"] == "Warning") for body in waiting]
        try:
            yield
        finally:
            self.release()
            self._local.held = None

    def release(self) -> None:
        """Post what this thread's block holds so far, as one Event, and keep holding (the run
        loop releases right after the writes, so the Event precedes the pass's bookkeeping)."""
        held = getattr(self._local, "held", None)
        if held:
            parts = [b for b, _w in held]
            held.clear()
            if not self._post(aggregate(parts)):
                self._keep([b for b in parts if b["type"] == "Warning"])

    def hold_for_next_pass(self, node_uid: str, reason: str, message: str, *, warning: bool = False) -> bool:
        """For Warnings judged outside the worker's pass (a watcher thread): held for the next
        pass's one Event. True when the caller must queue a pass to carry it; False when this
        thread's own pass holds it already (or Events are off)."""
        if not self.enabled or not message:
            return False
        body = self._body(node_uid, reason, message, warning)
        if self._held_by_this_pass(body, warning):
            return False
        with self._next_pass_lock:
            self._next_pass.append(body)
        return True

    def record(self, node_uid: str, reason: str, message: str, *, warning: bool = False) -> bool:
        """Post an Event (or hold it, inside ``deferred``); False if it could not be posted now."""
        if not self.enabled or not message:
            return False
        body = self._body(node_uid, reason, message, warning)
        if self._held_by_this_pass(body, warning):
            return True
        return self._send(body, warning)

    def _body(self, node_uid: str, reason: str, message: str, warning: bool) -> dict[str, Any]:
        return event_body(self.node_name, node_uid, reason, message, "Warning" if warning else "Normal", self._now())

    def _held_by_this_pass(self, body: dict[str, Any], warning: bool) -> bool:
        """Inside ``deferred`` on this thread: the Event joins the pass's one Event (True)."""
        held = getattr(self._local, "held", None)
        if held is None:
            return False
        held.append((body, warning))
        return True

    def _send(self, body: dict[str, Any], warning: bool) -> bool:
        if self._post(body):
            return True
        if warning:
            self._keep([body])
        return False

    def _keep(self, bodies: list[dict[str, Any]]) -> None:
        """Warnings whose POST failed, into the backlog after those already there (oldest
        dropped, with a log line, beyond ``MAX_BACKLOG``)."""
        self.backlog.extend(bodies)
        while len(self.backlog) > MAX_BACKLOG:
            dropped = self.backlog.popleft()
            log.warning("Event backlog full: dropped Warning %s on node %s", dropped["reason"], self.node_name,
                        extra={"node": self.node_name, "event": "event-failed"})

    def flush(self, node_uid: str = "") -> int:
        """The Warnings that failed earlier join this thread's pass's one Event (inside
        ``deferred``), else go out now as one Event; the aggregate's ``firstTimestamp`` says
        when the oldest happened. Returns how many were handed on (0 if the POST failed again:
        they stay in the backlog)."""
        if not self.enabled or not self.backlog:
            return 0
        parts = list(self.backlog)
        self.backlog.clear()
        for body in parts:
            if node_uid and not body["involvedObject"]["uid"]:
                body["involvedObject"]["uid"] = node_uid
        held = getattr(self._local, "held", None)
        if held is not None:
            held.extend((body, True) for body in parts)
            return len(parts)
        if self._post(aggregate(parts)):
            return len(parts)
        self._keep(parts)
        return 0

    @property
    def failures(self) -> int:
        return self._poster.failures

    def _post(self, body: dict[str, Any]) -> bool:
        return self._poster.post(body, on_failure="kept to post again after the next successful pass"
                                 if body["type"] == "Warning" else "the change itself was applied")
