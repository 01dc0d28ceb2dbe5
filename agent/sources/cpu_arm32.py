"""Which 32-bit Arm code the CPU runs: the ``cpu.arm32`` feature (our extension; NFD has none).

Its one attribute, ``variant`` (``v5``..``v8``), is what the catalogue publishes as
``node-feature-agent.io/arm32-variant`` and what the placement controller selects on for
``linux/arm/vN`` images (``agent.placement.nodeclasses``):

* **A 32-bit Arm kernel**: the ELF platform the kernel prints at the end of the processor
  line of ``/proc/cpuinfo``: ``model name : ARMv7 Processor rev 4 (v7l)`` (older kernels:
  ``Processor : ...``) gives ``v7``. Linux ``arch/arm/kernel/setup.c`` ``c_show`` prints
  ``"%s rev %d (%s)"`` with ``elf_platform``, the CPU table's ELF name (``v5``, ``v6``,
  ``v7``) plus the byte order (``l``/``b``). The ``CPU architecture`` line is not used: it
  comes from the CPUID scheme (``cpu_architecture()``), which names some ARMv6 cores 7.
* **An arm64 kernel**: ``v8`` when it runs 32-bit user code at all, that is when every CPU
  has AArch32 at EL0 and the kernel was built with ``COMPAT``. No file says so; the kernel
  answers ``personality(PER_LINUX32)`` with ``EINVAL`` exactly when
  ``system_supports_32bit_el0()`` is false (``arch/arm64/kernel/sys.c``,
  ``arm64_personality``). The probe asks the running kernel, so it runs only when the host
  root is that kernel (a bare host, or the DaemonSet's ``/host``), in a thread of its own
  (personality is per thread) that restores the old value; a snapshot records the answer as
  ``aarch32_el0`` in the live-facts file (``agent.sources.cpu_live``) and a replay reads it.
  A recording without it tells nothing: no feature. A probe the kernel refuses otherwise
  (a seccomp filter) leaves the feature undetermined, never absent.
"""

from __future__ import annotations

import ctypes
import errno
import re
import threading

from agent.hostfs import HostFileError, HostFS
from agent.sources.cpu_cpuinfo import CpuInfoBlock
from agent.sources.cpu_live import LIVE_FACTS_PATH, LiveFactsError, recorded_facts
from agent.sources.cpu_ownproc import host_root_is_this_kernel
from agent.sources.cpu_sysfs import CpuProbe

PROBE = "personality(PER_LINUX32)"
"""The origin ``explain`` shows for a variant the running kernel told."""

_PLATFORM = re.compile(r"\(v(\d+)[a-z]*\)\s*$")
_PER_LINUX32 = 0x0008  # include/uapi/linux/personality.h
_QUERY = 0xFFFFFFFF  # personality(0xffffffff) returns the current persona and changes nothing

_lock = threading.Lock()
_probed: tuple[bool | None, str] | None = None


def arm32_attributes(probe: CpuProbe, block: CpuInfoBlock, origin: str) -> tuple[dict[str, str] | None, str]:
    """``({"variant": "vN"}, where)``; ``({}, where)`` when the CPU runs no 32-bit Arm code or
    this tree cannot tell; ``(None, where)`` when it could not be determined (an error noted)."""
    if block.arch == "arm":
        line = block.fields.get("model name") or block.fields.get("Processor", "")
        match = _PLATFORM.search(line)
        if match is None:
            if line:
                probe.error(origin, f"no ELF platform in the processor line {line[:60]!r}")
            return {}, origin
        return {"variant": f"v{int(match.group(1))}"}, origin
    if block.arch != "arm64":
        return {}, origin
    try:
        recorded = recorded_facts(probe.host)
    except (HostFileError, LiveFactsError) as exc:
        probe.error(LIVE_FACTS_PATH, f"recorded CPU facts unusable: {exc}")
        return None, LIVE_FACTS_PATH
    if recorded is not None and "aarch32_el0" in recorded:
        return ({"variant": "v8"} if recorded["aarch32_el0"] else {}), LIVE_FACTS_PATH
    if not (probe.host.is_live or host_root_is_this_kernel(probe.host)):
        return {}, origin
    supported, problem = aarch32_el0()
    if supported is None:
        probe.error(PROBE, problem)
        return None, PROBE
    return ({"variant": "v8"} if supported else {}), PROBE


def aarch32_el0() -> tuple[bool | None, str]:
    """Whether the running kernel runs 32-bit Arm user code: ``(True|False, "")``, or
    ``(None, why)`` when it would not say. Asked once per process (the answer cannot change)."""
    global _probed
    with _lock:
        if _probed is None:
            answer: list[tuple[bool | None, str]] = []
            thread = threading.Thread(target=lambda: answer.append(_ask_kernel()), name="aarch32-probe")
            thread.start()
            thread.join()
            _probed = answer[0] if answer else (None, "the probe thread failed")
        return _probed


def _ask_kernel() -> tuple[bool | None, str]:
    try:
        personality = ctypes.CDLL(None, use_errno=True).personality
    except (OSError, AttributeError) as exc:
        return None, f"personality(2) unavailable: {exc}"
    personality.argtypes = [ctypes.c_ulong]
    personality.restype = ctypes.c_int
    old = personality(_QUERY)
    if old == -1:
        return None, f"personality(2) refused: {errno.errorcode.get(ctypes.get_errno(), '?')}"
    if personality(_PER_LINUX32) == -1:
        code = ctypes.get_errno()
        if code == errno.EINVAL:
            return False, ""
        return None, f"personality(PER_LINUX32) refused: {errno.errorcode.get(code, '?')}"
    personality(old)
    return True, ""


def snapshot_facts(host: HostFS) -> dict[str, bool]:
    """What a snapshot of ``host`` records for a replay: ``{"aarch32_el0": ...}`` on a live
    arm64 kernel that answered, else nothing."""
    import platform

    if not host.is_live or platform.machine() not in ("aarch64", "arm64"):
        return {}
    supported, _ = aarch32_el0()
    return {} if supported is None else {"aarch32_el0": supported}
