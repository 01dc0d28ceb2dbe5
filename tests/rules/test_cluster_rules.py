"""NodeFeatureRule objects through the rule files' parser: problems and provenance located by
the object's name and field path; a name in files and cluster is one error."""

from __future__ import annotations

import copy
from typing import Any

import yaml

from agent.rules import load_catalogue
from agent.rules.cluster_rules import parse_rule_object, with_cluster_rules
from agent.rules.model import RuleSet
from tests.conftest import LABELS_DIR

INTEL_FILE = LABELS_DIR / "vendor" / "intel-device-plugins.node-feature-rules.yaml"
INTEL: dict[str, Any] = yaml.safe_load(INTEL_FILE.read_text())


def _shape(rule_set: RuleSet) -> list[tuple[object, ...]]:
    """What a rule matches and writes, without where it was written."""
    return [(r.name, [(i.key, i.value) for i in r.labels], [(t.feature, [(e.key, e.op, e.values) for e in t.expressions])
                                                            for t in r.match_features], len(r.match_any))
            for r in rule_set.rules]


def test_an_object_parses_as_its_file_does_with_field_paths_for_lines() -> None:
    from agent.rules.nfr_parser import parse_rule_file

    (from_file,), file_problems = parse_rule_file(str(INTEL_FILE), INTEL_FILE.read_text())
    from_object, problems = parse_rule_object(INTEL)
    assert file_problems == [] and problems == [] and from_object is not None
    assert _shape(from_object) == _shape(from_file)
    sgx = from_object.rules[6]
    assert sgx.origin == "NodeFeatureRule/intel-dp-devices:spec.rules[6]"
    assert sgx.extended_resources[0].origin == 'NodeFeatureRule/intel-dp-devices:spec.rules[6].extendedResources["sgx.intel.com/epc"]'
    assert sgx.match_features[1].expressions[0].origin == \
        "NodeFeatureRule/intel-dp-devices:spec.rules[6].matchFeatures[1].matchExpressions[\"sgx.enabled\"]"


def test_problems_name_the_object_and_field() -> None:
    bad = copy.deepcopy(INTEL)
    bad["spec"]["rules"][0]["matchFeatures"][0]["matchExpressions"]["vendor"] = {"op": "Gt", "value": ["x"]}
    bad["spec"]["rules"][1]["labels"] = {"kubernetes.io/arch": "arm64"}  # a load-time check, as for a file
    bad["spec"]["rules"][2]["matchFeatures"][0]["feature"] = "pci.devic"  # no source produces it
    rule_set, problems = parse_rule_object(bad)
    assert rule_set is not None and len(rule_set.rules) == 6  # only the unparseable rule is skipped
    origins = sorted(p.origin for p in problems)
    assert origins == [
        "NodeFeatureRule/intel-dp-devices:spec.rules[0].matchFeatures[0].matchExpressions.vendor",
        'NodeFeatureRule/intel-dp-devices:spec.rules[1].labels["kubernetes.io/arch"]',
        "NodeFeatureRule/intel-dp-devices:spec.rules[2].matchFeatures[0]",
    ]


def test_an_object_named_as_a_rule_file_replaces_it() -> None:
    files = load_catalogue([str(LABELS_DIR)])
    renamed = copy.deepcopy(INTEL)
    renamed["metadata"]["name"] = "00-intel-copy"
    same, _ = parse_rule_object(INTEL)
    other, _ = parse_rule_object(renamed)
    assert same is not None and other is not None
    merged = with_cluster_rules(files, [same, other])
    names = [r.name for r in merged.rule_sets]
    assert names == sorted(names) and names.count("intel-dp-devices") == 1 and "00-intel-copy" in names
    kept = next(r for r in merged.rule_sets if r.name == "intel-dp-devices")
    assert kept.origin == "NodeFeatureRule/intel-dp-devices:metadata.name"  # the object's
    assert merged.problems == files.problems
    (override,) = merged.warnings[len(files.warnings):]
    assert override.origin == "NodeFeatureRule/intel-dp-devices:metadata.name" and "rule file" in override.reason
