"""Watch the rules directories with watchfiles and call ``on_change`` after edits.

What is watched: each rules directory, recursively. A directory that does not exist yet, or
is itself a symlink (a ConfigMap ``subPath``-style mount whose target is swapped), is watched
through its parent, so its creation or re-pointing is seen too. A mounted ConfigMap is a
directory holding ``..data -> ..<timestamp>/`` and per-key symlinks through ``..data``;
kubelet updates it by writing a new timestamped directory and renaming a new ``..data`` over
the old one: both land in the watched directory itself. No file filter is applied (the
default one would drop names like ``x~``); ``RulesState`` decides by content. ``watchfiles``' Rust backend (``RustNotify``, inotify) is used
directly so the thread can signal when its watches are in place.

Cost when idle: watchfiles' Rust loop wakes every ``step`` ms to check for buffered inotify
events and the stop event; with ``step=250`` that is 4 cheap wake-ups a second and no file
I/O. ``stop`` sets the stop event; the thread ends within one step.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence

log = logging.getLogger(__name__)

CREATED = 1  # watchfiles' Change.added, as its Rust backend reports it


def watch_roots(dirs: Sequence[str]) -> list[str]:
    """Existing directories to watch for ``dirs`` (see module docstring), nested ones removed.

    A missing or symlinked directory is watched through its nearest existing ancestor, but
    never through ``/`` or a top-level directory (``/tmp``, ``/etc``): a recursive inotify
    watch on a whole filesystem (what ``--rules /nonexistent`` once produced) spins a core and
    grows without bound. Such a directory is left unwatched with a warning; the periodic
    resync still reloads it."""
    roots: list[str] = []
    for directory in dirs:
        roots.extend(c for c in _candidates(os.path.abspath(directory)) if c not in roots)
    roots.sort(key=len)
    kept: list[str] = []
    for root in roots:
        if not any(root == k or root.startswith(k.rstrip("/") + "/") for k in kept):
            kept.append(root)
    return kept


def _candidates(path: str) -> list[str]:
    """The directory itself when it is a real one; its nearest existing ancestor when it is
    missing or a symlink (a swap re-points it), if that ancestor is deep enough."""
    if os.path.isdir(path) and not os.path.islink(path):
        return [path]
    parent = os.path.dirname(path)
    while parent and not os.path.isdir(parent) and parent != os.path.dirname(parent):
        parent = os.path.dirname(parent)
    if _deep_enough(parent):
        return [parent]
    log.warning("rules directory %s is missing and its parent %s cannot be watched; its edits are seen "
                "at the next resync", path, parent, extra={"event": "rules-watch-skipped"})
    return []


def _deep_enough(directory: str) -> bool:
    """At least two levels below ``/`` (``/etc/node-feature-agent``, not ``/etc``)."""
    return os.path.isdir(directory) and len([p for p in directory.split(os.sep) if p]) >= 2


class RulesWatcher:
    """A daemon thread running ``watchfiles.watch`` until ``stop``."""

    def __init__(self, dirs: Sequence[str], on_change: Callable[[], None], *, debounce_ms: int = 200,
                 step_ms: int = 250, recursive: bool = True,
                 on_created: Callable[[frozenset[str]], None] | None = None,
                 what: str = "rule directories",
                 fallback: str = "rule edits are picked up at the next resync") -> None:
        """``recursive=False`` watches only the directories' own entries: enough for one
        mounted ConfigMap file (the kubelet's ``..data`` swap happens there), and cheap even
        when that directory is a busy one such as ``/tmp``. ``on_created`` is told the paths
        created in a batch (before ``on_change``). ``what`` and ``fallback`` name the watched
        directories and what covers for the watch in the line logged when it fails."""
        self.dirs = list(dirs)
        self.what = what
        self.fallback = fallback
        self.recursive = recursive
        self.roots = watch_roots(self.dirs)
        self.on_change = on_change
        self.on_created = on_created
        self.debounce_ms = debounce_ms
        self.step_ms = step_ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rules-watcher", daemon=True)
        self.failed: Exception | None = None
        self.ready = threading.Event()

    def start(self) -> RulesWatcher:
        self._thread.start()
        return self

    def alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        """watchfiles' ``watch`` loop, on its ``RustNotify`` directly so that ``ready`` can be
        set once the inotify watches exist; then one catch-up call covers edits made between
        the initial load and that moment."""
        if not self.roots:
            self.ready.set()
            return
        try:
            from watchfiles._rust_notify import RustNotify

            with RustNotify(self.roots, False, False, 300, self.recursive, True) as notify:
                self.ready.set()
                self._changed()
                while not self._stop.is_set():
                    raw = notify.watch(self.debounce_ms, self.step_ms, 0, self._stop)
                    if raw == "stop":
                        return
                    if isinstance(raw, set) and raw:
                        log.debug("rules directories changed: %s", sorted(p for _c, p in raw)[:10])
                        self._created(frozenset(path for change, path in raw if change == CREATED))
                        self._changed()
        except Exception as exc:  # noqa: BLE001 - e.g. the inotify watch limit reached: said, resync covers
            self.failed = exc
            if not self._stop.is_set():
                log.error("watching %s %s failed (%s); %s", self.what, self.roots, exc, self.fallback,
                          extra={"event": "rules-watch-failed"})
        finally:
            self.ready.set()

    def _created(self, paths: frozenset[str]) -> None:
        if paths and self.on_created is not None:
            try:
                self.on_created(paths)
            except Exception:
                log.exception("handling created paths %s failed", sorted(paths)[:10])

    def _changed(self) -> None:
        try:
            self.on_change()
        except Exception:
            log.exception("reloading the rules failed")

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)
