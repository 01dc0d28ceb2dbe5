"""Take the agent's own Node to the desired state with the fewest writes, never raising.

One ``reconcile`` call: read the Node (or use the one the watch just delivered), compute the
desired state from the *foreign* labels (live labels minus ours), diff, send one write, recompute from
the server's answer, repeat until nothing is left (normally 0, 1 or 2 writes). Failures become
a ``ReconcileOutcome`` with ``error`` set and a suggested ``retry_after``; the event loop
decides when to call again.

``startup_taints``: the one sanctioned exception to "only touch what we own". An operator may
register nodes with a taint (``--register-with-taints``) that keeps feature-dependent pods off
until the agent has labelled the node; those ``(key, effect)`` taints are removed once the
first reconcile on that node (uid) has converged. They are configured explicitly; nothing
else foreign is ever removed.
"""

from __future__ import annotations

import logging
import random as _random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agent.desired import DesiredNodeState, Problem, Taint
from agent.k8s_validation import ANNOTATIONS_TOTAL_MAX
from agent.kube.backoff import Backoff, BackoffSettings
from agent.reconcile import events as ev
from agent.reconcile.claims import (
    ClaimPolicy,
    adopt_matching,
    check_claims,
    parts_to_rebuild,
    unattributed_labels,
)
from agent.reconcile.contest import Contests, ContestSettings
from agent.reconcile.diff import annotations_after, diff_node
from agent.reconcile.model import ItemRef, LiveNode, NodeChanges, wanted_items
from agent.reconcile.node_api import (
    Conflict,
    Forbidden,
    Invalid,
    NodeApi,
    NodeApiError,
    NodeNotFound,
    Transient,
    call_with_retries,
    node_answer_problem,
)
from agent.reconcile.notices import Notices, readable
from agent.reconcile.outcome import CleanOutcome, ReconcileOutcome
from agent.reconcile.ownership import Ownership, parse_ownership
from agent.reconcile.rejections import RefusedItems, rejected_items

log = logging.getLogger(__name__)

#: the desired state given the Node's foreign labels (the rules may read them)
DesiredStateFunction = Callable[[Mapping[str, str]], DesiredNodeState]


def node_as_dict(live_node: Any) -> dict[str, Any]:
    """A Node as the API's JSON dict: watch events may carry a ``V1Node`` model, whose
    ``to_dict()`` would give snake_case keys; ``sanitize_for_serialization`` gives the wire form."""
    if isinstance(live_node, Mapping):
        return dict(live_node)
    from kubernetes.client import ApiClient

    node: dict[str, Any] = ApiClient().sanitize_for_serialization(live_node)  # type: ignore[no-untyped-call]
    return node


def _nothing_desired(_labels: Mapping[str, str]) -> DesiredNodeState:
    return DesiredNodeState()


def _failure_text(err: NodeApiError, node_name: str, attempts: int) -> str:
    if isinstance(err, Forbidden):
        return (f"forbidden: the agent's ServiceAccount may not do this ({err.message}); check the ClusterRole "
                "(nodes: get/list/watch/patch, nodes/status: patch, events: create in default) and, for a 403 "
                "naming node-feature-agent-own-node, the admission policy (deploy/install.md, \"Least privilege\")")
    if isinstance(err, NodeNotFound):
        return f"node {node_name} not found (deleted, not registered yet, or a wrong --node-name); waiting"
    if isinstance(err, Transient):
        return f"API server unreachable or failing after {attempts} attempts: {err}"
    return str(err)


@dataclass
class _Pass:
    """What one ``reconcile``/``clean`` call has done so far."""

    cleaning: bool
    writes: int = 0
    applied: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    conflicts: int = 0
    stale_rereads: int = 0
    remove_startup: bool = False
    desired: DesiredNodeState | None = None  # None until the Node was read and its desired state computed

    def note(self, problem: Problem) -> None:
        if problem not in self.problems:
            self.problems.append(problem)


