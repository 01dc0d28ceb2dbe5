"""How many of one collection's objects, and how many bytes of them, a watch keeps (the NFD
objects' ``CollectionWatch``, the ResourceSlices' ``WatchedSlices``); what happens past that.

A bound is a state, not a filter (``agent.rules.budget``): a LIST over a bound keeps none of
the objects it did not know before, whatever their names, so no tenant's junk named ``a…``
pushes out another tenant's rule named ``z…``; the objects delivered before are still followed
and the caller holds what it had. ``report`` tells the caller once per episode: when the
collection becomes bounded (the bound and the objects left out) and when it fits again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from agent.kube.backoff import BackoffSettings

log = logging.getLogger(__name__)

RELIST = BackoffSettings(initial=10.0, maximum=300.0, jitter=0.2)
"""The pause before a LIST that a deletion while bounded asks for (doubling while the collection
stays bounded): a tenant creating and deleting objects costs each watch one LIST per pause."""

Key = tuple[str, str]
SHOWN = 5  # object names an Event lists


def _name(key: Key) -> str:
    return "/".join(part for part in key if part)


def cost(obj: Mapping[str, Any]) -> int:
    """Bytes an object counts for: its spec's, or nothing when its spec was left out (too large)."""
    return int(obj.get("specBytes") or 0) if obj.get("spec") is not None else 0


class Listing:
    """One LIST as it is read: the objects kept and what a bound left out."""

    def __init__(self, bounds: CollectionBounds, known: Mapping[Key, str]) -> None:
        self.bounds, self.known = bounds, known
        self.found: dict[Key, dict[str, Any]] = {}
        self.total = self.count = 0
        self.seen_known: set[Key] = set()
        self.left_out: list[str] = []
        self.left_out_count = 0
        self.over = False  # a bound was passed: from then on only known objects are kept
        self.cut: str | None = None  # why the LIST stopped before its end

    def add(self, key: Key, obj: dict[str, Any]) -> None:
        b = self.bounds
        self.count += 1
        if key in self.known:
            self.seen_known.add(key)
        size = cost(obj)
        if not self.over and len(self.found) < b.max_objects and self.total + size <= b.max_bytes:
            self.found[key], self.total = obj, self.total + size
            return
        if not self.over:
            self._pass_bound()
        if key in self.known and self.total + size <= b.max_bytes:
            self.found[key], self.total = obj, self.total + size
            return
        self.left_out_count += 1
        if len(self.left_out) < SHOWN:
            self.left_out.append(_name(key))

    def _pass_bound(self) -> None:
        """The first object over a bound: the unknown objects kept so far go too."""
        self.over = True
        dropped = [k for k in self.found if k not in self.known]
        self.left_out = [_name(k) for k in dropped[:SHOWN]]
        self.left_out_count = len(dropped)
        self.found = {k: v for k, v in self.found.items() if k in self.known}
        self.total = sum(cost(v) for v in self.found.values())

    def unreadable(self, page_bytes: int) -> None:
        self.cut = f"a LIST page of one {self.bounds.kind} object is over {page_bytes} bytes; the rest was not read"

    @property
    def bounded(self) -> str | None:
        """Why this LIST is over a bound (the bound and the objects), or None."""
        b = self.bounds
        if self.cut is not None:
            return self.cut
        if not self.over:
            return None
        if self.count > b.max_objects:
            bound = f"{self.count} {b.kind} objects, over the bound of {b.max_objects}"
        else:
            bound = f"the {b.kind} objects' specs together are over the bound of {b.max_bytes} bytes"
        more = self.left_out_count - len(self.left_out)
        names = ", ".join(self.left_out) + (f" and {more} more" if more > 0 else "")
        return f"{bound}; not read: {names}"

    def known_changes(self) -> dict[Key, dict[str, Any] | None]:
        """The known objects as this LIST found them (None: deleted; only from a whole LIST)."""
        changes: dict[Key, dict[str, Any] | None] = dict(self.found)
        if self.cut is None:
            changes.update(dict.fromkeys(set(self.known) - self.seen_known))
        return changes


class CollectionBounds:
    """The bounds of one collection and its sizes (key -> bytes counted), with the bounded state."""

    def __init__(self, kind: str, max_objects: int, max_bytes: int, max_object_bytes: int,
                 on_bounded: Callable[[str | None], None] | None) -> None:
        self.kind = kind
        self.max_objects, self.max_bytes, self.max_object_bytes = max_objects, max_bytes, max_object_bytes
        self.on_bounded = on_bounded
        self.sizes: dict[Key, int] = {}
        self.bounded: str | None = None

    def listing(self, known: Mapping[Key, str]) -> Listing:
        return Listing(self, known)

    def admit(self, key: Key, obj: dict[str, Any], *, known: bool) -> bool:
        """Whether a watched object fits (a known one's new version, or a new one); a new one
        that does not makes the collection bounded, a known one that does not keeps its last version."""
        size = cost(obj)
        total = sum(self.sizes.values()) - self.sizes.get(key, 0) + size
        count = len(self.sizes) + (0 if known else 1)
        if count <= self.max_objects and total <= self.max_bytes and (known or self.bounded is None):
            return True
        if not known:
            bound = (f"over {self.max_objects} {self.kind} objects" if count > self.max_objects
                     else f"the {self.kind} objects' specs together are over the bound of {self.max_bytes} bytes")
            self.report(f"{bound}; not read: {_name(key)}")
        return False

    def report(self, why: str | None) -> None:
        """Enter or leave the bounded state; the caller hears of each change once."""
        if (why is None) == (self.bounded is None):
            self.bounded = why if why is None else self.bounded
            return
        self.bounded = why
        if why is not None:
            log.warning("%s objects bounded: %s; the output they gave is held", self.kind, why,
                        extra={"event": "objects-bounded"})
        else:
            log.info("%s objects within their bounds again", self.kind, extra={"event": "objects-bounded"})
        if self.on_bounded is not None:
            self.on_bounded(why)
