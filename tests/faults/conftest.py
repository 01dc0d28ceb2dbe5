"""Fixtures for the fault matrix: a fresh API server with the seeded node, a ledger watching
every version of it, and the in-process agent (stopped in teardown, bounded)."""

from __future__ import annotations

import pytest

from tests.faults.harness import Harness, Ledger, seed_node
from tests.support.apiserver import FakeApiServer


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        seed_node(srv)
        yield srv


@pytest.fixture
def ledger(server):
    return Ledger(server)


@pytest.fixture
def make_harness(tmp_path, server):
    made = []

    def make(**kw):
        where = tmp_path / f"h{len(made)}"
        where.mkdir()
        harness = Harness(where, server, **kw)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()
