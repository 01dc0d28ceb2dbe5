"""The desired state is validated once, where it is built: every item Kubernetes or the namespace
policy would reject is refused there with one line naming its origin, the item and why, and the
state that reaches the diff holds only items that are sent as they are."""

from __future__ import annotations

from agent.rules import RuleOptions
from tests.rules.helpers import nfr, plan_for

LONG_COUNT = "1" * 65  # past the 64-character bound on a quantity (k8s_validation.QUANTITY_MAX_CHARS)


def test_invalid_and_reserved_items_are_refused_where_the_desired_state_is_built(tmp_path):
    raw = {"a.io/bad key": "x", "node-restriction.kubernetes.io/x": "y", "accelerators/edgetpu": "not valid!",
           "a.io/ok": "true"}
    _, derivation = plan_for(tmp_path, {"r.yaml": nfr(f"""
        - name: bad
          annotations:
            node-feature-agent.io/owned-labels: "hijack"
          extendedResources:
            example.com/a: "1500m"
            kubernetes.io/x: "1"
            k8s.io/x: "1"
            example.com/long: "{LONG_COUNT}"
            example.com/padded: "+007"
          taints:
            - {{key: a.io/t, effect: Sometimes}}
    """)}, raw=raw, options=RuleOptions(extra_label_ns=("k8s.io",)))
    state = derivation.state
    assert dict(state.labels) == {"a.io/ok": "true"}
    assert dict(state.extended_resources) == {"example.com/padded": "7"}  # the count as sent
    assert dict(state.annotations) == {} and state.taints == ()
    refused = {p.item: p for p in state.problems}
    assert sorted(refused) == sorted([
        "label a.io/bad key=x", "label node-restriction.kubernetes.io/x=y", "label accelerators/edgetpu=not valid!",
        "annotation node-feature-agent.io/owned-labels", "extended resource example.com/a=1500m",
        "extended resource kubernetes.io/x=1", "extended resource k8s.io/x=1",
        f"extended resource example.com/long={LONG_COUNT}", "taint a.io/t=:Sometimes",
    ])
    assert len(state.problems) == len(refused)  # one problem per refused item
    for problem in state.problems:
        line = str(problem)
        assert "\n" not in line and line.startswith(f"{problem.origin}: {problem.item}: skipped: ")
    assert refused["label node-restriction.kubernetes.io/x=y"].origin == "discovery"
    assert refused["annotation node-feature-agent.io/owned-labels"].origin.endswith("r.yaml:9")  # its line in the file
    assert "reserved for cluster administrators" in refused["label node-restriction.kubernetes.io/x=y"].reason
    assert "ownership record" in refused["annotation node-feature-agent.io/owned-labels"].reason
    assert "reserved by Kubernetes" in refused["extended resource k8s.io/x=1"].reason  # extra_label_ns does not re-allow it
    assert "non-negative integer" in refused[f"extended resource example.com/long={LONG_COUNT}"].reason
    assert 'Unsupported value: "Sometimes"' in refused["taint a.io/t=:Sometimes"].reason
