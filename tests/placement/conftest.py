"""The real registry the placement tests share (one per test module, stopped by PID)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.images.registries import RegistryProcess
from tests.placement.harness import start_registry


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryProcess]:
    process = start_registry(tmp_path_factory.mktemp("placement-registry"))
    try:
        yield process
    finally:
        process.stop()
