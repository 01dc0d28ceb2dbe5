"""Shared pytest fixtures: paths to the repo, the shipped catalogue and the recorded hosts."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# CI must be reproducible: its run derandomizes hypothesis (the same examples for the same
# code), so a red CI is a real regression, not a new random draw. Local runs keep drawing new
# examples, which is how the fuzzers find bugs; a bug they find becomes an @example.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures" / "sysfs"
LABELS_DIR = REPO / "labels"


@pytest.fixture
def repo() -> Path:
    return REPO


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture
def socket_dir() -> Iterator[str]:
    """A fresh directory for unix sockets (kubelet's and the device plugins'), under /tmp: a
    socket path must stay under 108 bytes, which pytest's tmp_path does not promise."""
    path = tempfile.mkdtemp(prefix="dp-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _root_logging_kept() -> Iterator[None]:
    """A test that runs the CLI in-process (``cli.main``) installs its handler on the root
    logger, bound to that test's captured stderr; once the capture closes, every later test's
    log line (an agent thread's included) would end in a "Logging error" traceback."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
