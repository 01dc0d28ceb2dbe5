"""What the Reconciler tells people: a log line for each thing, and Events on the Node.

Changes written are logged one line each and recorded as the write's Event. What the agent
would not or could not do is a Warning: a clash (someone else's value kept) once while it
lasts, an item the API server refused, a key another writer keeps changing back
(``contest``) when the agent gives up on it, and ownership record repairs: entries ignored
(once per distinct text) and annotations rebuilt. Every Event goes through the
``EventRecorder``, which holds a pass's parts and posts them as one.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from agent.desired import Problem
from agent.reconcile import events as ev
from agent.reconcile.claims import CheckedClaims
from agent.reconcile.contest import Revert
from agent.reconcile.model import Change, Clash, ItemRef

log = logging.getLogger(__name__)


def readable(changes: Iterable[Change]) -> list[str]:
    """Change strings for people; the ownership record is mentioned only when it is all there is."""
    changes = list(changes)
    visible = [c for c in changes if c.kind != "record"]
    return [str(c) for c in (visible or changes)]


class Notices:
    def __init__(self, events: ev.EventRecorder, node_name: str) -> None:
        self.events = events
        self.node_name = node_name
        self._clashes: set[tuple[str, str, str, str]] = set()
        self._claim_reports: set[str] = set()

    def _warn(self, text: object, event: str, change: str = "") -> None:
        log.warning("node %s: %s", self.node_name, text, extra={"node": self.node_name, "event": event, "change": change})

    def written(self, uid: str, changes: Iterable[Change], *, status: bool, cleaning: bool) -> list[str]:
        """A write went in: each change logged, the write's Event; returns the lines."""
        changes = tuple(changes)
        lines = readable(changes)
        for line in lines:
            log.info("node %s: %s", self.node_name, line, extra={"node": self.node_name, "event": "applied", "change": line})
        if cleaning:
            reason = ev.REASON_CLEANED
        elif status:
            reason = ev.REASON_RESTORED if any(c.action == "restore" for c in changes) else ev.REASON_RESOURCES
        else:
            reason = ev.REASON_LABELS
        self.events.record(uid, reason, ev.summarize(lines))
        return lines

    def clashes(self, uid: str, clashes: Iterable[Clash]) -> None:
        """Each clash once while it lasts: one that went away and comes back is told again."""
        current = set()
        for clash in clashes:
            key = (clash.kind, clash.key, clash.wanted, clash.found)
            current.add(key)
            if key not in self._clashes:
                self._clashes.add(key)
                self._warn(clash, "clash", f"{clash.kind} {clash.key}")
                self.events.record(uid, ev.REASON_CLASH, str(clash), warning=True)
        self._clashes &= current

    def not_sent(self, problem: Problem) -> None:
        log.warning("node %s: not sent: %s", self.node_name, problem, extra={"node": self.node_name, "event": "refused"})

    def rejected(self, uid: str, refs: Iterable[ItemRef], reason: str, message: str) -> None:
        """Items the API server refused (422), or that it named none of them."""
        refs = sorted(refs)
        if not refs:
            self._warn(f"the API server rejected our patch and named no item we sent ({message}); re-reading",
                       "rejected")
        for kind, key in refs:
            text = f"{kind} {key} rejected by the API server, skipped: {reason}"
            self._warn(text, "rejected", f"{kind} {key}")
            self.events.record(uid, ev.REASON_REJECTED, text, warning=True)

    def reverts(self, uid: str, reverts: Iterable[Revert]) -> None:
        """Each revert logged; a contest given up also gets its Warning Event."""
        for revert in reverts:
            change = f"{revert.kind} {revert.key}"
            if revert.given_up:
                self._warn(revert, "contested", change)
                self.events.record(uid, ev.REASON_CONTESTED, str(revert), warning=True)
            else:
                log.info("node %s: %s", self.node_name, revert,
                         extra={"node": self.node_name, "event": "reverted", "change": change})

    def claims(self, uid: str, checked: CheckedClaims) -> None:
        """Record entries ignored (once per text) and record annotations rebuilt."""
        if checked.rejected:
            text = ("ownership record entries ignored (the agent could not have produced them): "
                    + "; ".join(checked.rejected))
            if text not in self._claim_reports:
                self._claim_reports.add(text)
                self._warn(text, "ownership-rejected")
                self.events.record(uid, ev.REASON_RECORD_REJECTED, ev.summarize([text]), warning=True)
        if checked.adopted:
            text = (f"ownership record ({', '.join(sorted(checked.rebuilt))}) missing or damaged; rebuilt from "
                    "items already on the node: " + ", ".join(checked.adopted))
            self._warn(text, "ownership-rebuilt")
            self.events.record(uid, ev.REASON_RECORD_REBUILT, ev.summarize([text]), warning=True)

    def node_recreated(self, old_uid: str, new_uid: str) -> None:
        self._warn(f"deleted and recreated (uid {old_uid} -> {new_uid}); re-applying everything", "node-recreated")
        self._clashes.clear()
