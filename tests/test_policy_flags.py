"""The label namespace policy (``--deny-label-ns`` / ``--extra-label-ns``) reaches every command
that loads the catalogue: ``plan`` previews exactly what ``apply`` and ``run`` write."""

from __future__ import annotations

import json

import pytest

from agent.cli import build_parser, main
from agent.commands.run import settings_from_args
from agent.reconcile.node_api import NodeApi
from agent.runtime.agent import Agent
from tests.conftest import FIXTURES
from tests.runtime.helpers import EDGETPU_LABEL, EDGETPU_RESOURCE, has_edgetpu, wait_for
from tests.support.apiserver import FakeApiServer

NODE = "coral-usb-1"
HOST = str(FIXTURES / "coral-usb")
DENY = ("--deny-label-ns", "accelerators")


@pytest.mark.parametrize("command", ["plan", "explain", "validate", "apply", "run"])
def test_every_catalogue_command_takes_the_policy_flags(command):
    positional = [EDGETPU_LABEL] if command == "explain" else []
    args = build_parser().parse_args([command, *positional, *DENY, "--extra-label-ns", "extra.example.com"])
    assert args.deny_label_ns == ["accelerators"] and args.extra_label_ns == ["extra.example.com"]


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE)
        yield srv


def _apply(server, tmp_path, capsys, *extra):
    kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
    code = main(["apply", "--once", "--host-root", HOST, "--format", "json", "--node-name", NODE,
                 "--kubeconfig", str(kubeconfig), "--no-events", *extra])
    return code, json.loads(capsys.readouterr().out)


def test_apply_honours_a_denied_namespace(server, tmp_path, capsys):
    code, report = _apply(server, tmp_path, capsys, *DENY)
    assert code == 0, report
    assert EDGETPU_LABEL not in report["desired"]["labels"]
    assert any(EDGETPU_LABEL in p["item"] for p in report["desired_problems"])
    labels = server.node(NODE)["metadata"]["labels"]
    assert EDGETPU_LABEL not in labels
    assert any(k.startswith("feature.node.kubernetes.io/") for k in labels)  # the rest still applied
    # without the flag the same host does get it (the test can fail)
    code, report = _apply(server, tmp_path, capsys)
    assert code == 0 and report["desired"]["labels"][EDGETPU_LABEL] == "true"
    assert server.node(NODE)["metadata"]["labels"][EDGETPU_LABEL] == "true"


def test_run_honours_a_denied_namespace(server):
    args = build_parser().parse_args(["run", "--host-root", HOST, "--node-name", NODE, *DENY, "--udev-mode=off",
                                      "--metrics-port=off", "--no-events", "--startup-jitter=0"])
    settings = settings_from_args(args)
    assert settings.rule_options.deny_label_ns == ("accelerators",)
    agent = Agent(settings, NodeApi.from_configuration(server.client_configuration())).start()
    try:
        wait_for(agent.ready.is_set, what="first reconcile")
        node = server.node(NODE)
        assert has_edgetpu(node) == (False, True)  # the resource is not a label: the label policy leaves it
        assert EDGETPU_RESOURCE in node["status"]["capacity"]
    finally:
        assert agent.stop(timeout=5)
