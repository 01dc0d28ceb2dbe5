"""``validate`` knows the feature names: a rule on a feature or element no source produces fails.

The reproduction of the report: ``feature: usb.devic`` passed ``validate`` as ``ok, 0 error(s)``
and could never match. Expected element names come from two places nobody here wrote: NFD's
own sources (``tests/data/nfd/feature_names.json``, read at the commit it names) and what
discovery actually produces on every recorded and generated fixture host.
"""

from __future__ import annotations

import json

import pytest

from agent.cli import main
from agent.discovery import discover
from agent.hostfs import HostFS
from agent.rules.vocabulary import engine_vocabulary
from tests.conftest import FIXTURES, REPO
from tests.rules.helpers import catalogue_from, nfr

NFD_NAMES = json.loads((REPO / "tests/data/nfd/feature_names.json").read_text())["features"]
CASES = sorted(p.name for p in FIXTURES.iterdir() if p.is_dir())


def _validate(tmp_path, capsys, rules_yaml: str, *extra: str) -> tuple[int, str]:
    (tmp_path / "rules.yaml").write_text(nfr(rules_yaml))
    code = main(["validate", f"--rules={tmp_path}", *extra])
    return code, capsys.readouterr().err


def test_a_misspelt_feature_fails_validate_with_its_line_and_the_closest_name(tmp_path, capsys):
    code, err = _validate(tmp_path, capsys, """
        - name: coral
          labels: {example.com/coral: "true"}
          matchFeatures:
            - feature: usb.devic
              matchExpressions:
                vendor: {op: In, value: ["1a6e"]}
    """)
    assert code == 1
    assert f"error: {tmp_path}/rules.yaml:" in err
    assert "feature usb.devic" in err and "did you mean 'usb.device'?" in err


def test_feature_names_are_case_insensitive_as_in_nfd(tmp_path, capsys):
    code, err = _validate(tmp_path, capsys, """
        - name: coral
          labels: {example.com/coral: "true"}
          matchFeatures:
            - feature: USB.Device
              matchExpressions:
                vendor: {op: In, value: ["1a6e"]}
    """)
    assert (code, err) == (0, "")


def test_an_element_a_closed_feature_never_has_is_an_error_with_the_closest(tmp_path, capsys):
    catalogue = catalogue_from(tmp_path, {"r.yaml": nfr("""
        - name: gpu
          labels: {example.com/gpu: "true"}
          matchFeatures:
            - feature: pci.device
              matchExpressions:
                Vendor: {op: In, value: ["10de"]}
                class: {op: InRegexp, value: ["^03"]}
          matchAny:
            - matchFeatures:
                - feature: kernel.loadedmodule
                  matchExpressions:
                    any_module_name: {op: Exists}
                - feature: cpu.topology
                  matchExpressions:
                    socket_cont: {op: Gt, value: ["1"]}
    """)})
    found = sorted((p.item, p.reason.rsplit("; ", 1)[-1]) for p in catalogue.problems)
    assert found == [("cpu.topology element socket_cont", "did you mean 'socket_count'?"),
                     ("pci.device element Vendor", "did you mean 'vendor'?")]
    # each names the line of its own expression
    lines = {p.item: p.origin.rsplit(":", 1)[1] for p in catalogue.problems}
    text = (tmp_path / "r.yaml").read_text().splitlines()
    assert "Vendor:" in text[int(lines["pci.device element Vendor"]) - 1]
    assert "socket_cont:" in text[int(lines["cpu.topology element socket_cont"]) - 1]


def test_references_are_checked_too(tmp_path):
    catalogue = catalogue_from(tmp_path, {"r.yaml": nfr("""
        - name: sgx
          extendedResources:
            example.com/epc: "@cpu.security.sgx.epcc"
            example.com/count: "@count"
          labels:
            example.com/kernel: "@kernel.versoin.major"
          matchFeatures:
            - feature: cpu.security
              matchExpressions:
                sgx.enabled: {op: IsTrue}
    """)})
    found = sorted((p.item, p.reason.rsplit("; ", 1)[-1]) for p in catalogue.problems)
    assert found == [("cpu.security element sgx.epcc", "did you mean 'sgx.epc'?"),
                     ("feature kernel.versoin", "did you mean 'kernel.version'?")]


def test_a_third_party_domain_is_a_warning_not_an_error(tmp_path, capsys):
    rule = """
        - name: vendor gpu
          labels: {example.com/gpu: "true"}
          matchFeatures:
            - feature: vendor.gpu
              matchExpressions:
                model: {op: Exists}
    """
    code, err = _validate(tmp_path, capsys, rule)
    assert code == 0
    assert "warning:" in err and "feature vendor.gpu" in err and "NodeFeature" in err
    code, _ = _validate(tmp_path, capsys, rule, "--strict")
    assert code == 1


def test_the_engine_features_are_known(tmp_path):
    catalogue = catalogue_from(tmp_path, {"r.yaml": nfr("""
        - name: chained
          labels: {example.com/chained: "true"}
          matchFeatures:
            - feature: rule.matched
              matchExpressions:
                anything-an-earlier-rule-set: {op: Exists}
            - feature: node.label
              matchExpressions:
                kkohtaka.org/edgetpu: {op: Exists}
    """)})
    assert (catalogue.problems, catalogue.warnings) == ((), ())


@pytest.mark.parametrize("feature", sorted(NFD_NAMES))
def test_every_nfd_feature_and_element_is_known(feature):
    """A rule written for NFD validates here: NFD's names are in our vocabulary."""
    vocabulary = engine_vocabulary()
    assert feature in vocabulary
    expected = NFD_NAMES[feature]["elements"]
    if expected is None:
        assert vocabulary[feature] is None
    else:
        assert vocabulary[feature] is None or set(expected) <= vocabulary[feature]


@pytest.mark.parametrize("case", CASES)
def test_what_discovery_produces_is_declared(case):
    """The declarations cannot fall behind the sources: every feature and element discovered
    on every fixture host is in the vocabulary."""
    vocabulary = engine_vocabulary()
    result = discover(HostFS(FIXTURES / case))
    for name, feature in result.features.items():
        assert name in vocabulary, f"{case}: {name} is produced but not declared"
        elements = vocabulary[name]
        if elements is None:
            continue
        produced = set(feature.flags) | set(feature.attributes)
        for instance in feature.instances:
            produced |= set(instance.attributes)
        assert produced <= elements, f"{case}: {name} produces undeclared {sorted(produced - elements)}"


def test_the_shipped_catalogues_validate_clean():
    assert main(["validate", "--strict", f"--rules={REPO / 'labels'}",
                 f"--rules={REPO / 'deploy/optional-rules'}"]) == 0
