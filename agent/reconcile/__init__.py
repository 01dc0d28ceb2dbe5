"""Reconciler: keep this node's labels, annotations, taints and extended resources in step
with the desired state, touching only what the agent owns (recorded on the Node itself).

Modules: ``ownership`` (the record) and ``claims`` (checking and rebuilding it), ``diff``
(desired state -> changes, pure), ``node_api`` (typed API calls: the writes), ``Backoff`` (retry
timing, from ``agent.kube``), ``rejections`` (items the server refused), ``contest`` (keys another
writer keeps changing back), ``events`` (Events on the Node) and ``notices`` (what is logged and
recorded), ``reconciler`` (the loop).
"""

from agent.kube.backoff import Backoff, BackoffSettings
from agent.reconcile.diff import diff_node
from agent.reconcile.model import Change, Clash, LiveNode, NodeChanges
from agent.reconcile.node_api import (
    Conflict,
    Forbidden,
    Invalid,
    NodeApi,
    NodeApiError,
    NodeNotFound,
    RequestRejected,
    Throttled,
    Transient,
)
from agent.reconcile.outcome import CleanOutcome, ReconcileOutcome
from agent.reconcile.ownership import Ownership, format_record, parse_ownership
from agent.reconcile.reconciler import DesiredStateFunction, Reconciler

__all__ = [
    "Backoff", "BackoffSettings", "Change", "Clash", "CleanOutcome", "Conflict", "DesiredStateFunction", "Forbidden",
    "Invalid", "LiveNode", "NodeApi", "NodeApiError", "NodeChanges", "NodeNotFound", "Ownership",
    "ReconcileOutcome", "Reconciler", "RequestRejected", "Throttled", "Transient", "diff_node", "format_record",
    "parse_ownership",
]
