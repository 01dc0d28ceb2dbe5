"""The pure diff: only what we own changes; foreign items are never touched; restart = no writes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.desired import (
    ANNOTATION_OWNED_ANNOTATIONS,
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    DesiredNodeState,
    Taint,
)
from agent.reconcile.diff import diff_node, escape_pointer
from agent.reconcile.model import LiveNode, NodeChanges
from agent.reconcile.ownership import Ownership
from tests.reconcile.nodes import apply_json, apply_merge, node

EDGETPU = "accelerators/edgetpu"
PCI = "feature.node.kubernetes.io/pci-0300_10de.present"


def diff(obj, desired, **kw) -> NodeChanges:
    return diff_node(LiveNode.from_dict(obj), desired, **kw)


def converge(obj, desired, max_steps=5, **kw):
    """Apply plans the way the reconciler does until the plan is empty; returns (node, writes)."""
    for writes in range(max_steps):
        plan = diff(obj, desired, **kw)
        if plan.empty:
            return obj, writes
        if plan.status_ops and (plan.status_first or not plan.metadata_patch):
            obj = apply_json(obj, plan.status_ops)
        else:
            obj = apply_merge(obj, plan.metadata_patch)
    raise AssertionError(f"no convergence: {diff(obj, desired, **kw)}")


def test_fresh_node_gets_labels_and_record_in_one_merge_patch():
    plan = diff(node({"kubernetes.io/hostname": "node-a"}), DesiredNodeState(labels={EDGETPU: "true", PCI: "true"}))
    assert plan.metadata_patch == {"metadata": {
        "labels": {EDGETPU: "true", PCI: "true"},
        "annotations": {ANNOTATION_OWNED_LABELS: f"{EDGETPU},{PCI}"},
    }}
    assert plan.status_ops == ()
    assert [str(c) for c in plan.changes][:2] == [f"added label {EDGETPU}=true", f"added label {PCI}=true"]


def test_unchanged_node_needs_no_write():
    desired = DesiredNodeState(labels={EDGETPU: "true"}, extended_resources={"google.com/edgetpu": "2"},
                               taints=(Taint("example.com/tpu", "NoSchedule", "true"),), annotations={"example.com/n": "x"})
    obj, writes = converge(node({"kubernetes.io/hostname": "a"}, capacity={"cpu": "4"}, allocatable={"cpu": "4"}), desired)
    assert writes == 2  # metadata (labels, taint, annotation, records) + status (resources)
    assert diff(obj, desired).empty


def test_foreign_label_with_other_value_is_a_clash_and_untouched():
    plan = diff(node({EDGETPU: "false"}), DesiredNodeState(labels={EDGETPU: "true"}))
    assert plan.empty
    assert [(c.kind, c.key, c.wanted, c.found) for c in plan.clashes] == [("label", EDGETPU, "true", "false")]


def test_foreign_label_with_our_value_is_left_alone_and_not_adopted():
    plan = diff(node({EDGETPU: "true"}), DesiredNodeState(labels={EDGETPU: "true"}))
    assert plan.empty and plan.clashes == ()
    # and since it is not ours, no longer wanting it does not remove it
    assert diff(node({EDGETPU: "true"}), DesiredNodeState()).empty


def test_owned_label_no_longer_wanted_is_removed_with_its_record_entry_atomically():
    obj = node({EDGETPU: "true", "other.io/x": "1"}, {ANNOTATION_OWNED_LABELS: EDGETPU})
    plan = diff(obj, DesiredNodeState())
    assert plan.metadata_patch == {"metadata": {"labels": {EDGETPU: None}, "annotations": {ANNOTATION_OWNED_LABELS: None}}}


def test_held_labels_are_neither_removed_nor_changed_while_others_go():
    """``held_labels`` (keys an undetermined feature with no earlier answer decides): an owned
    held label stays on the Node with its value and in the record, wanted or not; other owned
    labels are added, changed and removed as usual; a held key already gone leaves the record."""
    smt, gone = "feature.node.kubernetes.io/cpu-hardware_multithreading", "example.com/gone"
    ssd, old = "feature.node.kubernetes.io/storage-nonrotationaldisk", "example.com/old"
    obj = node({EDGETPU: "false", smt: "true", ssd: "true", old: "1"},
               {ANNOTATION_OWNED_LABELS: f"{EDGETPU},{gone},{old},{smt},{ssd}"})
    want = DesiredNodeState(labels={EDGETPU: "true", PCI: "true", ssd: "false"}, held_labels={smt, ssd, gone})
    plan = diff(obj, want)
    assert plan.metadata_patch == {"metadata": {"labels": {EDGETPU: "true", PCI: "true", old: None},
                                                "annotations": {ANNOTATION_OWNED_LABELS: f"{EDGETPU},{smt},{PCI},{ssd}"}}}
    every = diff(obj, DesiredNodeState(labels={EDGETPU: "true"}, hold_every_label=True))
    assert every.metadata_patch == {"metadata": {"annotations": {  # nothing owned changes; new keys still added
        ANNOTATION_OWNED_LABELS: f"{EDGETPU},{old},{smt},{ssd}"}}}
    assert diff(obj, DesiredNodeState(labels={PCI: "true"}, hold_every_label=True)).metadata_patch["metadata"][
        "labels"] == {PCI: "true"}


def test_a_held_prefix_holds_every_owned_label_it_starts_and_nothing_else():
    """A held key ending in ``*`` (a device whose IDs could not be read: its label is
    ``pci-<unknown>``) holds every owned label it is a prefix of; the others go as usual."""
    coral, gpu = "feature.node.kubernetes.io/pci-0880_1ac1.present", "feature.node.kubernetes.io/pci-0300_10de.present"
    obj = node({coral: "true", gpu: "true", EDGETPU: "true"}, {ANNOTATION_OWNED_LABELS: f"{EDGETPU},{gpu},{coral}"})
    plan = diff(obj, DesiredNodeState(held_labels={"feature.node.kubernetes.io/pci-*"}))
    assert plan.metadata_patch == {"metadata": {"labels": {EDGETPU: None},
                                                "annotations": {ANNOTATION_OWNED_LABELS: f"{gpu},{coral}"}}}


def test_held_resources_are_neither_removed_nor_changed_while_others_go():
    """``held_resources``: an owned extended resource an undetermined feature decides keeps its
    count on the Node and its record entry, wanted or not; other owned resources change as usual."""
    tpu, hailo, gpu = "node-feature-agent.io/edgetpu", "node-feature-agent.io/hailo8", "example.com/gpu"
    counts = {tpu: "1", hailo: "2", gpu: "4", "cpu": "4"}
    obj = node({}, {ANNOTATION_OWNED_RESOURCES: f"{gpu},{tpu},{hailo}"}, capacity=counts, allocatable=counts)
    plan = diff(obj, DesiredNodeState(extended_resources={hailo: "1"}, held_resources={tpu, gpu}))
    assert sorted(op["path"] for op in plan.status_ops if op["path"].startswith("/status/")) == [
        f"/status/allocatable/{escape_pointer(hailo)}", f"/status/capacity/{escape_pointer(hailo)}"]
    assert plan.metadata_patch is None
    assert diff(obj, DesiredNodeState(extended_resources={tpu: "1", gpu: "4", hailo: "2"})).empty
    gone = diff(obj, DesiredNodeState(extended_resources={hailo: "2"}))
    assert {op["path"] for op in gone.status_ops if op["op"] == "remove"} == {
        f"/status/{section}/{escape_pointer(name)}" for section in ("capacity", "allocatable") for name in (tpu, gpu)}


def test_owned_label_value_changed_by_someone_is_put_back():
    obj = node({EDGETPU: "false"}, {ANNOTATION_OWNED_LABELS: EDGETPU})
    plan = diff(obj, DesiredNodeState(labels={EDGETPU: "true"}))
    assert plan.metadata_patch == {"metadata": {"labels": {EDGETPU: "true"}}}
    assert str(plan.changes[0]) == f"changed label {EDGETPU} from 'false' to 'true'"


def test_owned_label_already_gone_only_shrinks_the_record():
    obj = node({}, {ANNOTATION_OWNED_LABELS: f"{EDGETPU},{PCI}"})
    plan = diff(obj, DesiredNodeState(labels={PCI: "true"}))
    assert plan.metadata_patch == {"metadata": {"labels": {PCI: "true"}, "annotations": {ANNOTATION_OWNED_LABELS: PCI}}}


def test_record_formatting_is_compared_exactly():
    obj = node({EDGETPU: "true", PCI: "true"}, {ANNOTATION_OWNED_LABELS: f"{PCI},{EDGETPU}"})  # unsorted by hand
    plan = diff(obj, DesiredNodeState(labels={EDGETPU: "true", PCI: "true"}))
    assert plan.metadata_patch == {"metadata": {"annotations": {ANNOTATION_OWNED_LABELS: f"{EDGETPU},{PCI}"}}}
    assert [str(c) for c in plan.changes] == [f"updated ownership record {ANNOTATION_OWNED_LABELS}"]


def test_foreign_taints_are_kept_verbatim_and_the_precondition_is_sent():
    foreign = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2024-01-01T00:00:00Z"}
    obj = node(taints=[foreign], rv="42")
    plan = diff(obj, DesiredNodeState(taints=(Taint("example.com/tpu", "NoSchedule", "true"),)))
    assert plan.metadata_patch["spec"] == {"taints": [foreign, {"key": "example.com/tpu", "effect": "NoSchedule", "value": "true"}]}
    assert plan.metadata_patch["metadata"]["resourceVersion"] == "42"
    assert plan.metadata_patch["metadata"]["annotations"] == {ANNOTATION_OWNED_TAINTS: "example.com/tpu=true:NoSchedule"}


def test_owned_taint_removed_foreign_same_key_other_effect_kept():
    ours = {"key": "example.com/tpu", "effect": "NoSchedule", "value": "true"}
    theirs = {"key": "example.com/tpu", "effect": "NoExecute"}
    obj = node(annotations={ANNOTATION_OWNED_TAINTS: "example.com/tpu=true:NoSchedule"}, taints=[ours, theirs])
    plan = diff(obj, DesiredNodeState())
    assert plan.metadata_patch["spec"] == {"taints": [theirs]}
    assert plan.metadata_patch["metadata"]["annotations"] == {ANNOTATION_OWNED_TAINTS: None}


def test_foreign_taint_with_other_value_is_a_clash():
    obj = node(taints=[{"key": "example.com/tpu", "effect": "NoSchedule", "value": "admin"}])
    plan = diff(obj, DesiredNodeState(taints=(Taint("example.com/tpu", "NoSchedule", "true"),)))
    assert plan.empty and plan.clashes[0].key == "example.com/tpu:NoSchedule"


def test_startup_taint_removed_only_when_asked():
    startup = {"key": "example.com/unlabelled", "effect": "NoSchedule"}
    obj = node(taints=[startup, {"key": "x.io/keep", "effect": "NoSchedule"}])
    assert diff(obj, DesiredNodeState()).empty
    plan = diff(obj, DesiredNodeState(), remove_foreign_taints={("example.com/unlabelled", "NoSchedule")})
    assert plan.metadata_patch["spec"] == {"taints": [{"key": "x.io/keep", "effect": "NoSchedule"}]}
    assert "startup taint" in str(plan.changes[0])


def test_resources_are_recorded_before_they_are_written():
    obj = node(capacity={"cpu": "4"}, allocatable={"cpu": "4"})
    plan = diff(obj, DesiredNodeState(extended_resources={"google.com/edgetpu": "2"}))
    assert not plan.status_first
    assert plan.metadata_patch == {"metadata": {"annotations": {ANNOTATION_OWNED_RESOURCES: "google.com/edgetpu"}}}
    assert plan.status_ops == (
        {"op": "add", "path": "/status/capacity/google.com~1edgetpu", "value": "2"},
        {"op": "add", "path": "/status/allocatable/google.com~1edgetpu", "value": "2"},
    )


def test_capacity_zeroed_by_kubelet_is_restored_in_one_status_write():
    obj = node(annotations={ANNOTATION_OWNED_RESOURCES: "google.com/edgetpu"},
               capacity={"cpu": "4", "google.com/edgetpu": "0"}, allocatable={"cpu": "4", "google.com/edgetpu": "0"})
    plan = diff(obj, DesiredNodeState(extended_resources={"google.com/edgetpu": "2"}))
    assert plan.metadata_patch is None and plan.status_first
    assert plan.changes[0].action == "restore"
    assert "restored extended resource google.com/edgetpu to 2" in str(plan.changes[0])


RECORD_POINTER = "/metadata/annotations/" + escape_pointer(ANNOTATION_OWNED_RESOURCES)


def test_removed_resource_leaves_the_record_in_the_status_write_that_removes_it():
    obj = node(annotations={ANNOTATION_OWNED_RESOURCES: "example.com/a,example.com/b"},
               capacity={"example.com/a": "1"}, allocatable={"example.com/a": "1"})
    plan = diff(obj, DesiredNodeState())
    # b is already gone, a goes now: capacity, allocatable and the record in one atomic JSON patch
    # (the status strategy resets only spec, so /status applies metadata: pkg/registry/core/node/strategy.go)
    assert plan.status_first
    assert plan.status_ops == ({"op": "remove", "path": "/status/capacity/example.com~1a"},
                               {"op": "remove", "path": "/status/allocatable/example.com~1a"},
                               {"op": "remove", "path": RECORD_POINTER})
    obj, writes = converge(obj, DesiredNodeState())
    assert writes == 1 and ANNOTATION_OWNED_RESOURCES not in obj["metadata"]["annotations"]


def test_removal_only_of_keys_present():
    obj = node(annotations={ANNOTATION_OWNED_RESOURCES: "example.com/a"}, capacity={"example.com/a": "1"}, allocatable={})
    assert diff(obj, DesiredNodeState()).status_ops == ({"op": "remove", "path": "/status/capacity/example.com~1a"},
                                                        {"op": "remove", "path": RECORD_POINTER})


def test_a_resource_swap_is_two_writes_record_widened_first_trimmed_with_the_removal():
    """One extended resource for another (a Coral over USB replaced by one over PCIe): the
    record grows to old+new in the label write, then one status write adds the new resource,
    removes the old one and trims the record to the new one. At no point is a resource of
    ours on the Node without its record entry."""
    old, new = "node-feature-agent.io/edgetpu-usb", "node-feature-agent.io/edgetpu-pcie"
    obj = node({EDGETPU: "true"}, {ANNOTATION_OWNED_LABELS: EDGETPU, ANNOTATION_OWNED_RESOURCES: old},
               capacity={"cpu": "4", old: "1"}, allocatable={"cpu": "4", old: "1"})
    want = DesiredNodeState(labels={EDGETPU: "true"}, extended_resources={new: "1"})
    first = diff(obj, want)
    assert not first.status_first
    assert first.metadata_patch == {"metadata": {"annotations": {ANNOTATION_OWNED_RESOURCES: f"{new},{old}"}}}
    obj = apply_merge(obj, first.metadata_patch)
    second = diff(obj, want)
    assert second.metadata_patch is None
    assert second.status_ops == (
        {"op": "add", "path": f"/status/capacity/{escape_pointer(new)}", "value": "1"},
        {"op": "add", "path": f"/status/allocatable/{escape_pointer(new)}", "value": "1"},
        {"op": "remove", "path": f"/status/capacity/{escape_pointer(old)}"},
        {"op": "remove", "path": f"/status/allocatable/{escape_pointer(old)}"},
        {"op": "add", "path": RECORD_POINTER, "value": new})
    obj = apply_json(obj, second.status_ops)
    assert diff(obj, want).empty
    assert obj["metadata"]["annotations"][ANNOTATION_OWNED_RESOURCES] == new
    assert obj["status"]["capacity"] == {"cpu": "4", new: "1"}


def test_a_record_trim_into_a_node_without_annotations_creates_the_map():
    """The server omits an empty annotations map; ``add`` under a missing parent would fail."""
    obj = node(capacity={"example.com/a": "0"}, allocatable={"example.com/a": "0"})
    del obj["metadata"]["annotations"]
    ops = diff(obj, DesiredNodeState(extended_resources={"example.com/a": "1"}),
               ownership=Ownership(resources=frozenset({"example.com/a"}))).status_ops
    assert ops[-1] == {"op": "add", "path": "/metadata/annotations",
                       "value": {ANNOTATION_OWNED_RESOURCES: "example.com/a"}}
    assert apply_json(obj, ops)["metadata"]["annotations"] == {ANNOTATION_OWNED_RESOURCES: "example.com/a"}


def test_missing_capacity_map_is_created_first():
    obj = node(annotations={ANNOTATION_OWNED_RESOURCES: "example.com/a"}, status=False)
    ops = diff(obj, DesiredNodeState(extended_resources={"example.com/a": "1"})).status_ops
    assert [op["path"] for op in ops] == ["/status", "/status/capacity", "/status/allocatable",
                                          "/status/capacity/example.com~1a", "/status/allocatable/example.com~1a"]
    assert apply_json(obj, ops)["status"] == {"capacity": {"example.com/a": "1"}, "allocatable": {"example.com/a": "1"}}


def test_foreign_resource_is_never_touched():
    obj = node(capacity={"nvidia.com/gpu": "8"}, allocatable={"nvidia.com/gpu": "8"})
    plan = diff(obj, DesiredNodeState(extended_resources={"nvidia.com/gpu": "4"}))
    assert plan.empty and plan.clashes[0].found == "8"


def test_canonical_quantity_spelling_is_not_a_change():
    obj = node(annotations={ANNOTATION_OWNED_RESOURCES: "example.com/a"},
               capacity={"example.com/a": "1k"}, allocatable={"example.com/a": "1k"})
    assert diff(obj, DesiredNodeState(extended_resources={"example.com/a": "1000"})).empty


def test_escape_pointer():
    assert escape_pointer("example.com/a~b") == "example.com~1a~0b"


def test_rule_annotations_owned_like_labels():
    obj = node(annotations={"example.com/n": "theirs"})
    plan = diff(obj, DesiredNodeState(annotations={"example.com/n": "ours", "example.com/m": "ours"}))
    assert plan.metadata_patch == {"metadata": {"annotations": {"example.com/m": "ours", ANNOTATION_OWNED_ANNOTATIONS: "example.com/m"}}}
    assert plan.clashes[0].key == "example.com/n"


def test_the_diff_checks_no_desired_item_again():
    """Validity is the desired state's contract, checked once where it is built
    (tests/rules/test_desired_state.py: these very items are refused there): the diff sends what
    it is given and refuses only what it reads from the Node (the record: the next test)."""
    desired = DesiredNodeState(labels={"node-restriction.kubernetes.io/x": "y"},
                               extended_resources={"k8s.io/x": "1"},
                               taints=(Taint("a.io/t", "Sometimes"),))
    plan = diff(node(), desired)
    assert plan.refused == ()
    assert plan.metadata_patch["metadata"]["labels"] == {"node-restriction.kubernetes.io/x": "y"}
    assert plan.metadata_patch["spec"] == {"taints": [{"key": "a.io/t", "effect": "Sometimes"}]}
    assert {"op": "add", "path": "/status/capacity/k8s.io~1x", "value": "1"} in plan.status_ops


def test_skip_leaves_an_item_exactly_as_it_is():
    obj = node({EDGETPU: "old"}, {ANNOTATION_OWNED_LABELS: EDGETPU})
    assert diff(obj, DesiredNodeState(labels={EDGETPU: "new"}), skip={("label", EDGETPU)}).empty
    assert diff(obj, DesiredNodeState(), skip={("label", EDGETPU)}).empty


def test_skip_keeps_an_owned_item_of_every_kind_in_the_record():
    """A skipped item stays exactly as it is *and stays ours*: a resource the agent still wants
    with another count once fell out of the record (then it was foreign for ever)."""
    taint = Taint("example.com/tpu", "NoSchedule", "true")
    obj = node({EDGETPU: "other"}, {ANNOTATION_OWNED_LABELS: EDGETPU, ANNOTATION_OWNED_RESOURCES: "example.com/a",
                                    ANNOTATION_OWNED_TAINTS: "example.com/tpu=other:NoSchedule"},
               capacity={"example.com/a": "1"}, allocatable={"example.com/a": "1"},
               taints=[{"key": "example.com/tpu", "value": "other", "effect": "NoSchedule"}])
    desired = DesiredNodeState(labels={EDGETPU: "true"}, extended_resources={"example.com/a": "2"}, taints=(taint,))
    skip = {("label", EDGETPU), ("resource", "example.com/a"), ("taint", "example.com/tpu:NoSchedule")}
    plan = diff(obj, desired, skip=skip)
    assert plan.empty, plan


def test_junk_in_the_record_is_reported_and_rewritten():
    obj = node({EDGETPU: "true"}, {ANNOTATION_OWNED_LABELS: f"{EDGETPU},not a key"})
    plan = diff(obj, DesiredNodeState(labels={EDGETPU: "true"}))
    assert plan.metadata_patch == {"metadata": {"annotations": {ANNOTATION_OWNED_LABELS: EDGETPU}}}
    assert "not a key" in plan.refused[0].reason


# --- property: whatever the node holds, we converge, and never touch foreign items ------------
keys = st.sampled_from(["a.io/x", "a.io/y", "b.io/z", EDGETPU, PCI])
values = st.sampled_from(["true", "false", "1"])
resources = st.sampled_from(["example.com/a", "example.com/b", "nvidia.com/gpu"])
counts = st.sampled_from(["0", "1", "4"])
taints = st.builds(Taint, key=st.sampled_from(["t.io/a", "t.io/b"]), effect=st.sampled_from(["NoSchedule", "NoExecute"]),
                   value=st.sampled_from(["", "v"]))


@settings(max_examples=150, deadline=None)
@given(foreign=st.dictionaries(keys, values, max_size=3), ours_before=st.dictionaries(keys, values, max_size=3),
       want=st.dictionaries(keys, values, max_size=4), foreign_res=st.dictionaries(resources, counts, max_size=1),
       want_res=st.dictionaries(resources, counts, max_size=2), foreign_taints=st.lists(taints, max_size=2),
       want_taints=st.lists(taints, max_size=2))
def test_converges_and_never_touches_foreign(foreign, ours_before, want, foreign_res, want_res, foreign_taints, want_taints):
    ours_before = {k: v for k, v in ours_before.items() if k not in foreign}
    start = node({**foreign, **ours_before}, capacity=dict(foreign_res), allocatable=dict(foreign_res),
                 taints=[t.to_json() for t in {t.identity: t for t in foreign_taints}.values()])
    start["metadata"]["annotations"][ANNOTATION_OWNED_LABELS] = ",".join(sorted(ours_before))
    desired = DesiredNodeState(labels=want, extended_resources=want_res, taints=tuple({t.identity: t for t in want_taints}.values()))
    end, writes = converge(start, desired)
    assert writes <= 3
    labels = end["metadata"]["labels"]
    for key, value in foreign.items():
        assert labels.get(key) == value
    for key, value in want.items():
        if key not in foreign:
            assert labels[key] == value
    for key in ours_before:
        if key not in want:
            assert key not in labels
    for name, count in foreign_res.items():
        assert end["status"]["capacity"][name] == count
    for taint in foreign_taints:
        assert any(t["key"] == taint.key and t["effect"] == taint.effect for t in end["spec"].get("taints", []))
    # a restarted agent sees nothing to do
    assert diff(end, desired).empty


@settings(max_examples=150, deadline=None)
@given(foreign_res=st.dictionaries(resources, counts, max_size=1), ours_res=st.dictionaries(resources, counts, max_size=3),
       want_res=st.dictionaries(resources, counts, max_size=3), labels_change=st.booleans())
def test_resource_changes_keep_every_resource_of_ours_recorded_at_every_step(foreign_res, ours_res, want_res, labels_change):
    """Whatever resources we owned and want now: at most two writes (the record grows in the
    label write, the status write adds, removes and trims), and after each single write (a
    crash point) every non-foreign resource on the Node is in the record, foreign ones are
    untouched."""
    ours_res = {k: v for k, v in ours_res.items() if k not in foreign_res}
    capacity = {"cpu": "4", **foreign_res, **ours_res}
    obj = node({EDGETPU: "true"}, {ANNOTATION_OWNED_LABELS: EDGETPU,
                                   ANNOTATION_OWNED_RESOURCES: ",".join(sorted(ours_res))},
               capacity=capacity, allocatable=dict(capacity))
    if not ours_res:
        del obj["metadata"]["annotations"][ANNOTATION_OWNED_RESOURCES]
    desired = DesiredNodeState(labels={PCI: "true"} if labels_change else {EDGETPU: "true"}, extended_resources=want_res)
    writes = 0
    while not (plan := diff(obj, desired)).empty:
        if plan.status_ops and (plan.status_first or not plan.metadata_patch):
            obj = apply_json(obj, plan.status_ops)
        else:
            obj = apply_merge(obj, plan.metadata_patch)
        writes += 1
        assert writes <= 2, plan
        recorded = set(obj["metadata"].get("annotations", {}).get(ANNOTATION_OWNED_RESOURCES, "").split(",")) - {""}
        on_node = set(obj["status"]["capacity"]) - {"cpu"} - set(foreign_res)
        assert on_node <= recorded
        for name, count in foreign_res.items():
            assert obj["status"]["capacity"][name] == count and name not in recorded
    for name in ours_res:
        if name not in want_res:
            assert name not in obj["status"]["capacity"]
