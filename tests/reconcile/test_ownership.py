"""The ownership record: sorted, comma-separated, tolerant of hand edits."""

from hypothesis import given
from hypothesis import strategies as st

from agent.desired import (
    ANNOTATION_OWNED_ANNOTATIONS,
    ANNOTATION_OWNED_LABELS,
    ANNOTATION_OWNED_RESOURCES,
    ANNOTATION_OWNED_TAINTS,
    Taint,
)
from agent.reconcile.ownership import format_record, format_taint_record, parse_ownership, split_record

label_keys = st.from_regex(r"\A([a-z]{1,8}(\.[a-z]{1,5}){0,2}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?\Z")


def test_format_is_sorted_deduplicated_and_absent_when_empty():
    assert format_record(["b.io/x", "a.io/y", "b.io/x"]) == "a.io/y,b.io/x"
    assert format_record([]) is None


def test_taints_are_recorded_like_nfd():
    record = format_taint_record([Taint("example.com/gpu", "NoSchedule", "true"), Taint("a.io/b", "NoExecute")])
    assert record == "a.io/b:NoExecute,example.com/gpu=true:NoSchedule"


def test_parse_reads_all_four_records():
    owned = parse_ownership({
        ANNOTATION_OWNED_LABELS: "accelerators/edgetpu,feature.node.kubernetes.io/pci-0300_10de.present",
        ANNOTATION_OWNED_RESOURCES: "google.com/edgetpu",
        ANNOTATION_OWNED_TAINTS: "example.com/gpu=true:NoSchedule",
        ANNOTATION_OWNED_ANNOTATIONS: "example.com/note",
        "other/annotation": "x",
    })
    assert owned.labels == {"accelerators/edgetpu", "feature.node.kubernetes.io/pci-0300_10de.present"}
    assert owned.resources == {"google.com/edgetpu"}
    assert owned.taints == {("example.com/gpu", "NoSchedule")}
    assert owned.annotations == {"example.com/note"}
    assert owned.junk == ()


def test_hand_edited_junk_is_reported_not_trusted():
    owned = parse_ownership({ANNOTATION_OWNED_LABELS: " a.io/x , ,bad key!,", ANNOTATION_OWNED_TAINTS: "no-effect,ok.io/t:NoSchedule"})
    assert owned.labels == {"a.io/x"}
    assert owned.taints == {("ok.io/t", "NoSchedule")}
    assert len(owned.junk) == 2 and any("bad key!" in j for j in owned.junk)


def test_missing_annotations_mean_nothing_owned():
    assert parse_ownership(None).empty
    assert split_record("") == []


@given(st.sets(label_keys, max_size=20))
def test_round_trip(keys):
    assert parse_ownership({ANNOTATION_OWNED_LABELS: format_record(keys) or ""}).labels == keys
