"""The agent process's heap: one glibc malloc arena (``mallopt(M_ARENA_MAX, 1)``), and the
start-up heap frozen out of the cyclic collector's reach (``gc.freeze``).

One arena: glibc gives each thread that allocates its own arena (up to 8 per core), and freed
memory in one arena is not reused by another: the agent's threads (worker, Node watch, hotplug
monitor, rules watcher, HTTP server) each kept pages of their own, about 0.5 MiB of RSS on
``dgx-usb-lab`` (bench/memory.py). Extra arenas buy nothing here: CPython allocates under the
GIL, so threads never contend for malloc's lock in a way an arena per thread would relieve.
Set before the agent starts its threads (an arena is chosen on a thread's first malloc).
Not glibc (musl, other platforms): nothing to do.
"""

from __future__ import annotations

import gc

M_ARENA_MAX = -8
"""glibc ``malloc.h``: ``#define M_ARENA_MAX -8``."""


def limit_malloc_arenas(arenas: int = 1) -> bool:
    """Cap glibc's arenas at ``arenas``; True when glibc accepted it."""
    try:
        import ctypes

        mallopt = ctypes.CDLL("libc.so.6").mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(M_ARENA_MAX, arenas) == 1)  # ctypes answers an untyped int


def freeze_startup_heap() -> int:
    """Collect once, then move every object start-up made into the collector's permanent
    generation (``gc.freeze``); the number of objects frozen.

    Why: the ``kubernetes`` client's import leaves ~48,000 objects that live as long as the
    process, and every full collection scanned all of them again (15 ms each in the agent
    process; on dgx-usb-lab nine full collections every 100 passes, 1.6 ms of collection per
    pass in all, against 0.2 ms once they are frozen: bench/README.md).  Frozen objects are
    still freed by reference counting; only a reference cycle among them would outlive its
    use, which is why the collection runs first.  Call it once, after start-up's imports and
    before the agent's threads start."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
