"""The Go-regexp layer against real Go: tests/data/go_regexp_corpus.json was recorded by Go's
own regexp package (tests/oracle/goregexp.go, refreshed with tests/oracle/make_regexp_corpus.py;
the Go version is in the file). For every pattern: compile error (Go's exact text) or the
group count and names; for every input: MatchString, FindStringSubmatchIndex,
FindAllStringIndex, ReplaceAllString / ReplaceAllLiteralString and Split (n = -1 and 2)."""

from __future__ import annotations

import json

import pytest

from agent.gotemplate import regexp as goregex
from agent.gotemplate.fmt import FunctionError
from tests.conftest import REPO

CORPUS = json.loads((REPO / "tests" / "data" / "go_regexp_corpus.json").read_text())
CASES = CORPUS["cases"]


def test_the_corpus_is_big_enough_and_from_go():
    assert CORPUS["recorded_with"].startswith("go version go1.")
    assert len(CASES) >= 500 and sum(len(c["outcomes"]) for c in CASES) >= 2000
    assert sum(1 for c in CASES if c.get("error")) >= 30


def _spans(match, groups):
    if match is None:
        return None
    out = []
    for index in range(groups + 1):
        start, end = match.span(index)
        out += [start, end]
    return out


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: repr(CASES[i]["pattern"])[:40])
def test_matches_real_go(index):
    case = CASES[index]
    if case.get("error"):
        with pytest.raises(FunctionError) as err:
            goregex.compile_go(case["pattern"])
        assert str(err.value) == case["error"]
        return
    regex = goregex.compile_go(case["pattern"])
    assert regex.groups == case["groups"]
    assert regex.names == case["names"]  # Go's SubexpNames, duplicates included
    for outcome in case["outcomes"]:
        text = outcome["input"]
        first = regex.search(text)
        assert (first is not None) == outcome["match"], text
        assert _spans(first, regex.groups) == outcome["submatch"], text
        assert [[m.start(), m.end()] for m in goregex.find_all(regex, text)] == outcome["all"], text
        assert goregex.replace_all(regex, text, case["repl"]) == outcome["replace"], text
        assert goregex.replace_all(regex, text, case["repl"], literal=True) == outcome["literal"], text
        assert goregex.split(regex, text, -1) == outcome["split"], text
        assert goregex.split(regex, text, 2) == outcome["split2"], text
