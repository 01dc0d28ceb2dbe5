"""``run --config``: an edit of the nfd-worker.conf ConfigMap changes the Node's labels without a
restart; a broken edit keeps the last good configuration and says so with a Warning Event."""

from __future__ import annotations

import pytest

from agent.runtime.config_state import WorkerConfigState
from tests.runtime.configmap import write_configmap
from tests.runtime.helpers import wait_for
from tests.runtime.test_agent_e2e import NODE, Harness, server  # noqa: F401 - the API server fixture

P = "feature.node.kubernetes.io/"
FULL = P + "usb-ff_18d1_9302.present"      # NFD's default usb label fields: class, vendor, device
SHORT = P + "usb-ff_18d1.present"          # deviceLabelFields: [class, vendor]


def labels(harness):
    return harness.server.node(NODE)["metadata"]["labels"]


@pytest.fixture
def configured(tmp_path, server):  # noqa: F811
    config_dir = tmp_path / "worker-config"
    write_configmap(config_dir, {"nfd-worker.conf": "# NFD's defaults\n"})
    h = Harness(tmp_path, server, config_path=str(config_dir / "nfd-worker.conf"))
    yield h, config_dir
    h.close()


def test_an_edit_changes_labels_and_a_broken_edit_keeps_the_last_good(configured):
    harness, config_dir = configured
    harness.start()
    assert FULL in labels(harness) and SHORT not in labels(harness)

    write_configmap(config_dir, {"nfd-worker.conf": "sources:\n  usb:\n    deviceLabelFields: [class, vendor]\n"})
    wait_for(lambda: SHORT in labels(harness) and FULL not in labels(harness), what="labels from the edited config")

    write_configmap(config_dir, {"nfd-worker.conf": "sources:\n  usb:\n    deviceLabelFields: [class, vendor]\n"
                                                    "    deviceClassWhitelist: [ff, 0e]\n  gpu: {}\n"})
    wait_for(lambda: any(e["reason"] == "ConfigInvalid" for e in harness.server.events()), what="ConfigInvalid event")
    event = next(e for e in harness.server.events() if e["reason"] == "ConfigInvalid")
    assert event["type"] == "Warning" and "nfd-worker.conf:5: sources.gpu: unknown source" in event["message"]
    assert SHORT in labels(harness)  # still the last good configuration

    write_configmap(config_dir, {"nfd-worker.conf": "core:\n  labelSources: [pci]\n"})
    wait_for(lambda: not [k for k in labels(harness) if k.startswith(P + "usb-")], what="usb labels gone")
    assert harness.server.node(NODE)["metadata"]["labels"]["accelerators/edgetpu"] == "true"  # rules still see usb


def test_state_reports_a_broken_file_once_and_accepts_the_fix(tmp_path):
    path = tmp_path / "nfd-worker.conf"
    path.write_text("core:\n  labelWhiteList: '^pci-'\n")
    rejected: list[str] = []
    state = WorkerConfigState(str(path), on_rejected=rejected.append)
    assert state.current.discovery.label_whitelist == "^pci-" and not state.reload()
    path.write_text("core:\n  labelWhiteList: '('\n")
    assert not state.reload() and not state.reload()
    assert len(rejected) == 1 and f"{path}:2: core.labelWhiteList" in rejected[0]
    assert state.current.discovery.label_whitelist == "^pci-"
    path.unlink()
    assert not state.reload() and len(rejected) == 2 and "cannot read" in rejected[1]
    path.write_text("core:\n  labelWhiteList: '^usb-'\n")
    assert state.reload() and state.generation == 1 and state.last_error is None
    assert state.current.discovery.label_whitelist == "^usb-"


def test_run_reads_the_file_once_and_reloads_only_a_changed_content(tmp_path):
    """One route: the configuration ``run`` checked before starting is the one the agent
    starts with (the same object, never a second read that could see another content), and a
    reload of the same bytes changes nothing; an edit made after the command read the file is
    taken on the next reload."""
    from agent.cli import build_parser
    from agent.commands.run import settings_from_args

    path = tmp_path / "nfd-worker.conf"
    path.write_text("core:\n  labelWhiteList: '^pci-'\n")
    args = build_parser().parse_args(["run", "--config", str(path), "--node-name", "n", "--host-root", "/"])
    settings = settings_from_args(args)
    assert settings.worker_config is not None and settings.worker_config.digest
    state = WorkerConfigState(settings.config_path, initial=settings.worker_config)
    assert state.current is settings.worker_config
    assert not state.reload() and state.generation == 0
    path.write_text("core:\n  labelWhiteList: '^usb-'\n")
    assert state.reload() and state.current.discovery.label_whitelist == "^usb-"
