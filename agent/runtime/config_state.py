"""The ``--config`` file (nfd-worker.conf) in use, reloaded on change with a last-good fallback.

Same policy as the rule catalogue (``rules_state``): the file is judged when an edit is seen;
a valid edit replaces the configuration in use (the worker then rediscovers every source
with it), a broken one — a YAML error, an unknown key, a deleted file — is reported once per
distinct content (log line with file:line, ``on_rejected`` for a Node Event) and the last
good configuration stays.  Change is decided on the file's content (symlinks followed, so a
ConfigMap ``..data`` swap counts only when the text changed), as read and digested by the one
reader of the file, ``agent.worker_config.load_worker_config``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from agent.worker_config import WorkerConfig, WorkerConfigError, load_worker_config

log = logging.getLogger(__name__)


class WorkerConfigState:
    """Holds the configuration in use; ``reload`` is called by the watcher thread and on
    resync, serialized by a lock.  The first load is ``initial``, the one the command read and
    preflight checked (``Settings.worker_config``); without it, the file is read here."""

    def __init__(self, path: str, node_name: str = "", *, on_rejected: Callable[[str], None] | None = None,
                 initial: WorkerConfig | None = None) -> None:
        self.path = path
        self.node_name = node_name
        self.on_rejected = on_rejected
        self._lock = threading.Lock()
        self.current = initial if initial is not None else load_worker_config(path, node_name)
        self.generation = 0
        self.rejected_digest = ""
        self.last_error: str | None = None

    def reload(self) -> bool:
        """Re-read the file if its content changed; True when a new configuration is in use."""
        with self._lock:
            try:
                candidate = load_worker_config(self.path, self.node_name)
            except WorkerConfigError as exc:
                if exc.digest == self.rejected_digest:
                    return False  # this content was judged already
                self.rejected_digest = exc.digest
                self.last_error = f"--config {self.path} changed but is invalid, keeping the last good configuration: {exc}"
                log.error("%s", self.last_error, extra={"event": "config-rejected"})
                if self.on_rejected is not None:
                    try:
                        self.on_rejected(self.last_error)
                    except Exception:
                        log.exception("reporting the invalid configuration failed")
                return False
            if candidate.digest == self.current.digest:
                return False
            for warning in candidate.warnings:
                log.warning("--config: %s", warning, extra={"event": "config-warning"})
            self.current = candidate
            self.rejected_digest, self.last_error = "", None
            self.generation += 1
            log.info("configuration %s reloaded", self.path, extra={"event": "config-reloaded"})
            return True
