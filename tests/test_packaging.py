"""`pip install -e .` (the README's set-up line and .ci/run) must finish: package discovery may
only look at real packages, never walk the recorded sysfs trees, whose symlinks form cycles."""

from __future__ import annotations

import os
import tomllib

from setuptools import find_packages

from tests.conftest import FIXTURES, REPO


def test_package_discovery_is_not_namespace_discovery():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    assert config["namespaces"] is False
    packages = set(find_packages(where=str(REPO), include=config["include"]))
    on_disk = {os.path.relpath(root, REPO).replace(os.sep, ".") for root, _dirs, files in os.walk(REPO / "agent")
               if "__init__.py" in files}
    assert packages == on_disk and "agent.runtime" in packages


def test_fixtures_do_contain_symlink_cycles():
    """Why the flag matters: a cycle exists, so a symlink-following walk of fixtures/ never ends."""
    link = FIXTURES / "minimal" / "sys" / "class" / "net" / "lo" / "subsystem"
    assert link.is_symlink()
    assert os.path.samefile(link / "lo" / "subsystem", link)  # net/lo/subsystem/lo/subsystem/... forever
