"""CPU facts from py-cpuinfo, for the rare live host whose ``/proc/cpuinfo`` lacks them.

py-cpuinfo is slow (about a second; it spawns a process), and it reads the machine the agent
runs on, not a host root.  So it is used at most once per process, only on the live host
(``HostFS.is_live``), and only when ``/proc/cpuinfo`` cannot say what the CPU is.  A snapshot
records the facts at :data:`LIVE_FACTS_PATH` inside the recorded tree; a replay reads that
file instead, so a fixture never runs py-cpuinfo and replays exactly.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

from agent.hostfs import HostFS
from agent.sources.cpu_cpuinfo import CpuInfoBlock

log = logging.getLogger(__name__)

LIVE_FACTS_PATH = "/.node-feature-agent/cpu-live.json"
"""Host path (inside a host root) of recorded live-only CPU facts, written by ``snapshot``."""

_FACT_TYPES: dict[str, type] = {"arch": str, "vendor_id": str, "family": int, "model": int, "flags": list,
                               "aarch32_el0": bool}  # agent.sources.cpu_arm32

_lock = threading.Lock()
_cached: dict[str, Any] | None = None


class LiveFactsError(ValueError):
    """A recorded live-facts file that is not the JSON object :func:`live_cpu_facts` writes."""


def live_cpu_facts() -> dict[str, Any]:
    """The py-cpuinfo subset the cpu source uses, JSON-serialisable; ``{}`` if py-cpuinfo fails.

    Runs py-cpuinfo at most once per process (the result, even a failure, is cached).
    """
    global _cached
    with _lock:
        if _cached is None:
            _cached = _probe()
        return {k: (list(v) if isinstance(v, list) else v) for k, v in _cached.items()}


def _probe() -> dict[str, Any]:
    try:
        import cpuinfo

        info = cpuinfo.get_cpu_info()
    except Exception as exc:  # noqa: BLE001 - py-cpuinfo runs helpers and parses their output: any failure = no facts
        log.warning("py-cpuinfo failed, no live CPU facts: %s", exc)
        return {}
    facts: dict[str, Any] = {
        "arch": str(info.get("arch_string_raw", "")),
        "vendor_id": str(info.get("vendor_id_raw", "")),
        "flags": sorted(str(f) for f in info.get("flags", []) if isinstance(f, str)),
    }
    for key in ("family", "model"):
        if isinstance(info.get(key), int):
            facts[key] = info[key]
    return facts


def recorded_facts(host: HostFS) -> dict[str, Any] | None:
    """The facts a snapshot recorded in this host tree, ``None`` when there are none.

    Raises :class:`LiveFactsError` (or ``HostFileError``) for a file that is there but unusable.
    """
    if not host.exists(LIVE_FACTS_PATH):
        return None
    text = host.read_text(LIVE_FACTS_PATH)
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise LiveFactsError(f"not JSON: {exc}") from exc
    except RecursionError as exc:  # "[[[[..." nested deeper than the parser's stack
        raise LiveFactsError("not JSON: nested too deeply") from exc
    if not isinstance(data, dict):
        raise LiveFactsError("not a JSON object")
    facts: dict[str, Any] = {}
    for key, kind in _FACT_TYPES.items():
        if key not in data:
            continue
        value = data[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise LiveFactsError(f"{key!r} is {type(value).__name__}, expected {kind.__name__}")
        if isinstance(value, list) and not all(isinstance(f, str) for f in value):  # kind is list
            raise LiveFactsError(f"{key!r} must be a list of strings")
        facts[key] = value
    return facts


def facts_for(host: HostFS) -> tuple[dict[str, Any] | None, str]:
    """(facts, where they came from): recorded in the tree, else live py-cpuinfo on ``/``."""
    recorded = recorded_facts(host)
    if recorded is not None:
        return recorded, LIVE_FACTS_PATH
    if host.is_live:
        return live_cpu_facts(), "py-cpuinfo"
    return None, ""


def facts_as_block(facts: dict[str, Any]) -> CpuInfoBlock:
    """Present py-cpuinfo facts as the ``/proc/cpuinfo`` block they stand in for (x86 and ARM
    only; an empty block, which the source reports, for any other architecture)."""
    arch = str(facts.get("arch", "")).lower()
    flags = " ".join(facts.get("flags", []))
    if arch.startswith(("aarch64", "arm64")):
        return CpuInfoBlock({"Features": flags, "CPU architecture": "8"})
    if arch.startswith("arm"):
        return CpuInfoBlock({"Features": flags, "CPU architecture": "7"})
    if not arch.startswith(("x86", "amd64", "i386", "i486", "i586", "i686")):
        return CpuInfoBlock()  # s390x, ppc64le, riscv64...: py-cpuinfo's flags are not NFD's hwcaps
    fields = {"vendor_id": str(facts.get("vendor_id", "")), "flags": flags}
    if "family" in facts:
        fields["cpu family"] = str(facts["family"])
    if "model" in facts:
        fields["model"] = str(facts["model"])
    return CpuInfoBlock(fields)