class Reconciler:
    """Keeps one Node in step; remembers clashes reported, items the server refused, the node uid."""

    def __init__(
        self,
        api: NodeApi,
        node_name: str,
        *,
        emit_events: bool = True,
        startup_taints: Iterable[Taint | tuple[str, str]] = (),
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        random: Callable[[], float] = _random.random,
        backoff: BackoffSettings = BackoffSettings(),  # noqa: B008 - frozen, shared safely
        max_attempts: int = 5,
        max_writes: int = 8,
        max_conflicts: int = 10,
        claims: ClaimPolicy = ClaimPolicy(),  # noqa: B008 - frozen, shared safely
        contests: ContestSettings = ContestSettings(),  # noqa: B008 - frozen, shared safely
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.claims = claims
        self.startup_taints = frozenset(t.identity if isinstance(t, Taint) else (t[0], t[1]) for t in startup_taints)
        self.backoff = Backoff(backoff, random=random)
        self.events = ev.EventRecorder(api, node_name, enabled=emit_events)
        self.notices = Notices(self.events, node_name)
        self._sleep = sleep
        self.max_attempts, self.max_writes, self.max_conflicts = max_attempts, max_writes, max_conflicts
        self._node_uid = ""
        self._vouched_taints: frozenset[tuple[str, str]] = frozenset()  # honoured in the last pass (claims)
        self._startup_done_uid = ""
        self._refused = RefusedItems()
        self._contests = Contests(contests, clock)
        self._cached: tuple[dict[str, str], DesiredNodeState] | None = None
        self._cached_function: DesiredStateFunction | None = None
        self._partial: tuple[str, ...] = ()
        self._partial_since: float | None = None
        self._clock = clock
        self._annotations_over = False  # the last changes would have passed the annotation budget

    # -- public ---------------------------------------------------------------------------
    @property
    def node_uid(self) -> str:
        """The uid of the Node last seen (for Events about it); "" before the first read."""
        return self._node_uid

    @property
    def contested(self) -> int:
        """Keys the agent leaves to another writer that reverted its writes (``contest``)."""
        return self._contests.contested()

    @property
    def partial(self) -> tuple[str, ...]:
        """Changes a pass left unwritten after writing others: () while the Node is whole."""
        return self._partial

    def reconcile(self, desired_state: DesiredStateFunction, live_node: Mapping[str, Any] | Any | None = None) -> ReconcileOutcome:
        """Take the node to ``desired_state(foreign_labels)``; never raises on API errors."""
        with self.events.deferred():  # both writes back to back, the pass's Events after them
            outcome, live = self._run(desired_state, live_node, cleaning=False)
        self._track_partial(outcome, live)
        return replace(outcome, partial=self._partial) if self._partial else outcome

    def clean(self) -> CleanOutcome:
        """Remove everything we own (labels, annotations, resources, taints, the record)."""
        with self.events.deferred():
            outcome, final = self._run(_nothing_desired, None, cleaning=True)
        clean = outcome.ok and final is not None and parse_ownership(final.annotations).empty
        problems = list(outcome.problems)
        unattributed = unattributed_labels(final) if final is not None else []
        if unattributed:
            clean = False
            problems.append(Problem("clean", "ownership record", (
                f"{len(unattributed)} label(s) in feature namespaces are on the node but in no ownership record "
                f"(deleted by hand?), so they were left in place: {', '.join(unattributed[:20])}"
                + (" ..." if len(unattributed) > 20 else ""))))
        return CleanOutcome(clean=clean, writes=outcome.writes, removed=outcome.applied,
                            problems=tuple(problems), error=outcome.error)

    def preview(self, desired_state: DesiredStateFunction, live_node: Mapping[str, Any] | None = None) -> ReconcileOutcome:
        """What ``reconcile`` would change, without writing (``apply --dry-run``)."""
        try:
            node = self._first(live_node)
        except NodeApiError as err:
            return self._failure(err, _Pass(cleaning=False), None)
        live = LiveNode.from_dict(node)
        desired = self._desired(desired_state, live)
        problems: list[Problem] = []
        ownership = self._ownership(live, desired, problems, announce=False)
        node_changes = diff_node(live, desired, skip=self._skip(desired), ownership=ownership)
        problems = problems + list(node_changes.refused) + [c.as_problem() for c in node_changes.clashes]
        return ReconcileOutcome(changed=not node_changes.empty, writes=0, applied=tuple(readable(node_changes.changes)),
                                problems=tuple(problems), node_uid=live.uid, resource_version=live.resource_version,
                                desired=desired)

    # -- the loop: read, diff, write, until no change is left ---------------------------------
    def _run(self, desired_state: DesiredStateFunction, live_node: Mapping[str, Any] | None, *, cleaning: bool
             ) -> tuple[ReconcileOutcome, LiveNode | None]:
        run = _Pass(cleaning)
        try:
            node = self._first(live_node)
        except NodeApiError as err:
            return self._failure(err, run, None), None
        while True:
            live = LiveNode.from_dict(node)
            self._notice_uid(live)
            node_changes = self._next_changes(desired_state, live, run)
            if isinstance(node_changes, ReconcileOutcome):
                return node_changes, live
            if node_changes.empty:
                return self._converged(live, run), live
            if run.writes >= self.max_writes:
                return self._result(live, run, f"node {self.node_name} did not settle after {run.writes} writes"), live
            answer = self._send(node_changes, node, live, run)
            if isinstance(answer, ReconcileOutcome):
                return answer, live
            node = answer

    def _first(self, live_node: Mapping[str, Any] | Any | None) -> dict[str, Any]:
        """The Node to diff first: the one handed in (the watch's) when it is this Node
        (``node_answer_problem``), else a GET."""
        if live_node is not None:
            node = node_as_dict(live_node)
            problem = node_answer_problem(node, self.node_name)
            if not problem:
                return node
            log.warning("node %s: the watched object is not the Node (%s); reading it instead", self.node_name,
                        problem)
        return self._get()

    def _get(self) -> dict[str, Any]:
        return call_with_retries(lambda: self.api.get_node(self.node_name), self.backoff, self._sleep,
                                 max_attempts=self.max_attempts, describe=f"GET node {self.node_name}")

    def _next_changes(self, desired_state: DesiredStateFunction, live: LiveNode, run: _Pass) -> NodeChanges | ReconcileOutcome:
        """The writes still needed on ``live`` (the startup taints' removal once nothing else is)."""
        try:
            run.desired = self._desired(desired_state, live)
        except Exception as exc:  # a bug in the rules must not kill the agent: report it
            log.exception("computing the desired state failed for node %s", self.node_name)
            return self._result(live, run, f"computing the desired state failed: {exc}")
        self._contests.observe(live, run.desired)
        ownership = self._ownership(live, run.desired, run.problems, announce=True)
        node_changes = self._diff(live, run, ownership)
        reverts = [] if run.cleaning else self._contests.reverts(node_changes.changes)
        self.notices.reverts(live.uid, reverts)
        if any(r.given_up or r.delay > 0 for r in reverts):
            node_changes = self._diff(live, run, ownership)  # without the rewrites that wait
        if node_changes.empty and self._startup_taints_due(live, run):
            run.remove_startup = True
            node_changes = self._diff(live, run, ownership)
        if not node_changes.empty and self._over_annotation_budget(live, node_changes, run):
            return self._result(live, run, None)
        self._report(live, node_changes, run)
        for problem in self._refused.problems():
            run.note(problem)
        return node_changes

    def _over_annotation_budget(self, live: LiveNode, node_changes: NodeChanges, run: _Pass) -> bool:
        """A write that would take the Node's annotations (the ownership record among them) past
        the API server's budget is not sent: the Node stays as it is, the problem is in the
        outcome every pass and in one Warning Event until the changes fit again."""
        size = annotations_after(live, node_changes)
        if size <= ANNOTATIONS_TOTAL_MAX:
            self._annotations_over = False
            return False
        text = (f"the next write would leave the Node's annotations at {size} bytes, over the API server's "
                f"{ANNOTATIONS_TOTAL_MAX}-byte budget (the ownership record lists every item the agent owns); "
                "not sent, the Node is left as it is: produce fewer labels or shorter keys")
        run.note(Problem("reconcile", "annotations", text))
        if not self._annotations_over:
            self._annotations_over = True
            self.notices.not_sent(Problem("reconcile", "annotations", text))
            self.events.record(live.uid, ev.REASON_ANNOTATIONS_OVER_BUDGET, text, warning=True)
        return True

    def _diff(self, live: LiveNode, run: _Pass, ownership: Ownership) -> NodeChanges:
        assert run.desired is not None
        removal = self.startup_taints if run.remove_startup else frozenset()
        return diff_node(live, run.desired, skip=self._skip(run.desired), remove_foreign_taints=removal,
                                 ownership=ownership)

    def _startup_taints_due(self, live: LiveNode, run: _Pass) -> bool:
        """The first converged pass on this Node (uid) also removes the startup taints."""
        return (not run.cleaning and bool(self.startup_taints) and self._startup_done_uid != live.uid
                and not run.remove_startup)

    def _converged(self, live: LiveNode, run: _Pass) -> ReconcileOutcome:
        if run.remove_startup:
            self._startup_done_uid = live.uid
        self.backoff.success()
        if self.events.backlog and not run.cleaning:
            self.events.flush(live.uid)
        return self._result(live, run, None)

    def _send(self, node_changes: NodeChanges, node: dict[str, Any], live: LiveNode, run: _Pass
              ) -> dict[str, Any] | ReconcileOutcome:
        """One write of ``node_changes``; the Node to diff next, or how the pass ends."""
        assert run.desired is not None
        use_status = bool(node_changes.status_ops) and (node_changes.status_first or not node_changes.metadata_patch)
        try:
            answer = self._write(node_changes, use_status)
        except Conflict as err:
            run.conflicts += 1
            log.info("node %s changed under us (%s); re-reading", self.node_name, err.message)
            if run.conflicts > self.max_conflicts:
                return self._failure(err, run, live)
            return self._reread(run, live)
        except Invalid as err:
            if self._blame(err, node_changes, use_status, run.desired):
                return node  # the refused request changed nothing: diff again without those items
            run.stale_rereads += 1
            if run.stale_rereads > 1:
                return self._failure(err, run, live)
            return self._reread(run, live)
        except NodeApiError as err:
            return self._failure(err, run, live)
        run.writes += 1
        changes = node_changes.status_changes if use_status else node_changes.metadata_changes
        self._contests.written(changes)
        run.applied.extend(self.notices.written(live.uid, changes, status=use_status, cleaning=run.cleaning))
        return answer

    def _write(self, node_changes: NodeChanges, use_status: bool) -> dict[str, Any]:
        def call() -> dict[str, Any]:
            if use_status:
                return self.api.patch_status(self.node_name, node_changes.status_ops)
            return self.api.patch_metadata(self.node_name, node_changes.metadata_patch or {})

        return call_with_retries(call, self.backoff, self._sleep, max_attempts=self.max_attempts,
                                 describe=f"PATCH node {self.node_name}{'/status' if use_status else ''}")

    def _reread(self, run: _Pass, live: LiveNode) -> dict[str, Any] | ReconcileOutcome:
        try:
            return self._get()
        except NodeApiError as err:
            return self._failure(err, run, live)

    def _track_partial(self, outcome: ReconcileOutcome, live: LiveNode | None) -> None:
        """Labels/taints and ``status.capacity`` are two PATCHes: when only one went in, the
        Node carries a label without its resource (or the reverse). Remember what is missing
        so the agent can say so (metric, readiness) until a pass completes the Node; the
        retry that completes it is the agent's normal short backoff."""
        if outcome.ok:
            if self._partial:
                log.info("node %s: partial update completed after %.1fs", self.node_name,
                         self._clock() - (self._partial_since or self._clock()),
                         extra={"node": self.node_name, "event": "partial-completed"})
            self._partial, self._partial_since = (), None
            return
        if outcome.writes == 0 or live is None or outcome.desired is None:
            return  # nothing written this time: the Node is as the last pass left it
        remaining = diff_node(live, outcome.desired, skip=self._skip(outcome.desired),
                                      ownership=self._ownership(live, outcome.desired, [], announce=False))
        missing = tuple(c.pending for c in remaining.changes if c.kind != "record") if not remaining.empty else ()
        if missing and not self._partial:
            self._partial_since = self._clock()
        if missing:
            log.warning("node %s: partially updated (%d write(s) went in, then: %s); still missing: %s; "
                        "retrying in %.1fs", self.node_name, outcome.writes, outcome.error, "; ".join(missing),
                        outcome.retry_after or 0.0, extra={"node": self.node_name, "event": "partial"})
        else:
            self._partial_since = None
        self._partial = missing

    # -- pieces ---------------------------------------------------------------------------
    def _ownership(self, live: LiveNode, desired: DesiredNodeState, problems: list[Problem], *,
                   announce: bool) -> Ownership:
        """The record, checked against what the agent could produce (``claims``); each of its
        annotations missing or damaged rebuilt from the wanted items already on the Node."""
        recorded = parse_ownership(live.annotations)
        checked = check_claims(recorded, desired, self.claims, self._vouched_taints)
        parts = parts_to_rebuild(live.annotations, recorded)
        if parts:
            checked = adopt_matching(checked, live, desired, self.claims, parts, self._vouched_taints)
        for entry in checked.rejected:
            problem = Problem("reconcile", "ownership record", f"entry not attributable to this agent, ignored: {entry}")
            if problem not in problems:
                problems.append(problem)
        if announce:
            self.notices.claims(live.uid, checked)
            if not desired.hold_everything:
                self._vouched_taints = checked.ownership.taints
            else:  # a held entry is kept, not vouched for; one a rule read now produces is
                produced = {(t.key, t.effect) for t in desired.taints}
                self._vouched_taints |= checked.ownership.taints & produced
        return checked.ownership

    def _desired(self, desired_state: DesiredStateFunction, live: LiveNode) -> DesiredNodeState:
        owned = parse_ownership(live.annotations).labels
        foreign = {k: v for k, v in live.labels.items() if k not in owned}
        if self._cached is None or self._cached[0] != foreign or desired_state is not self._cached_function:
            self._cached = (foreign, desired_state(dict(foreign)))
            self._cached_function = desired_state
        return self._cached[1]

    def _skip(self, desired: DesiredNodeState) -> frozenset[ItemRef]:
        """Items left exactly as they are: those the server refused (``RefusedItems``) and those
        another writer keeps changing back (``contest``)."""
        return self._refused.skip(wanted_items(desired)) | self._contests.skip()

    def _blame(self, err: Invalid, node_changes: NodeChanges, use_status: bool, desired: DesiredNodeState) -> set[ItemRef]:
        refs = rejected_items(err.causes, err.message,
                              metadata_patch=None if use_status else node_changes.metadata_patch,
                              status_ops=node_changes.status_ops if use_status else (),
                              our_taints=[f"{t.key}:{t.effect}" for t in desired.taints])
        reason = "; ".join(c.message for c in err.causes) or err.message
        refs = self._refused.add(refs, wanted_items(desired), reason)
        self.notices.rejected(self._node_uid, refs, reason, err.message)
        return refs

    def _report(self, live: LiveNode, node_changes: NodeChanges, run: _Pass) -> None:
        """Clashes and refusals: into the outcome every time, into the log/Events once."""
        for clash in node_changes.clashes:
            run.note(clash.as_problem())
        self.notices.clashes(live.uid, node_changes.clashes)
        for problem in node_changes.refused:
            if problem not in run.problems:
                run.problems.append(problem)
                self.notices.not_sent(problem)

    def _notice_uid(self, live: LiveNode) -> None:
        if self._node_uid and live.uid and live.uid != self._node_uid:
            self.notices.node_recreated(self._node_uid, live.uid)
            self._contests.forget()
            self._vouched_taints = frozenset()
        if live.uid:
            self._node_uid = live.uid

    def _result(self, live: LiveNode, run: _Pass, error: str | None) -> ReconcileOutcome:
        return ReconcileOutcome(changed=run.writes > 0, writes=run.writes, applied=tuple(run.applied),
                                problems=tuple(run.problems), error=error, node_uid=live.uid,
                                resource_version=live.resource_version, desired=run.desired,
                                rewrite_in=self._contests.next_due())

    def _failure(self, err: NodeApiError, run: _Pass, live: LiveNode | None) -> ReconcileOutcome:
        """Turn an API error into an outcome, with a clear log line and a backoff delay."""
        text = _failure_text(err, self.node_name, self.max_attempts)
        delay = self.backoff.next_delay(err.retry_after)
        log.error("node %s: %s (next attempt in %.1fs)", self.node_name, text, delay, extra={"node": self.node_name, "event": "error"})
        return ReconcileOutcome(changed=run.writes > 0, writes=run.writes, applied=tuple(run.applied),
                                problems=tuple(run.problems), error=text, node_uid=live.uid if live else self._node_uid,
                                resource_version=live.resource_version if live else "", retry_after=delay,
                                desired=run.desired, node_missing=isinstance(err, NodeNotFound))
