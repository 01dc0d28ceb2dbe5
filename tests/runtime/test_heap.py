"""``limit_malloc_arenas``: glibc really keeps one arena for every thread afterwards.

Checked from glibc's own report (``malloc_stats`` prints one ``Arena N:`` block per arena to
stderr) in a fresh interpreter whose threads each allocate; without the limit the same
program shows an arena per thread, so the test cannot pass on a no-op."""

from __future__ import annotations

import ctypes.util
import subprocess
import sys

import pytest

from tests.conftest import REPO

PROGRAM = """
import ctypes, sys, threading
from agent.runtime.heap import limit_malloc_arenas
if sys.argv[1] == "limit":
    assert limit_malloc_arenas() is True
keep = []
def work():
    keep.append([bytearray(4096) for _ in range(64)])  # malloc'd by this thread (above pymalloc's 512 B)
threads = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
sys.stderr.flush()
ctypes.CDLL("libc.so.6").malloc_stats()
"""


def arenas(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", PROGRAM, mode], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return sum(1 for line in out.stderr.splitlines() if line.startswith("Arena "))


@pytest.mark.skipif(not (ctypes.util.find_library("c") or "").startswith("libc.so"), reason="not glibc")
def test_threads_share_one_arena_after_the_limit():
    assert arenas("default") > 1  # glibc's default: a new arena for threads that allocate
    assert arenas("limit") == 1

