"""The package's layering, as import-linter contracts in pyproject.toml ([tool.importlinter]):
the layers (cli, commands, preflight, runtime, config, ... down to the seam: each imports only
from below; every module of the package is in one), discovery sources import no other layer, rules and reconcile do not know each other, the Go
template/regexp engine is used only through its public modules, and nothing below the
reconciler imports kubernetes. A second run on a copy with one forbidden import proves the
check can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.conftest import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([str(LINT)], cwd=root, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_every_layering_contract_is_kept():
    done = lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    assert f"{len(contracts)} kept, 0 broken" in done.stdout


def test_every_module_of_the_package_is_in_a_layer():
    """A module outside the layers may import anything and be imported by anything."""
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c["layers"] for c in contracts if c["type"] == "layers")
    layered = {name.strip() for layer in layers for name in layer.split("|")}
    modules = {f"agent.{p.stem}" for p in (REPO / "agent").glob("*.py") if p.stem not in ("__init__", "__main__")}
    packages = {f"agent.{p.parent.name}" for p in (REPO / "agent").glob("*/__init__.py")}
    assert modules | packages <= layered, sorted((modules | packages) - layered)


def copy_with_import(tmp_path: Path, module: str, line: str) -> Path:
    shutil.copytree(REPO / "agent", tmp_path / "agent", ignore=shutil.ignore_patterns("__pycache__", "labels"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    path = tmp_path / "agent" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    return tmp_path


def test_a_forbidden_import_breaks_a_contract(tmp_path):
    done = lint(copy_with_import(tmp_path, "sources/usb.py", "from agent.rules import evaluate"))
    assert done.returncode != 0
    assert "discovery sources import no other layer BROKEN" in done.stdout


def test_an_import_upwards_breaks_the_layers(tmp_path):
    """The configuration once imported preflight's error type while preflight imported the
    configuration: a circle the layers now forbid."""
    done = lint(copy_with_import(tmp_path, "config.py", "from agent.preflight import check_args"))
    assert done.returncode != 0
    assert "layers BROKEN" in done.stdout
