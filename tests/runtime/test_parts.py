"""One list of the agent's parts: whatever part's thread dies, ``/healthz`` fails naming it;
``stop`` ends every part. Against the in-repo API server, the agent in-process, on the
recorded Intel server fixture, with NFD's CRDs served (so the NFD object watches run)."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime.agent import Agent, Settings
from tests.conftest import FIXTURES
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODE = "intel-1"


def healthz(agent: Agent) -> tuple[int, str]:
    assert agent.http is not None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{agent.http.port}/healthz", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.parametrize("victim", ["node watch", "NFD object watch", "rules watcher"])
def test_a_dead_part_of_any_kind_fails_healthz(tmp_path: Path, victim: str) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    with FakeApiServer(nfd_crds=True, bookmark_interval=300) as server:
        server.add_node(NODE)
        settings = Settings(node_name=NODE, rules_dirs=[str(rules)], host_root=str(FIXTURES / "intel-server"),
                            metrics_port=0, metrics_host="127.0.0.1", udev_mode="off", watch_timeout=30,
                            rules_from_cluster=True, backoff=BackoffSettings(initial=0.05, maximum=0.2))
        agent = Agent(settings, NodeApi.from_configuration(server.client_configuration())).start()
        try:
            wait_for(agent.ready.is_set, what="first reconcile")
            assert {"node watch", "NFD object watch", "rules watcher", "device events",
                    "metrics server"} <= set(agent.parts.names())
            assert healthz(agent) == (200, "ok\n")
            part = next(p for p in agent.parts if p.name == victim)
            if victim == "NFD object watch":
                assert agent.cluster is not None
                agent.cluster.watches[1].stop()  # one of the two kinds is enough
            else:
                part.stop(2.0)
            wait_for(lambda: not part.alive(), what=f"the {victim} to end")
            assert healthz(agent) == (500, f"{victim} thread died\n")
        finally:
            assert agent.stop(timeout=5)
        assert all(not p.alive() for p in agent.parts if p.name != "device events")  # udev off: no thread
