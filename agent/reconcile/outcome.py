"""What one reconcile or clean did, for the event loop, the CLI and the metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.desired import DesiredNodeState, Problem


@dataclass(frozen=True)
class ReconcileOutcome:
    changed: bool
    writes: int
    applied: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    error: str | None = None
    node_uid: str = ""
    resource_version: str = ""
    #: after an error: how long the caller should wait before trying again (backoff/Retry-After)
    retry_after: float | None = None
    #: the desired state used (None when the node could not be read)
    desired: DesiredNodeState | None = None
    #: the error was 404 on the Node (not registered yet, deleted, or a wrong --node-name): the
    #: run loop retries as soon as its Node watch sees the node appear, not after the backoff
    node_missing: bool = False
    #: seconds until a rewrite of a key another writer changed back is due (``contest``);
    #: None when none waits. The run loop passes again then, unless an event comes first
    rewrite_in: float | None = None
    #: changes still missing after a pass wrote only part of its changes (e.g. the labels went in,
    #: the status.capacity PATCH failed): () when the Node is whole; kept across passes that
    #: write nothing, cleared by the first pass that converges
    partial: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_json(self) -> dict[str, Any]:
        return {"changed": self.changed, "writes": self.writes, "applied": list(self.applied),
                "problems": [p.to_json() for p in self.problems], "error": self.error,
                "node_uid": self.node_uid, "resource_version": self.resource_version}


@dataclass(frozen=True)
class CleanOutcome:
    clean: bool
    writes: int
    removed: tuple[str, ...] = ()
    problems: tuple[Problem, ...] = ()
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"clean": self.clean, "writes": self.writes, "removed": list(self.removed),
                "problems": [p.to_json() for p in self.problems], "error": self.error}
