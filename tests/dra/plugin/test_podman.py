"""A real CDI consumer: podman starts a container with the CDI IDs NodePrepareResources
returned and the container sees the device nodes (host /dev/null as /dev/apex_0: char 1,3),
the env and the mounts of the resource's ``devices:`` block."""

from __future__ import annotations

import json

from agent.deviceplugin.model import DeviceNode, HostMount, PluginDevice, ResourceDevices
from agent.dra import cdi
from agent.dra.names import device_name
from tests.dra.plugin import podman
from tests.dra.plugin.cdi_schema import problems
from tests.dra.plugin.conftest import TPU


def test_podman_sees_the_prepared_devices_env_and_mounts(bed, tmp_path):
    library = tmp_path / "libedgetpu.txt"
    library.write_text("runtime\n")
    devices = {TPU: ResourceDevices(TPU, (
        PluginDevice("pci-0000:01:00.0", (DeviceNode("/dev/null", "/dev/apex_0"),)),
        PluginDevice("pci-0000:02:00.0", (DeviceNode("/dev/zero", "/dev/apex_1"),)),
    ), env={"EDGETPU_RUNTIME": "dra"}, mounts=(HostMount(str(library), "/opt/edgetpu/lib.txt"),))}
    podman.image()
    bed.start_plugin(devices=devices, cdi_dir=podman.RUNTIME_CDI_DIR)
    bed.kubelet.start().wait_registered()
    names = [device_name(TPU, "pci-0000:01:00.0"), device_name(TPU, "pci-0000:02:00.0")]
    ref = bed.claim("two-tpus", names)
    try:
        answer = bed.kubelet.prepare(ref).claims[ref[2]]
        assert answer.error == ""
        with open(cdi.spec_path(podman.RUNTIME_CDI_DIR, ref[2])) as handle:
            assert problems(json.load(handle)) == []
        ids = [i for d in answer.devices for i in d.cdi_device_ids]
        out = podman.run(ids, "stat -c '%n %F %t,%T' /dev/apex_0 /dev/apex_1; echo EDGETPU_RUNTIME=$EDGETPU_RUNTIME;"
                              " cat /opt/edgetpu/lib.txt")
        assert out.splitlines() == ["/dev/apex_0 character special file 1,3", "/dev/apex_1 character special file 1,5",
                                    "EDGETPU_RUNTIME=dra", "runtime"]
        # only what was prepared: a container given one ID sees one node
        one = podman.run(ids[:1], "ls /dev | grep apex || true")
        assert one.split() == ["apex_0"]
    finally:
        assert bed.kubelet.unprepare(ref).claims[ref[2]].error == ""
    assert ref[2] not in cdi.claim_specs(podman.RUNTIME_CDI_DIR)
