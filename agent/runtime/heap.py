"""The agent process's heap: one glibc malloc arena (``mallopt(M_ARENA_MAX, 1)``).

One arena: glibc gives each thread that allocates its own arena (up to 8 per core), and freed
memory in one arena is not reused by another: the agent's threads (worker, Node watch, hotplug
monitor, rules watcher, HTTP server) each kept pages of their own, about 0.5 MiB of RSS on
``dgx-usb-lab`` (bench/memory.py). Extra arenas buy nothing here: CPython allocates under the
GIL, so threads never contend for malloc's lock in a way an arena per thread would relieve.
Set before the agent starts its threads (an arena is chosen on a thread's first malloc).
Not glibc (musl, other platforms): nothing to do.
"""

from __future__ import annotations

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

