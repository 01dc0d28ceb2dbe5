"""The template engine against real Go: tests/data/go_template_corpus.json was recorded by Go's
own text/template (tests/oracle/gotemplate.go, missingkey=error, Go's builtin functions only;
refresh with tests/oracle/make_template_corpus.py; the Go version is in the file). Where Go
renders, we must render the same text; where Go fails (parse or execution), we must fail."""

from __future__ import annotations

import json

import pytest

from agent.gotemplate import TemplateError, render
from tests.conftest import REPO

CORPUS = json.loads((REPO / "tests" / "data" / "go_template_corpus.json").read_text())
CASES = CORPUS["cases"]


def test_the_corpus_is_big_enough_and_from_go():
    assert CORPUS["recorded_with"].startswith("go version go1.")
    assert len(CASES) >= 200 and sum(1 for c in CASES if "error" in c) >= 30


@pytest.mark.parametrize("index", range(len(CASES)), ids=lambda i: repr(CASES[i]["template"])[:50])
def test_renders_as_real_go(index):
    case = CASES[index]
    if "error" in case:
        with pytest.raises(TemplateError):
            render(case["template"], case["data"])
    else:
        assert render(case["template"], case["data"]) == case["output"]
