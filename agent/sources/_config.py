"""How a source declares its configuration section: a frozen dataclass whose fields say
where in ``nfd-worker.conf`` they are set.

As NFD's ``source/<name>`` each owns its ``Config`` and ``newDefaultConfig()``, each of our
sources defines ``Config`` with its defaults; the runner only hands it its section.  A field
made with :func:`nfd_option` is read from ``sources.<source>.<key>`` (NFD's own key, dotted for
nesting: ``cpuid.attributeBlacklist``); one made with :func:`agent_option` from our own section,
``nodeFeatureAgent.sources.<source>.<key>``, which NFD ignores.  A plain field is set by the
runner (``system``'s node name), never from the file.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

STRINGS = "strings"
"""A YAML list of strings (``tuple[str, ...]`` in the dataclass)."""
STRING = "string"


def nfd_option(key: str, default: Any, kind: str = STRINGS) -> Any:
    """A field set by ``sources.<source>.<key>`` of nfd-worker.conf."""
    return field(default=default, metadata={"section": "sources", "key": key, "kind": kind})


def agent_option(key: str, default: Any, kind: str = STRINGS) -> Any:
    """A field set by ``nodeFeatureAgent.sources.<source>.<key>`` (our addition)."""
    return field(default=default, metadata={"section": "nodeFeatureAgent.sources", "key": key, "kind": kind})
