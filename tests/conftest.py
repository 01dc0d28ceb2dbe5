"""Shared pytest fixtures: paths to the repo, the shipped catalogue and the recorded hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures" / "sysfs"
LABELS_DIR = REPO / "labels"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES
