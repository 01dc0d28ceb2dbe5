"""Which item did a 422 refuse? Parsed from the Status causes the API server really sends."""

from agent.desired import ANNOTATION_OWNED_ANNOTATIONS, ANNOTATION_OWNED_LABELS
from agent.reconcile.node_api import StatusCause
from agent.reconcile.rejections import rejected_items

LABEL_MSG = ('Invalid value: "Bad_Value-": a valid label must be an empty string or consist of alphanumeric '
             "characters, '-', '_' or '.', and must start and end with an alphanumeric character")


def test_label_value_error_names_only_metadata_labels_so_the_value_is_matched():
    patch = {"metadata": {"labels": {"a.io/x": "Bad_Value-", "a.io/y": "true"},
                          "annotations": {ANNOTATION_OWNED_LABELS: "a.io/x,a.io/y"}}}
    causes = [StatusCause("FieldValueInvalid", LABEL_MSG, "metadata.labels")]
    assert rejected_items(causes, "Node \"n\" is invalid", metadata_patch=patch) == {("label", "a.io/x")}


def test_label_key_error_is_matched_by_key():
    patch = {"metadata": {"labels": {"a.io/x": "1", "Bad.io/y": "1"}}}
    causes = [StatusCause("FieldValueInvalid", 'Invalid value: "Bad.io/y": prefix part must be lowercase', "metadata.labels")]
    assert rejected_items(causes, "", metadata_patch=patch) == {("label", "Bad.io/y")}


def test_annotation_total_size_blames_our_largest_annotation_not_the_record():
    patch = {"metadata": {"annotations": {"example.com/big": "x" * 300000, "example.com/small": "y",
                                          ANNOTATION_OWNED_ANNOTATIONS: "example.com/big,example.com/small"}}}
    causes = [StatusCause("FieldValueTooLong", "Too long: must have at most 262144 bytes", "metadata.annotations")]
    assert rejected_items(causes, "", metadata_patch=patch) == {("annotation", "example.com/big")}


def test_taint_error_by_index_only_when_the_taint_is_ours():
    patch = {"spec": {"taints": [{"key": "theirs.io/t", "effect": "NoSchedule"}, {"key": "ours.io/t", "effect": "NoExecute"}]},
             "metadata": {"resourceVersion": "3"}}
    cause = StatusCause("FieldValueInvalid", "Invalid value: \"x\"", "spec.taints[1].value")
    assert rejected_items([cause], "", metadata_patch=patch, our_taints=["ours.io/t:NoExecute"]) == {("taint", "ours.io/t:NoExecute")}
    cause = StatusCause("FieldValueInvalid", "Invalid value: \"x\"", "spec.taints[0].value")
    assert rejected_items([cause], "", metadata_patch=patch, our_taints=["ours.io/t:NoExecute"]) == set()


def test_capacity_error_names_the_resource():
    ops = [{"op": "add", "path": "/status/capacity/example.com~1a", "value": "1"},
           {"op": "add", "path": "/status/capacity/example.com~1b", "value": "2"}]
    cause = StatusCause("FieldValueInvalid", "Invalid value: \"2\": must be an integer", "status.capacity[example.com/b]")
    assert rejected_items([cause], "", status_ops=ops) == {("resource", "example.com/b")}


def test_json_patch_failure_names_nothing_so_the_caller_rereads():
    ops = [{"op": "remove", "path": "/status/capacity/example.com~1a"}]
    msg = "the server rejected our request due to an error in our request"
    assert rejected_items([], msg, status_ops=ops) == set()


def test_taint_error_under_metadata_as_a_real_api_server_reports_it():
    """kube-apiserver's ValidateNode builds taint paths from field.NewPath("metadata")
    (pkg/apis/core/validation/validation.go), so a real 422 says metadata.taints[1].value."""
    patch = {"spec": {"taints": [{"key": "theirs.io/t", "effect": "NoSchedule"}, {"key": "ours.io/t", "effect": "NoExecute"}]},
             "metadata": {"resourceVersion": "3"}}
    cause = StatusCause("FieldValueInvalid", "Invalid value: \"x\"", "metadata.taints[1].value")
    assert rejected_items([cause], "", metadata_patch=patch, our_taints=["ours.io/t:NoExecute"]) == {("taint", "ours.io/t:NoExecute")}
