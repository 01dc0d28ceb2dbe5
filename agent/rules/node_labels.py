"""Parse the labels a Node already carries, as given to ``plan``/``explain --node-labels``.

Accepted text: a JSON object of labels, a Node object (``kubectl get node -o json``; its
``metadata.labels`` are used, less the labels its ``node-feature-agent.io/owned-labels``
record gives to this agent: the agent's own output is never its input, as in the
reconciler), ``key=value`` lines, or a comma-separated ``k=v,k2=v2``
list.  A bare key means the label exists with an empty value.  Invalid keys or values are
refused with a reason instead of being passed on to rule matching.
"""

from __future__ import annotations

import json

from agent.desired import ANNOTATION_OWNED_LABELS
from agent.k8s_validation import label_value_errors, qualified_name_errors, reserved_namespace_problem


class NodeLabelsError(ValueError):
    """The text is not one of the accepted forms; the message says what is wrong."""


def _from_json(text: str) -> dict[str, str]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NodeLabelsError(f"not valid JSON: {exc.msg} at line {exc.lineno}") from None
    if isinstance(data, dict) and isinstance(data.get("metadata"), dict):
        data = _labels_not_owned(data["metadata"])
    if not isinstance(data, dict):
        raise NodeLabelsError("JSON must be an object of labels or a Node object")
    return {str(k): "" if v is None else str(v) for k, v in data.items()}


def _labels_not_owned(metadata: dict[str, object]) -> object:
    """A Node's labels less those its owned-labels record gives to this agent; a key in a namespace
    the agent may never own stays, whatever the record says (as in the reconciler's claims)."""
    annotations = metadata.get("annotations") or {}
    record = annotations.get(ANNOTATION_OWNED_LABELS, "") if isinstance(annotations, dict) else ""
    owned = {k.strip() for k in str(record).split(",") if k.strip() and not reserved_namespace_problem(k.strip())}
    labels = metadata.get("labels") or {}
    if isinstance(labels, dict):
        return {k: v for k, v in labels.items() if k not in owned}
    return labels


def _from_pairs(items: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in items:
        item = item.strip()
        if not item or item.startswith("#"):
            continue
        key, _, value = item.partition("=")
        labels[key.strip()] = value.strip()
    return labels


def parse_node_labels(text: str) -> dict[str, str]:
    """Labels from ``text``; raises ``NodeLabelsError`` naming the first invalid entry."""
    stripped = text.strip()
    if stripped.startswith("{"):
        labels = _from_json(stripped)
    elif "\n" in stripped:
        labels = _from_pairs(stripped.splitlines())
    else:
        labels = _from_pairs(stripped.split(","))
    for key, value in labels.items():
        errors = qualified_name_errors(key) + [f"value: {e}" for e in label_value_errors(value)]
        if errors:
            raise NodeLabelsError(f"invalid node label {key!r}={value!r}: {'; '.join(errors)}")
    return labels
