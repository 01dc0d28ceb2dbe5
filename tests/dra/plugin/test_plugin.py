"""The DRA kubelet plugin against a kubelet stand-in on real unix sockets and the in-repo API
server (tests/support/kubelet_dra.py). Expected wire behaviour from kubelet's sources: every
claim of a request answered (``dra/v1/api.proto``), registration through ``GetInfo`` and
``NotifyRegistrationStatus`` (pluginregistration v1)."""

from __future__ import annotations

import json
import os
import subprocess

from agent.deviceplugin.sockets import socket_identity
from agent.dra import cdi
from agent.dra.names import device_name
from agent.dra.plugin import KubeletPlugin
from tests.dra.plugin.cdi_schema import problems
from tests.dra.plugin.conftest import APEX, DEVICES, DFU, NODE, TPU, USB
from tests.support.kubelet_dra import KubeletDra

APEX_NAME, USB_NAME, DFU_NAME = (device_name(TPU, d.id) for d in (APEX, USB, DFU))


def spec_of(bed, uid):
    with open(cdi.spec_path(bed.cdi_dir, uid)) as handle:
        return json.load(handle)


def claim_gets(bed, name):
    return [r for r in bed.server.requests if r.method == "GET" and r.path.endswith(f"/resourceclaims/{name}")]


def test_registration_names_the_driver_its_socket_and_both_services(bed):
    plugin = bed.start_plugin()
    bed.kubelet.start().wait_registered()
    (info,) = bed.kubelet.infos
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", "node-feature-agent.io", plugin.socket_path)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    assert bed.kubelet.service() == "v1.DRAPlugin"
    bed.kubelet.wait_for(plugin.registered)
    assert plugin.registration_status == [(True, "")] and ("registration", "registered") in bed.observed


def test_a_kubelet_that_knows_only_v1beta1_prepares_through_it(bed):
    bed.kubelet = KubeletDra(bed.registry_dir, bed.api_client, services=("v1beta1.DRAPlugin",))
    bed.start_plugin()
    bed.kubelet.start().wait_registered()
    assert bed.kubelet.service() == "v1beta1.DRAPlugin"
    ref = bed.claim("tpu", [APEX_NAME])
    answer = bed.kubelet.prepare(ref).claims[ref[2]]
    assert answer.error == "" and [d.device_name for d in answer.devices] == [APEX_NAME]


def test_prepare_writes_a_valid_cdi_spec_and_unprepare_removes_it(bed):
    plugin = bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    uid = ref[2]
    answer = bed.kubelet.prepare(ref).claims[uid]
    assert answer.error == ""
    (device,) = answer.devices
    assert (list(device.request_names), device.pool_name, device.device_name) == (["r0"], NODE, APEX_NAME)
    assert list(device.cdi_device_ids) == [f"node-feature-agent.io/device={uid}-{APEX_NAME}"]
    spec = spec_of(bed, uid)
    assert problems(spec) == []
    assert spec["devices"] == [{"name": f"{uid}-{APEX_NAME}", "containerEdits": {
        "env": ["EDGETPU=1"], "deviceNodes": [{"path": "/dev/apex_0", "hostPath": "/dev/null", "permissions": "rw"}]}}]
    assert plugin.prepared() == {uid}
    assert bed.kubelet.unprepare(ref).claims[uid].error == ""
    assert not os.path.exists(cdi.spec_path(bed.cdi_dir, uid)) and plugin.prepared() == frozenset()
    with open(plugin.checkpoint_path) as handle:
        assert json.load(handle) == {"claims": {}}


def test_prepare_is_idempotent_and_a_repeat_needs_no_read(bed):
    bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    first = bed.kubelet.prepare(ref)
    second = bed.kubelet.prepare(ref)
    assert first == second and len(claim_gets(bed, "tpu")) == 1
    os.unlink(cdi.spec_path(bed.cdi_dir, ref[2]))  # someone removed it: a repeat writes it again
    assert bed.kubelet.prepare(ref) == first and problems(spec_of(bed, ref[2])) == []
    assert bed.kubelet.unprepare(ref) == bed.kubelet.unprepare(ref)


