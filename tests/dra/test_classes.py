"""The shipped DeviceClasses are what the generator makes from the catalogue, the API server
accepts them, and their CEL (evaluated with cel-python) selects exactly the published devices
of their class."""

from __future__ import annotations

from pathlib import Path

import celpy
import yaml
from kubernetes import client

from agent.dra.classes import render
from agent.rules.loader import load_catalogue
from tests.dra.test_slices import EDGETPU, pci
from tests.support.apiserver import FakeApiServer

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "deploy" / "device-classes.yaml"
SHIPPED_V1BETA1 = REPO / "deploy" / "device-classes-v1beta1.yaml"
CHART = REPO / "deploy" / "helm" / "node-feature-agent" / "templates" / "deviceclasses.yaml"


def test_shipped_classes_equal_the_generator_output():
    catalogue = load_catalogue([str(REPO / "labels")])
    expected, expected_v1beta1 = render(catalogue, "v1"), render(catalogue, "v1beta1")
    assert SHIPPED.read_text() == expected
    assert SHIPPED_V1BETA1.read_text() == expected_v1beta1
    assert expected in CHART.read_text() and expected_v1beta1 in CHART.read_text()


def test_the_api_server_accepts_them():
    with FakeApiServer() as api:
        c = client.ResourceV1Api(client.ApiClient(api.client_configuration()))
        for doc in yaml.safe_load_all(SHIPPED.read_text()):
            c.create_device_class(doc)
    with FakeApiServer(dra_versions=("v1beta1",)) as api:
        beta = client.ResourceV1beta1Api(client.ApiClient(api.client_configuration()))
        for doc in yaml.safe_load_all(SHIPPED_V1BETA1.read_text()):
            beta.create_device_class(doc)
        assert [c.metadata.name for c in beta.list_device_class().items] == [
            "edgetpu.node-feature-agent.io", "hailo8.node-feature-agent.io"]


def test_v1beta1_classes_are_the_v1_ones_without_extended_resource_name():
    """1.32-1.33's v1beta1 DeviceClassSpec has no extendedResourceName: the upstream OpenAPI
    schema of 1.33 (kubernetes-validate's copy) refuses it, 1.34's accepts it; the shipped
    v1beta1 classes validate strictly against 1.32 and 1.33 and select as the v1 ones do."""
    import kubernetes_validate

    v1 = list(yaml.safe_load_all(SHIPPED.read_text()))
    v1beta1 = list(yaml.safe_load_all(SHIPPED_V1BETA1.read_text()))
    assert [c["metadata"] for c in v1beta1] == [c["metadata"] for c in v1]
    assert [c["spec"]["selectors"] for c in v1beta1] == [c["spec"]["selectors"] for c in v1]
    for doc in v1beta1:
        assert doc["apiVersion"] == "resource.k8s.io/v1beta1" and "extendedResourceName" not in doc["spec"]
        for version in ("1.32.0", "1.33.0"):
            kubernetes_validate.validate(doc, version, strict=True)
    with_name = {**v1beta1[0], "spec": {**v1beta1[0]["spec"], "extendedResourceName": EDGETPU}}
    try:
        kubernetes_validate.validate(with_name, "1.33.0", strict=True)
    except kubernetes_validate.ValidationError as exc:
        assert "extendedResourceName" in exc.message
    else:
        raise AssertionError("the 1.33 schema took a v1beta1 extendedResourceName")
    kubernetes_validate.validate(with_name, "1.34.0", strict=True)


def _selects(expression: str, device: dict) -> bool:
    env = celpy.Environment()
    program = env.program(env.compile(expression))
    attrs = {k: next(iter(v.values())) for k, v in device["attributes"].items() if "/" not in k}
    activation = {"device": celpy.json_to_cel({"driver": device["driver"],
                                               "attributes": {"node-feature-agent.io": attrs}})}
    return bool(program.evaluate(activation))


