"""The generators and readers kept beside the recordings in ``fixtures/recorded/`` (scripts,
not a package): imported by name with that directory on ``sys.path`` for the import only, so
their own imports of each other (``make_dt_boards`` -> ``dts_text``) resolve."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "recorded"


def recorded_tool(name: str) -> ModuleType:
    sys.path.insert(0, str(RECORDED))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(RECORDED))