def test_every_claim_is_answered_each_with_its_own_error(bed):
    bed.start_plugin()
    bed.kubelet.start().wait_registered()
    good = bed.claim("good", [APEX_NAME])
    other_driver = bed.claim("gpu", ["gpu-0"], driver="gpu.example.com")
    other_node = bed.claim("far", [APEX_NAME], pool="edge-ai-2")
    unknown = bed.claim("unknown", ["edgetpu-pci-0000-09-00-0"])
    dfu = bed.claim("dfu", [DFU_NAME])
    gone = bed.claim("gone", [USB_NAME])
    bed.server.store.delete("resourceclaims.resource.k8s.io", "gone", "default")
    unallocated = bed.claim("pending", [])
    refs = [good, other_driver, other_node, unknown, dfu, gone, unallocated]
    answers = bed.kubelet.prepare(*refs).claims
    assert sorted(answers) == sorted(r[2] for r in refs)
    assert answers[good[2]].error == "" and len(answers[good[2]].devices) == 1
    assert answers[other_driver[2]].error == "" and list(answers[other_driver[2]].devices) == []
    assert "pool 'edge-ai-2', another node's" in answers[other_node[2]].error
    assert "edgetpu-pci-0000-09-00-0" in answers[unknown[2]].error
    assert "not among this node's devices" in answers[unknown[2]].error
    assert f"{DFU_NAME} (request r0) is not ready: {DFU.why}" in answers[dfu[2]].error
    assert "not found" in answers[gone[2]].error and "deleted" in answers[gone[2]].error
    assert "not allocated" in answers[unallocated[2]].error
    assert all(list(answers[r[2]].devices) == [] for r in refs[2:])
    # nothing leaked for the refused claims
    assert cdi.claim_specs(bed.cdi_dir) == {good[2]}


def test_a_claim_re_created_under_the_same_name_is_not_the_one_asked_for(bed):
    bed.start_plugin()
    bed.kubelet.start().wait_registered()
    old = bed.claim("tpu", [APEX_NAME])
    bed.server.store.delete("resourceclaims.resource.k8s.io", "tpu", "default")
    bed.claim("tpu", [APEX_NAME])
    error = bed.kubelet.prepare(old).claims[old[2]].error
    assert "deleted (and re-created)" in error and cdi.claim_specs(bed.cdi_dir) == set()


def test_plugin_restart_between_prepare_and_unprepare_leaks_nothing(bed):
    plugin = bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME, USB_NAME])
    assert bed.kubelet.prepare(ref).claims[ref[2]].error == ""
    registrations = len(bed.kubelet.infos)
    plugin.stop(1.0)
    # a spec no checkpoint lists (a crash between the two writes) goes at the next start
    cdi.write_atomic(cdi.spec_path(bed.cdi_dir, "orphan-uid"), b'{"cdiVersion": "0.5.0"}')
    plugin = bed.start_plugin()
    bed.kubelet.wait_registered(after=registrations)
    assert cdi.claim_specs(bed.cdi_dir) == {ref[2]} and plugin.prepared() == {ref[2]}
    assert bed.kubelet.unprepare(ref).claims[ref[2]].error == ""
    assert cdi.claim_specs(bed.cdi_dir) == set() and plugin.prepared() == frozenset()
    # an unprepare of a claim nobody remembers succeeds (kubelet retries after its own restart)
    assert bed.kubelet.unprepare(("default", "never", "0000-never")).claims["0000-never"].error == ""


def test_an_allocation_that_changed_while_the_plugin_was_down_is_refused(bed):
    plugin = bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    assert bed.kubelet.prepare(ref).claims[ref[2]].error == ""
    registrations = len(bed.kubelet.infos)
    plugin.stop(1.0)
    bed.kubelet.deallocate("default", "tpu")
    bed.kubelet.allocate("default", "tpu", [{"request": "r0", "driver": "node-feature-agent.io", "pool": NODE,
                                             "device": USB_NAME}])
    bed.start_plugin()
    bed.kubelet.wait_registered(after=registrations)
    error = bed.kubelet.prepare(ref).claims[ref[2]].error
    assert "allocation changed" in error and APEX_NAME in error and USB_NAME in error
    assert spec_of(bed, ref[2])["devices"][0]["name"].endswith(APEX_NAME)  # the running one's spec is kept
    assert bed.kubelet.unprepare(ref).claims[ref[2]].error == ""
    answer = bed.kubelet.prepare(ref).claims[ref[2]]
    assert answer.error == "" and [d.device_name for d in answer.devices] == [USB_NAME]


def test_kubelet_restarts_in_every_form_end_registered_again(bed):
    plugin = bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    prepared = bed.kubelet.prepare(ref)
    # kubelet restarts between prepare and unprepare, our sockets stay: it walks the directory,
    # registers us again, and its repeated prepare and its unprepare are answered
    seen = len(bed.kubelet.infos)
    bed.kubelet.restart()
    bed.kubelet.wait_registered(after=seen)
    assert bed.kubelet.prepare(ref) == prepared
    assert bed.kubelet.unprepare(ref).claims[ref[2]].error == "" and cdi.claim_specs(bed.cdi_dir) == set()
    # the registry directory wiped: our registration socket is served again
    seen = len(bed.kubelet.infos)
    os.unlink(plugin.registration_path)
    bed.kubelet.wait_registered(after=seen)
    # the DRA socket removed: served again; kubelet's connection reaches the new one
    identity = socket_identity(plugin.socket_path)
    os.unlink(plugin.socket_path)
    bed.kubelet.wait_for(lambda: socket_identity(plugin.socket_path) not in (None, identity))
    assert bed.kubelet.prepare(ref).claims[ref[2]].error == ""
    # the registry directory removed altogether
    seen = len(bed.kubelet.infos)
    os.unlink(plugin.registration_path)
    os.rmdir(bed.registry_dir)
    bed.kubelet.wait_registered(after=seen)
    assert bed.kubelet.refusals == []