def test_cel_selects_its_class_only():
    from agent.deviceplugin.model import ResourceDevices
    from agent.dra.slices import published_devices

    classes = {d["spec"]["extendedResourceName"]: d for d in yaml.safe_load_all(SHIPPED.read_text())}
    tpu = published_devices({EDGETPU: ResourceDevices(EDGETPU, (pci(1),))}, taints=False).devices[0]
    hailo = published_devices({"node-feature-agent.io/hailo8": ResourceDevices("node-feature-agent.io/hailo8",
                                                                             (pci(2),))}, taints=False).devices[0]
    tpu_expr = classes[EDGETPU]["spec"]["selectors"][0]["cel"]["expression"]
    assert _selects(tpu_expr, {**tpu, "driver": "node-feature-agent.io"})
    assert not _selects(tpu_expr, {**hailo, "driver": "node-feature-agent.io"})
    assert not _selects(tpu_expr, {**tpu, "driver": "gpu.example.com"})


def _validate(tmp_path, text: str | None):
    import subprocess
    import sys

    args = [sys.executable, "-m", "agent", "validate"]
    if text is not None:
        path = tmp_path / "classes.yaml"
        path.write_text(text)
        args += ["--device-classes", str(path)]
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_validate_checks_the_classes_cel(tmp_path):
    assert _validate(tmp_path, None).returncode == 0
    assert _validate(tmp_path, SHIPPED.read_text()).returncode == 0
    assert _validate(tmp_path, SHIPPED_V1BETA1.read_text()).returncode == 0
    # a v1beta1 class has no extendedResourceName: its resource is the one its name stands for
    beta = _validate(tmp_path, SHIPPED_V1BETA1.read_text().replace('class == "edgetpu"', 'class == "edgeTPU"'))
    assert beta.returncode == 1 and "does not select a node-feature-agent.io/edgetpu device" in beta.stderr
    wrong = _validate(tmp_path, SHIPPED.read_text().replace('class == "edgetpu"', 'class == "edgeTPU"'))
    assert wrong.returncode == 1 and "does not select a node-feature-agent.io/edgetpu device" in wrong.stderr
    broken = _validate(tmp_path, SHIPPED.read_text().replace('class == "hailo8"', 'class == == "hailo8"'))
    assert broken.returncode == 1 and "does not compile" in broken.stderr
    greedy = _validate(tmp_path, SHIPPED.read_text().replace(
        'device.driver == "node-feature-agent.io" && device.attributes["node-feature-agent.io"].class == "hailo8"',
        '"true"'))
    assert greedy.returncode == 1 and "also selects" in greedy.stderr


def test_explain_names_the_class_the_slice_and_why_a_device_is_left_out():
    import subprocess
    import sys

    from tests.conftest import FIXTURES

    def explain(case: str) -> str:
        done = subprocess.run([sys.executable, "-m", "agent", "explain", EDGETPU, "--host-root", str(FIXTURES / case)],
                              capture_output=True, text=True, timeout=120, check=False)
        return done.stdout

    ready = explain("edge-ai")
    assert "DeviceClass edgetpu.node-feature-agent.io" in ready
    assert "edgetpu-pci-0000-01-00-0: slice 1 of 1" in ready
    booting = explain("coral-usb-boot")  # 1a6e:089a: the catalogue's notReady entry
    assert "edgetpu-usb-0000-00-14-0-1-2: left out: Coral USB Accelerator still in its boot (DFU) state" in booting
    assert "edgetpu-usb-0000-00-14-0-1-2: slice 1 of 1 (tainted not-ready)" in booting


def test_explain_says_which_attributes_a_device_is_published_without(tmp_path):
    """A serial the host gives longer than the API's 64 bytes is left out, and ``explain`` says so."""
    import subprocess
    import sys

    from tests.runtime.helpers import CORAL_DEVPATH, CoralHost

    host = CoralHost(tmp_path)
    (host.root / ("sys" + CORAL_DEVPATH) / "serial").write_text("S" * 70 + "\n")
    done = subprocess.run([sys.executable, "-m", "agent", "explain", EDGETPU, "--host-root", str(host.root)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert ("edgetpu-usb-0000-00-14-0-2-2: slice 1 of 1; without attribute(s) serial (a value longer than 64 bytes)"
            in done.stdout), done.stdout
