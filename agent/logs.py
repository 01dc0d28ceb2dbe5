"""Logging set-up: one JSON object a line in the pod, human text on a terminal.

Every record may carry ``node``, ``event`` and ``change`` (pass them with ``extra=``); the
JSON formatter emits them as fields so a log pipeline can filter by node and event.
"""

from __future__ import annotations

import json
import logging
import sys
import time

_EXTRA_FIELDS = ("node", "event", "change")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                out[name] = getattr(record, name)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str, sort_keys=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s", "%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        extras = [f"{n}={getattr(record, n)}" for n in _EXTRA_FIELDS if hasattr(record, n)]
        return f"{text} [{' '.join(extras)}]" if extras else text


def setup_logging(fmt: str = "auto", level: str = "info") -> None:
    """``fmt``: ``json``, ``text`` or ``auto`` (text on a TTY, JSON otherwise). Logs go to stderr."""
    if fmt == "auto":
        fmt = "text" if sys.stderr.isatty() else "json"
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
