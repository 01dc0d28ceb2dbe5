"""The package's layering, as import-linter contracts in pyproject.toml ([tool.importlinter]):
discovery sources import no other layer, rules and reconcile do not know each other, the Go
template/regexp engine is used only through its public modules, and nothing below the
reconciler imports kubernetes. A second run on a copy with one forbidden import proves the
check can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT)], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_every_layering_contract_is_kept():
    done = lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "5 kept, 0 broken" in done.stdout


def test_a_forbidden_import_breaks_a_contract(tmp_path):
    shutil.copytree(REPO / "agent", tmp_path / "agent", ignore=shutil.ignore_patterns("__pycache__", "labels"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    hostfs = tmp_path / "agent" / "sources" / "usb.py"
    hostfs.write_text(hostfs.read_text() + "\nfrom agent.rules import evaluate  # noqa\n")
    done = lint(tmp_path)
    assert done.returncode != 0
    assert "discovery sources import no other layer BROKEN" in done.stdout
