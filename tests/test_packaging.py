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


def test_wheel_carries_the_catalogue_and_an_installed_cli_uses_it(tmp_path):
    """A pip-installed CLI (no checkout, no image) must plan with the shipped catalogue, not
    silently without it: build the real wheel, unpack it elsewhere, plan from another cwd."""
    import subprocess
    import sys
    import zipfile

    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                    str(tmp_path / "dist"), str(REPO)], check=True, capture_output=True, timeout=240)
    (wheel,) = (tmp_path / "dist").glob("node_feature_agent-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(site)
    shipped = {str(p.relative_to(REPO / "labels")) for p in (REPO / "labels").rglob("*") if p.is_file()}
    packed = {n[len("agent/labels/"):] for n in names if n.startswith("agent/labels/")}
    assert shipped and shipped <= packed
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_FEATURE_AGENT_RULES", "PYTHONPATH")}
    env["PYTHONPATH"] = str(site)
    dirs = subprocess.run([sys.executable, "-c", "import agent.config as c; print(c.default_rules_dirs())"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert dirs.stdout.strip() == repr([str(site / "agent" / "labels")]), dirs.stdout + dirs.stderr
    out = subprocess.run([sys.executable, "-m", "agent", "plan", "--host-root", str(FIXTURES / "coral-usb")],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    import json

    plan = json.loads(out.stdout)
    assert plan["labels"].get("accelerators/edgetpu") == "true"


def test_the_run_loop_loads_grpc_only_in_a_serving_mode():
    """grpcio and the generated kubelet stubs cost ~9 MiB of RSS (bench/memory.py); `run` loads
    them only when the device plugin or the DRA kubelet plugin is on, so the default DaemonSet
    stays within its memory target."""
    import subprocess
    import sys

    code = ("import sys, agent.commands.run, agent.runtime.agent; "
            "print(sorted(m for m in sys.modules if m == 'grpc' or m.startswith('agent.dra.api') "
            "or m == 'agent.dra.plugin' or m.startswith('agent.deviceplugin.v1beta1.api')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded


def test_the_dra_kubelet_plugin_loads_neither_the_device_plugins_api_nor_v1beta1s_code(tmp_path):
    """DRA mode imports and serves its kubelet plugin without the device plugin's gRPC server
    module or stubs (its sockets come from the grpc-free ``agent.deviceplugin.sockets``) and
    without the DRA v1beta1 or v1 generated service code (both services are served with v1's
    messages, identical on the wire): what `run --dra` loads, the plugin started on both
    sockets and stopped, in a fresh interpreter (bench/dra.py: the memory this keeps out)."""
    import subprocess
    import sys

    code = f"""
import sys, agent.commands.run, agent.runtime.agent
from kubernetes.client.api_client import ApiClient
from agent.dra.claims import ApiClaims
from agent.dra.plugin import KubeletPlugin
from agent.kube.light_core import LightCoreV1Api
plugin = KubeletPlugin("n", ApiClaims(LightCoreV1Api(ApiClient())), plugin_dir="{tmp_path}/p",
                       registry_dir="{tmp_path}/r", cdi_dir="{tmp_path}/cdi").start()
serving = plugin.alive() and all(__import__("os").path.exists(p) for p in (plugin.socket_path, plugin.registration_path))
plugin.stop()
print(serving, "grpc" in sys.modules, sorted(m for m in sys.modules if m in ("agent.deviceplugin.server",
      "agent.deviceplugin.plugins") or m.startswith(("agent.deviceplugin.v1beta1.api", "agent.dra.api.v1beta1"))
      or m == "agent.dra.api.v1.api_pb2_grpc"))
"""
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "True True []", loaded
