"""The catalogue in use, reloaded on change, with a last-good fallback.

Reload policy: the first load is used whatever it contains (there is nothing better; its
problems are logged). Later loads are *accepted* only if they bring no new error: each
``Catalogue.problems`` entry (a skipped line, rule or file; a missing directory) is compared
with those of the catalogue in use, ignoring line numbers, and any new one means the edit is
broken and the last good catalogue stays in force. Warnings never block a reload. A rejected
edit is reported once per distinct content (log line, ``on_rejected`` callback for the Node
Event, metric), not on every file event.

Whether anything changed is decided on a content fingerprint of every file the loader would
read (symlinks followed, dot-names skipped as the loader skips them), so a ConfigMap ``..data``
swap that changes the targets is seen, and a swap that changes nothing costs no reconcile.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

MAX_FILES = 10_000
MAX_FILE_BYTES = 4 * 1024 * 1024
_LINE = re.compile(r":\d+(?=$|:)")


def fingerprint(dirs: Sequence[str]) -> str:
    """Digest of paths, symlink targets and contents under ``dirs`` (loops and sizes bounded)."""
    digest = hashlib.sha1()
    count = 0
    for top in dirs:
        digest.update(f"dir {top} {os.path.isdir(top)}\n".encode())
        seen: set[str] = set()
        for root, subdirs, files in os.walk(top, followlinks=True, onerror=lambda e: digest.update(f"! {e}\n".encode())):
            real = os.path.realpath(root)
            if real in seen:
                subdirs[:] = []
                continue
            seen.add(real)
            subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))  # as the loader: ..data, ..<stamp>
            for name in sorted(f for f in files if not f.startswith(".")):
                count += 1
                if count > MAX_FILES:
                    digest.update(b"too many files\n")
                    return digest.hexdigest()
                path = os.path.join(root, name)
                digest.update(f"f {os.path.relpath(path, top)}\n".encode())
                try:
                    with open(path, "rb") as handle:
                        digest.update(handle.read(MAX_FILE_BYTES))
                except OSError as exc:
                    digest.update(f"! {exc.errno}\n".encode())
    return digest.hexdigest()


def problem_key(problem: Any) -> tuple[str, str, str]:
    """A Problem without its line number: an edit that only moves a known problem is not new."""
    return (_LINE.sub("", str(getattr(problem, "origin", ""))), str(getattr(problem, "item", "")),
            str(getattr(problem, "reason", "")))


@dataclass(frozen=True)
class Reload:
    """What one ``reload`` did: ``changed`` (a new catalogue is in use), ``rejected`` (the
    files changed but are broken: the last good catalogue stays)."""

    changed: bool
    rejected: bool = False


class RulesState:
    """Holds the catalogue in use; ``reload`` is called by the watcher thread for each edit
    and by the worker on resync, serialized by a lock."""

    def __init__(self, dirs: Sequence[str], options: Any = None, *,
                 loader: Callable[..., Any] | None = None,
                 on_rejected: Callable[[str], None] | None = None) -> None:
        if loader is None:
            from agent.rules import load_catalogue

            loader = load_catalogue
        self.dirs = list(dirs)
        self.options = options
        self._loader = loader
        self._lock = threading.Lock()
        self.on_rejected = on_rejected
        self.generation = 0
        self.rejected_fingerprint = ""
        self.last_error: str | None = None
        self._fingerprint = fingerprint(self.dirs)
        self.catalogue = self._load()
        for problem in getattr(self.catalogue, "problems", ()):
            log.warning("rule catalogue: %s", problem, extra={"event": "rules-problem"})

    def _load(self) -> Any:
        return self._loader(self.dirs, self.options)

    def reload(self) -> Reload:
        """Re-read the directories if their content changed; never raises."""
        with self._lock:
            return self._reload()

    def _reload(self) -> Reload:
        current = fingerprint(self.dirs)
        if current == self._fingerprint:
            return Reload(changed=False)
        if current == self.rejected_fingerprint:
            return Reload(changed=False, rejected=True)
        try:
            candidate = self._load()
        except Exception as exc:  # the loader promises not to raise; be safe anyway
            log.exception("loading the rule catalogue failed")
            return self._reject(current, (f"loader failed: {exc}",))
        known = {problem_key(p) for p in getattr(self.catalogue, "problems", ())}
        new = tuple(p for p in getattr(candidate, "problems", ()) if problem_key(p) not in known)
        if new:
            return self._reject(current, new)
        self.catalogue = candidate
        self._fingerprint = current
        self.rejected_fingerprint = ""
        self.last_error = None
        self.generation += 1
        log.info("rule catalogue reloaded: %d file(s)", len(getattr(candidate, "files", ())),
                 extra={"event": "rules-reloaded"})
        return Reload(changed=True)

    def _reject(self, current: str, problems: tuple[Any, ...]) -> Reload:
        self.rejected_fingerprint = current
        shown = "; ".join(str(p) for p in problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        self.last_error = f"rule files changed but are broken, keeping the last good catalogue: {shown}"
        log.error("%s", self.last_error, extra={"event": "rules-rejected"})
        if self.on_rejected is not None:
            try:
                self.on_rejected(self.last_error)
            except Exception:
                log.exception("reporting the broken rules failed")
        return Reload(changed=False, rejected=True)
