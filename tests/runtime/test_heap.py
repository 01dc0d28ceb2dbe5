"""``limit_malloc_arenas``: glibc really keeps one arena for every thread afterwards; and
``freeze_startup_heap`` takes start-up's objects out of every full collection.

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


FREEZE_PROGRAM = """
import gc, json, sys, weakref
from agent.runtime.heap import freeze_startup_heap
import kubernetes.client  # what makes the agent's start-up heap big
class Node:
    pass
node = Node(); node.self = node  # a reference cycle start-up left behind
dead = weakref.ref(node); del node
config = {"kept": ["by", "start-up"]}
tracked_before = len(gc.get_objects())
frozen = freeze_startup_heap()
print(json.dumps({"frozen": frozen, "count": gc.get_freeze_count(), "cycle_collected": dead() is None,
                  "config_still_scanned": any(o is config for o in gc.get_objects()),
                  "tracked_before": tracked_before, "tracked_after": len(gc.get_objects())}))
"""


def test_freezing_the_startup_heap_takes_it_out_of_full_collections():
    """After ``freeze_startup_heap`` the objects start-up made (tens of thousands, with the
    kubernetes client imported) are no longer among those a full collection scans
    (``gc.get_objects()`` lists the collector's generations, not its permanent one), and a
    cycle start-up left behind was collected first rather than frozen for good."""
    out = subprocess.run([sys.executable, "-c", FREEZE_PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    found = __import__("json").loads(out.stdout)
    assert found["frozen"] == found["count"] > 20000
    assert found["cycle_collected"] is True
    assert found["config_still_scanned"] is False
    assert found["tracked_after"] < found["tracked_before"] // 100