def test_a_kubelet_restart_on_an_emptied_registry_is_answered_through_the_directory_watch(bed):
    """As ``run`` starts it, the plugin's directories are watched: kubelet coming back on an
    emptied registry directory, or the DRA socket removed, is served again at once. The look
    every ``check_interval`` is an hour here, so only the watch can do it."""
    plugin = bed.start_plugin(watched=True, check_interval=3600)
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    assert bed.kubelet.prepare(ref).claims[ref[2]].error == ""
    seen = len(bed.kubelet.infos)
    bed.kubelet.restart(wipe=True)
    bed.kubelet.wait_registered(after=seen)
    assert bed.kubelet.prepare(ref).claims[ref[2]].error == ""
    identity = socket_identity(plugin.socket_path)
    os.unlink(plugin.socket_path)
    bed.kubelet.wait_for(lambda: socket_identity(plugin.socket_path) not in (None, identity))
    assert bed.kubelet.unprepare(ref).claims[ref[2]].error == "" and cdi.claim_specs(bed.cdi_dir) == set()
    assert bed.kubelet.refusals == []


def test_stop_removes_the_sockets_and_keeps_prepared_claims(bed):
    plugin = bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    bed.kubelet.prepare(ref)
    plugin.stop(1.0)
    assert not plugin.alive()
    assert not os.path.exists(plugin.socket_path) and not os.path.exists(plugin.registration_path)
    assert cdi.claim_specs(bed.cdi_dir) == {ref[2]}


def _mount_tmpfs(path, options):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", path], check=True)


def _fill(directory):
    fd = os.open(f"{directory}/filler", os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)


def test_a_read_only_or_full_cdi_directory_fails_the_claim_and_leaks_nothing(bed):
    read_only, full = f"{bed.root}/ro", f"{bed.root}/full"
    _mount_tmpfs(read_only, "ro,size=64k")
    _mount_tmpfs(full, "size=8k")
    bed.kubelet.start()
    try:
        _fill(full)
        for directory, why in ((read_only, "Read-only file system"), (full, "No space left on device")):
            seen = len(bed.kubelet.infos)
            plugin = bed.start_plugin(cdi_dir=directory)
            bed.kubelet.wait_registered(after=seen)
            ref = bed.claim(f"tpu-{seen}", [APEX_NAME])
            error = bed.kubelet.prepare(ref).claims[ref[2]].error
            assert why in error and "CDI spec" in error and directory in error
            assert plugin.prepared() == frozenset() and [n for n in os.listdir(directory) if n != "filler"] == []
            plugin.stop(1.0)
            bed.plugin = None
    finally:
        subprocess.run(["umount", read_only], check=False)
        subprocess.run(["umount", full], check=False)


def test_shared_devices_are_published_once_per_replica(bed):
    shared = {TPU: DEVICES[TPU].__class__(TPU, (APEX,), shares=2)}
    bed.start_plugin(devices=shared)
    bed.kubelet.start().wait_registered()
    first, second = bed.claim("a", [device_name(TPU, APEX.id, 0)]), bed.claim("b", [device_name(TPU, APEX.id, 1)])
    answers = bed.kubelet.prepare(first, second).claims
    assert answers[first[2]].error == answers[second[2]].error == ""
    assert spec_of(bed, first[2])["devices"][0]["containerEdits"]["deviceNodes"] == \
        spec_of(bed, second[2])["devices"][0]["containerEdits"]["deviceNodes"]
    third = bed.claim("c", [device_name(TPU, APEX.id, 2)])
    assert "not among this node's devices" in bed.kubelet.prepare(third).claims[third[2]].error


def test_a_corrupt_checkpoint_is_set_aside_and_its_specs_removed(bed):
    plugin = bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    bed.kubelet.prepare(ref)
    plugin.stop(1.0)
    with open(plugin.checkpoint_path, "w") as handle:
        handle.write('{"claims": {"x": ')
    plugin = bed.start_plugin()
    assert plugin.prepared() == frozenset() and cdi.claim_specs(bed.cdi_dir) == set()
    assert os.path.exists(plugin.checkpoint_path + ".bad")


