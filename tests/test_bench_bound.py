"""bench/discovery_bound.py's reference passes must find exactly what the sources find.

Why: the bench's "inline" pci and usb passes are the yardstick for how far the sources' Python
is from the least any Python can do; a yardstick that read less, or built other instances,
would flatter the sources.  The bench refuses to print a bound when they differ (exit 1); this
runs it once per big fixture so a source change that the inline passes do not follow shows
here, not only when someone runs the bench.  (Timings are printed, never asserted.)
"""

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _bench():
    sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("discovery_bound", REPO / "bench" / "discovery_bound.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("case", ["dgx-usb-lab", "nvidia-8gpu"])
def test_inline_passes_find_what_the_sources_find(case, capsys):
    assert _bench().main(["--case", case, "--runs", "1"]) == 0
    out = capsys.readouterr().out
    assert "both inline passes found the same" in out
    assert "pci: 400 instances" in out if case == "dgx-usb-lab" else "pci:" in out


def test_a_difference_is_refused(monkeypatch, capsys):
    """The guard itself: an inline pass that misses a device gets no bound printed."""
    bench = _bench()
    real = bench.inline_usb
    monkeypatch.setitem(bench.INLINE, "usb", lambda root, checks: (real(root, checks)[0][1:], real(root, checks)[1]))
    assert bench.main(["--case", "nvidia-8gpu", "--runs", "1"]) == 1
    assert "does not find what the source finds" in capsys.readouterr().out
