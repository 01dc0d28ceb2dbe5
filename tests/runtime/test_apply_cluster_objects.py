"""``apply`` evaluates the cluster's NodeFeatureRule and NodeFeature objects as ``run`` does:
``apply`` after ``run`` changes nothing, so it never removes a label that came from an object;
when the objects cannot be read (not "absent": the read failed) it writes nothing.

The agent in-process (``run``'s loop), ``apply`` as the installed console script, the in-repo
API server serving NFD's CRDs, on the recorded Intel server fixture.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES
from tests.runtime.helpers import wait_for
from tests.runtime.test_cluster_objects import INTEL, NODE, THIRD_PARTY_RULE, labels_of, node_feature, start_agent
from tests.support.apiserver import FakeApiServer

CLI = str(Path(sys.executable).parent / "node-feature-agent")

pytestmark = pytest.mark.slow


def apply(kubeconfig: Path, rules: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CLI, "--log-format", "json", "apply", "--once", "--host-root", str(FIXTURES / "intel-server"),
                           "--rules", str(rules), "--format", "json", "--node-name", NODE, "--kubeconfig", str(kubeconfig),
                           *extra], capture_output=True, text=True, timeout=120)


def test_apply_after_run_keeps_what_the_objects_gave(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    kubeconfig = tmp_path / "kubeconfig"
    with FakeApiServer(nfd_crds=True) as server:
        server.write_kubeconfig(kubeconfig)
        server.add_node(NODE)
        for obj in (INTEL, THIRD_PARTY_RULE, node_feature()):
            server.custom.apply(obj)
        agent = start_agent(server, rules, tmp_path)
        try:
            wait_for(lambda: "example.com/e2e-instance-x" in labels_of(server), what="labels from the objects")
        finally:
            agent.stop(timeout=5)
        after_run = labels_of(server)
        assert "intel.feature.node.kubernetes.io/qat" in after_run

        done = apply(kubeconfig, rules)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["applied"] == []  # the same Node: nothing to change
        assert labels_of(server) == after_run

        off = apply(kubeconfig, rules, "--dry-run", "--rules-from-cluster", "off")  # what the old apply did
        assert any("remove" in line and "intel.feature.node.kubernetes.io/qat" in line
                   for line in json.loads(off.stdout)["applied"])


def test_apply_writes_nothing_when_the_objects_cannot_be_read(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    kubeconfig = tmp_path / "kubeconfig"
    with FakeApiServer(nfd_crds=True) as server:
        server.write_kubeconfig(kubeconfig)
        server.add_node(NODE)
        server.custom.apply(INTEL)
        agent = start_agent(server, rules, tmp_path)
        try:
            wait_for(lambda: "intel.feature.node.kubernetes.io/qat" in labels_of(server), what="Intel labels")
        finally:
            agent.stop(timeout=5)
        before = server.node(NODE)
        server.faults.fail(500, count=100, verb="GET", path="/apis/nfd.k8s-sigs.io/v1alpha1/nodefeaturerules")
        done = apply(kubeconfig, rules, "--retries", "1")
        assert done.returncode == 1
        assert "nothing written" in json.loads(done.stdout)["error"]
        assert server.node(NODE)["metadata"] == before["metadata"]
