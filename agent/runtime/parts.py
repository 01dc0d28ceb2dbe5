"""The agent's parts, in one list that start, stop and ``/healthz`` all read.

A part is a name and three calls: ``start``, ``alive``, ``stop(timeout)``. The agent starts
them in list order; ``/healthz`` fails naming the first part whose thread died (a dead watch
of any kind, a dead hotplug monitor, a dead device plugin), so kubelet restarts an agent that
can no longer see its inputs; ``stop`` stops the inputs before the worker drains and the
outputs (``after_worker``: the device plugins, the HTTP server) after it. A part absent from
the list (a feature switched off) is neither started, checked nor stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Part:
    name: str
    start: Callable[[], object]
    alive: Callable[[], bool]
    stop: Callable[[float], object]
    after_worker: bool = False
    """Stopped after the worker finished (it still hands work to this part until then)."""


class Parts:
    def __init__(self) -> None:
        self._parts: list[Part] = []

    def start(self, part: Part) -> None:
        """Start ``part`` and keep it in the list."""
        part.start()
        self._parts.append(part)

    def __iter__(self) -> Iterator[Part]:
        return iter(list(self._parts))

    def names(self) -> list[str]:
        return [p.name for p in self._parts]

    def dead(self) -> str:
        """The name of the first part that is not alive ("" while all are)."""
        return next((p.name for p in self._parts if not p.alive()), "")

    def stop(self, deadline: float, *, after_worker: bool, cap: float) -> None:
        """Stop the inputs (``after_worker`` False) or the outputs, last started first, each
        within ``cap`` seconds and the time left before ``deadline`` (at least 0.1 s each)."""
        for part in reversed(self._parts):
            if part.after_worker == after_worker:
                part.stop(max(0.1, min(cap, deadline - time.monotonic())))
