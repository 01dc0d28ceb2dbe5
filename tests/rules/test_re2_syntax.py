"""Go's ``(?<name>`` groups reach RE2 as ``(?P<name>``, which every RE2 reads, the 2022-06-01
release in Debian bookworm (the arm/v7 image compiles google-re2 against it) included; checked
there by running tests/rules/test_go_regexp_corpus.py with google-re2 0.2.20220601 built on
Debian's libre2-dev (deploy/install.md "The image")."""

from __future__ import annotations

import pytest

from agent.gotemplate.regexp import _re2_syntax, compile_go


@pytest.mark.parametrize(("go", "re2"), [
    ("(?<name>a+)b", "(?P<name>a+)b"),
    ("(?<a>x)(?<b_2>(?<c>y))", "(?P<a>x)(?P<b_2>(?P<c>y))"),
    ("(?P<kept>a)", "(?P<kept>a)"),
    (r"\(?<name>", r"\(?<name>"),  # an optional literal paren, then text
    ("[(?<name>]", "[(?<name>]"),  # a class
    (r"\Q(?<name>\E", r"\Q(?<name>\E"),  # quoted text
    ("(?<=a)b", "(?<=a)b"),  # a lookbehind: Go and RE2 refuse it, each in its words
    ("(?<>a)", "(?<>a)"),
])
def test_named_groups_are_written_for_every_re2(go: str, re2: str) -> None:
    assert _re2_syntax(go) == re2


def test_a_rewritten_group_keeps_its_name_and_number() -> None:
    regex = compile_go("(?<year>[0-9]{4})-(?<month>[0-9]{2})")
    assert regex.groupindex == {"year": 1, "month": 2}
    assert regex.names == ["", "year", "month"]
