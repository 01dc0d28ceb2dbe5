"""Reference parsing against distribution/reference's own test tables
(data/distribution_reference_cases.json says which file and commit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.images import InvalidReferenceError, parse_reference

CASES = json.loads((Path(__file__).parent / "data" / "distribution_reference_cases.json").read_text())


@pytest.mark.parametrize("name", CASES["ParseNormalizedNamed_valid"])
def test_valid_names_parse(name: str) -> None:
    parse_reference(name)


@pytest.mark.parametrize("name", CASES["ParseNormalizedNamed_invalid"])
def test_invalid_names_are_refused_with_the_grammar_s_reason(name: str) -> None:
    with pytest.raises(InvalidReferenceError) as caught:
        parse_reference(name)
    assert name in str(caught.value)


@pytest.mark.parametrize("case", CASES["ParseRepositoryInfo"], ids=lambda c: c["FullName"])
def test_repository_info(case: dict[str, str]) -> None:
    for text in filter(None, (case["FamiliarName"], case["FullName"], case.get("AmbiguousName", ""))):
        ref = parse_reference(text)
        assert (ref.domain, ref.repository, ref.name) == (case["Domain"], case["RemoteName"], case["FullName"])


@pytest.mark.parametrize("case", CASES["NormalizedSplitHostname"], ids=lambda c: c["input"])
def test_split_hostname(case: dict[str, str]) -> None:
    ref = parse_reference(case["input"])
    assert (ref.domain, ref.repository) == (case["domain"], case["path"])


@pytest.mark.parametrize("case", CASES["ParseDockerRef"], ids=lambda c: c["name"])
def test_canonical_form_is_parse_docker_ref(case: dict[str, str]) -> None:
    """containerd's CRI pulls ParseDockerRef's answer: default tag latest, digest over tag."""
    assert str(parse_reference(case["input"])) == case["expected"]


def test_registry_api_host() -> None:
    assert parse_reference("nginx").api_host == "registry-1.docker.io"
    assert parse_reference("127.0.0.1:5000/test/multi:1").api_host == "127.0.0.1:5000"


@pytest.mark.parametrize("text", ["", " nginx", "nginx ", "nginx:", "nginx@sha256:abc", "http://x/y"])
def test_hostile_text_is_one_clear_error(text: str) -> None:
    with pytest.raises(InvalidReferenceError):
        parse_reference(text)
