"""The ``--config`` file (nfd-worker.conf) in use, reloaded on change with a last-good fallback.

Same policy as the rule catalogue (``rules_state``): the file is judged when an edit is seen;
a valid edit replaces the configuration in use (the worker then rediscovers every source
with it), a broken one — a YAML error, an unknown key, a deleted file — is reported once per
distinct content (log line with file:line, ``on_rejected`` for a Node Event) and the last
good configuration stays.  Change is decided on the file's content (symlinks followed, so a
ConfigMap ``..data`` swap counts only when the text changed).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable

from agent.worker_config import WorkerConfig, WorkerConfigError, load_worker_config

log = logging.getLogger(__name__)


def content_digest(path: str) -> str:
    """The file's content digest, or a marker naming why it cannot be read."""
    try:
        with open(path, "rb") as handle:
            return hashlib.sha1(handle.read(2 * 1024 * 1024)).hexdigest()
    except OSError as exc:
        return f"unreadable: {exc.errno}"


class WorkerConfigState:
    """Holds the configuration in use; ``reload`` is called by the watcher thread and on
    resync, serialized by a lock.  The first load is the one preflight already checked."""

    def __init__(self, path: str, node_name: str = "", *, on_rejected: Callable[[str], None] | None = None,
                 initial: WorkerConfig | None = None) -> None:
        self.path = path
        self.node_name = node_name
        self.on_rejected = on_rejected
        self._lock = threading.Lock()
        self._digest = content_digest(path)
        self.current = initial if initial is not None else load_worker_config(path, node_name)
        self.generation = 0
        self.rejected_digest = ""
        self.last_error: str | None = None

    def reload(self) -> bool:
        """Re-read the file if its content changed; True when a new configuration is in use."""
        with self._lock:
            digest = content_digest(self.path)
            if digest in (self._digest, self.rejected_digest):
                return False
            try:
                candidate = load_worker_config(self.path, self.node_name)
            except WorkerConfigError as exc:
                self.rejected_digest = digest
                self.last_error = f"--config {self.path} changed but is invalid, keeping the last good configuration: {exc}"
                log.error("%s", self.last_error, extra={"event": "config-rejected"})
                if self.on_rejected is not None:
                    try:
                        self.on_rejected(self.last_error)
                    except Exception:
                        log.exception("reporting the invalid configuration failed")
                return False
            for warning in candidate.warnings:
                log.warning("--config: %s", warning, extra={"event": "config-warning"})
            self.current, self._digest = candidate, digest
            self.rejected_digest, self.last_error = "", None
            self.generation += 1
            log.info("configuration %s reloaded", self.path, extra={"event": "config-reloaded"})
            return True
