"""A taint the agent set from a rule is the agent's for its whole life: when no rule produces
it any more (the rule deleted, or edited to drop it) the agent removes it, NoExecute included,
whether the rule came from a file or a NodeFeatureRule object, and across an agent restart;
a taint it did not set (an identical one that was there first, the same key with another
effect, a forged ownership-record entry) is never removed.

Expected behaviour from NFD: nfd-master removes the taints its own annotation
``nfd.node.kubernetes.io/taints`` lists and no rule produces any more (``setTaints`` in
``pkg/nfd-master/nfd-master.go`` at 76e6cc8c: ``DeleteTaint`` for every old taint not in the new
set); its e2e test expects a NodeFeatureRule's taints gone after the object is deleted
(``test/e2e/node_feature_discovery_test.go``, "taints should be removed"). Real agent, real
client, the in-repo API server.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.desired import ANNOTATION_OWNED_TAINTS
from agent.reconcile import BackoffSettings
from agent.reconcile.node_api import NodeApi
from agent.runtime import cluster_watch
from agent.runtime.agent import Agent, Settings
from tests.conftest import FIXTURES
from tests.runtime.helpers import wait_for
from tests.support.apiserver import FakeApiServer

NODE = "intel-1"
#: set before any agent ran: identical to one the rule produces, and the same key as another
#: with a different effect (taints are unique by key and effect)
ADMIN = [{"key": "example.com/shared", "value": "true", "effect": "NoSchedule"},
         {"key": "example.com/evict", "value": "admin", "effect": "PreferNoSchedule"}]
RULE_TAINTS = [{"key": "example.com/shared", "value": "true", "effect": "NoSchedule"},
               {"key": "example.com/evict", "value": "true", "effect": "NoExecute"},
               {"key": "example.com/soft", "effect": "PreferNoSchedule"}]
RULE_SET: dict[str, Any] = {
    "apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeatureRule", "metadata": {"name": "taints"},
    "spec": {"rules": [{"name": "intel cpu", "taints": RULE_TAINTS,
                        "matchFeatures": [{"feature": "cpu.model",
                                           "matchExpressions": {"vendor_id": {"op": "In", "value": ["Intel"]}}}]}]},
}
OURS = {("example.com/evict", "NoExecute"), ("example.com/soft", "PreferNoSchedule")}


@pytest.fixture(autouse=True)
def quick_absent_retry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_watch, "ABSENT_RETRY", BackoffSettings(initial=0.05, maximum=0.2, jitter=0.0))


def start(server: FakeApiServer, rules_dir: Path, *, from_cluster: bool) -> Agent:
    settings = Settings(node_name=NODE, rules_dirs=[str(rules_dir)], host_root=str(FIXTURES / "intel-server"),
                        metrics_port=None, udev_mode="off", watch_timeout=30, rules_from_cluster=from_cluster,
                        enable_taints=True,  # object taints apply only with --enable-taints, as in NFD's e2e
                        backoff=BackoffSettings(initial=0.05, maximum=0.2))
    agent = Agent(settings, NodeApi.from_configuration(server.client_configuration())).start()
    wait_for(agent.ready.is_set, what="first reconcile")
    return agent


def taints(server: FakeApiServer) -> set[tuple[str, str, str]]:
    return {(t["key"], t.get("value", ""), t["effect"]) for t in server.node(NODE)["spec"].get("taints") or []}


def record(server: FakeApiServer) -> str:
    return (server.node(NODE)["metadata"].get("annotations") or {}).get(ANNOTATION_OWNED_TAINTS, "")


def identities(server: FakeApiServer) -> set[tuple[str, str]]:
    return {(k, e) for k, _v, e in taints(server)}


ADMIN_SET = {(t["key"], t["value"], t["effect"]) for t in ADMIN}


def test_object_taints_go_with_their_rule_across_a_restart_and_foreign_ones_stay(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    with FakeApiServer(nfd_crds=True, bookmark_interval=0.5) as server:
        server.add_node(NODE, taints=copy.deepcopy(ADMIN))
        server.custom.apply(RULE_SET)
        first = start(server, rules, from_cluster=True)
        try:
            wait_for(lambda: identities(server) >= OURS, what="the rule's taints")
        finally:
            first.stop(timeout=5)
        # the identical admin taint was there first: present, and not the agent's
        assert record(server) == "example.com/evict=true:NoExecute,example.com/soft:PreferNoSchedule"
        assert taints(server) >= ADMIN_SET

        second = start(server, rules, from_cluster=True)  # a new process: no memory of the first
        try:
            # the rule is edited once this process has held its taints with the rule read: an
            # edit before its first read is one made while no agent ran (claims.py: stays)
            wait_for(lambda: second.reconciler._vouched_taints >= OURS, what="the taints vouched for")
            edited = copy.deepcopy(RULE_SET)
            edited["spec"]["rules"][0]["taints"] = [t for t in RULE_TAINTS if t["effect"] != "PreferNoSchedule"]
            server.custom.apply(edited)  # edited to drop one taint
            wait_for(lambda: ("example.com/soft", "PreferNoSchedule") not in identities(server), what="dropped taint")
            assert ("example.com/evict", "NoExecute") in identities(server)
            server.custom.delete("NodeFeatureRule", "taints")  # deleted: its NoExecute taint goes too
            wait_for(lambda: not OURS & identities(server), what="the deleted rule's taints removed")
            wait_for(lambda: record(server) == "", what="the record emptied")
            assert taints(server) == ADMIN_SET
        finally:
            second.stop(timeout=5)


def test_a_forged_record_entry_for_a_taint_never_held_is_refused_after_the_rule_goes(tmp_path: Path) -> None:
    """The memory is per (key, effect): an entry naming the admin's taint with a key the agent
    once produced (another effect) is still refused."""
    rules = tmp_path / "rules"
    rules.mkdir()
    with FakeApiServer(nfd_crds=True, bookmark_interval=0.5) as server:
        server.add_node(NODE, taints=copy.deepcopy(ADMIN))
        server.custom.apply(RULE_SET)
        agent = start(server, rules, from_cluster=True)
        try:
            wait_for(lambda: identities(server) >= OURS, what="the rule's taints")
            server.custom.delete("NodeFeatureRule", "taints")
            wait_for(lambda: not OURS & identities(server), what="the rule's taints removed")

            def forge(node: dict[str, Any]) -> dict[str, Any]:
                node["metadata"]["annotations"][ANNOTATION_OWNED_TAINTS] = \
                    "example.com/evict=admin:PreferNoSchedule,example.com/shared=true:NoSchedule"
                return node
            server.edit_node(NODE, forge)
            wait_for(lambda: any(e.get("reason") == "OwnershipRecordRejected" and "example.com/evict" in
                                 (e.get("message") or e.get("note") or "") for e in server.events()),
                     what="the forged entries reported")
            wait_for(lambda: record(server) == "", what="the forged entries dropped from the record")
            assert taints(server) == ADMIN_SET
        finally:
            agent.stop(timeout=5)


def test_file_taints_go_when_the_file_is_edited_and_deleted(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    rule_file = rules / "taints.yaml"
    rule_file.write_text(yaml.safe_dump(RULE_SET))
    with FakeApiServer() as server:
        server.add_node(NODE, taints=copy.deepcopy(ADMIN))
        agent = start(server, rules, from_cluster=False)
        try:
            wait_for(lambda: identities(server) >= OURS, what="the rule's taints")
        finally:
            agent.stop(timeout=5)
        agent = start(server, rules, from_cluster=False)  # restart in between
        try:
            edited = copy.deepcopy(RULE_SET)
            edited["spec"]["rules"][0]["taints"] = [t for t in RULE_TAINTS if t["effect"] != "NoExecute"]
            rule_file.write_text(yaml.safe_dump(edited))
            wait_for(lambda: ("example.com/evict", "NoExecute") not in identities(server), what="NoExecute removed")
            assert ("example.com/soft", "PreferNoSchedule") in identities(server)
            rule_file.unlink()
            wait_for(lambda: not OURS & identities(server), what="the file's taints removed")
            wait_for(lambda: record(server) == "", what="the record emptied")
            assert taints(server) == ADMIN_SET
        finally:
            agent.stop(timeout=5)