def test_kubeletplugin_defaults_are_kubelets_directories():
    plugin = KubeletPlugin(NODE, claims=None)  # type: ignore[arg-type]
    assert plugin.registration_path == "/var/lib/kubelet/plugins_registry/node-feature-agent.io-reg.sock"
    assert plugin.socket_path == "/var/lib/kubelet/plugins/node-feature-agent.io/dra.sock"
    assert plugin.cdi_dir == "/var/run/cdi"


def test_a_claim_that_cannot_be_read_fails_as_undetermined_and_nothing_is_written(bed):
    bed.start_plugin()
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    path = "/resourceclaims/tpu"
    bed.server.faults.fail(503, verb="GET", path=path)
    bed.server.faults.refuse_connections(verb="GET", path=path)
    bed.server.faults.answer({"kind": "Status", "items": []}, verb="GET", path=path)
    bed.server.faults.answer({"kind": "ResourceClaim", "metadata": {"uid": ref[2]}, "pad": "x" * (3 << 20)},
                             verb="GET", path=path)
    errors = [bed.kubelet.prepare(ref).claims[ref[2]].error for _ in range(4)]
    assert "HTTP 503" in errors[0] and "kubelet retries" in errors[0]
    assert "reading ResourceClaim default/tpu" in errors[1] and "kubelet retries" in errors[1]
    assert "not a ResourceClaim" in errors[2]
    assert "larger than 2097152 bytes" in errors[3]
    assert cdi.claim_specs(bed.cdi_dir) == set() and bed.plugin.prepared() == frozenset()
    assert bed.kubelet.prepare(ref).claims[ref[2]].error == ""  # read again: prepared


def test_a_claim_uid_that_is_a_path_is_refused_before_any_file_is_touched(bed):
    bed.start_plugin()
    bed.kubelet.start().wait_registered()
    hostile = ("default", "tpu", "../../../tmp/escape")
    assert "not a Kubernetes UID" in bed.kubelet.prepare(hostile).claims[hostile[2]].error
    assert bed.kubelet.unprepare(hostile).claims[hostile[2]].error == ""
    assert os.listdir(bed.cdi_dir) == [] and [r for r in bed.server.requests if "resourceclaims" in r.path] == []


def bounded_counts(observed: list[tuple[str, str]]) -> dict[str, float]:
    """The plugin's observations as ``run`` counts them (``AgentMetrics.dra_plugin``)."""
    from agent.runtime.metrics import AgentMetrics

    metrics = AgentMetrics()
    for operation, result in observed:
        metrics.dra_plugin(operation, result)
    return {b: metrics.registry.get_sample_value("nfa_dra_plugin_bounded_total", {"bound": b}) or 0.0
            for b in ("claim", "checkpoint")}


def test_a_claim_answer_past_its_bound_is_counted_and_warned_other_failures_are_not(bed):
    warnings: list[str] = []
    bed.start_plugin(warn=warnings.append)
    bed.kubelet.start().wait_registered()
    ref = bed.claim("tpu", [APEX_NAME])
    path = "/resourceclaims/tpu"
    bed.server.faults.fail(503, verb="GET", path=path)
    bed.server.faults.answer({"kind": "ResourceClaim", "metadata": {"uid": ref[2]}, "pad": "x" * (3 << 20)},
                             verb="GET", path=path)
    errors = [bed.kubelet.prepare(ref).claims[ref[2]].error for _ in range(2)]
    assert "HTTP 503" in errors[0] and "larger than 2097152 bytes" in errors[1]
    assert bounded_counts(bed.observed) == {"claim": 1, "checkpoint": 0}
    assert warnings == [("ResourceClaim default/tpu: the answer is larger than 2097152 bytes; nothing prepared, "
                         "kubelet retries")]


def test_a_checkpoint_past_its_bound_is_set_aside_counted_and_warned(bed):
    from agent.dra.plugin import MAX_CHECKPOINT_BYTES

    plugin = bed.start_plugin()
    plugin.stop(1.0)
    with open(plugin.checkpoint_path, "w") as handle:  # valid JSON, one byte past the bound
        handle.write('{"claims": {}, "pad": "' + "x" * (MAX_CHECKPOINT_BYTES - 24) + '"}')
    assert os.path.getsize(plugin.checkpoint_path) == MAX_CHECKPOINT_BYTES + 1
    warnings: list[str] = []
    bed.observed.clear()
    plugin = bed.start_plugin(warn=warnings.append)
    assert plugin.prepared() == frozenset() and os.path.exists(plugin.checkpoint_path + ".bad")
    assert bounded_counts(bed.observed) == {"claim": 0, "checkpoint": 1}
    assert warnings == [(f"DRA checkpoint {plugin.checkpoint_path} is larger than 16777216 bytes; set aside as "
                         f"{plugin.checkpoint_path}.bad, not read: kubelet prepares its claims again")]
