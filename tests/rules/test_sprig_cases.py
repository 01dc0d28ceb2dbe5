"""Sprig's own test cases (Masterminds/sprig ``*_test.go``, extracted as data by
tests/oracle/extract_sprig_cases.py into tests/data/sprig_cases.json) for every Sprig and
builtin function our template engine supports: the expected strings are Sprig's, produced by
Go's text/template with Sprig's function map."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.gotemplate import TemplateError, render

DATA = json.loads((Path(__file__).resolve().parents[1] / "data" / "sprig_cases.json").read_text())
# Sprig's test harness runs templates with Go's default missingkey; NFD (and this engine) use
# missingkey=error, so a missing field is an error here, as NFD would report it.
NEEDS_DEFAULT_MISSINGKEY = {'{{ .Nothing | default "123" }}'}


def test_the_corpus_names_its_source_and_size():
    assert DATA["source"].startswith("Masterminds/sprig at commit ") and "unknown" not in DATA["source"]
    assert DATA["kept"] == len(DATA["cases"]) == 114 and DATA["extracted"] == 307


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: f"{c['test']}:{c['template'][:40]}")
def test_sprig_case(case):
    if case["template"] in NEEDS_DEFAULT_MISSINGKEY:
        with pytest.raises(TemplateError, match='map has no entry for key "Nothing"'):
            render(case["template"], {})
        return
    assert render(case["template"], {}) == case["expected"]


# Sprig's runtv() cases whose data is plain (no Go structs, no missing keys), transcribed with
# the data translated to JSON-like values; file:line at the corpus's commit.
WITH_DATA = [
    ("strings_test.go:71", "{{ .value | quote }}", {"value": None}, ""),
    ("strings_test.go:86", "{{ .value | squote }}", {"value": None}, ""),
    ("strings_test.go:154", "{{ list 1 .value 2 | toStrings }}", {"value": None}, "[1 2]"),
    ("strings_test.go:162", '{{ join "-" .V }}', {"V": ["a", "b", "c"]}, "a-b-c"),
    ("strings_test.go:163", '{{ join "-" .V }}', {"V": "abc"}, "abc"),
    ("strings_test.go:164", '{{ join "-" .V }}', {"V": [1, 2, 3]}, "1-2-3"),
    ("strings_test.go:165", '{{ join "-" .value }}', {"value": ["1", None, "2"]}, "1-2"),
    ("strings_test.go:264", '{{ .value | cat "a" "b"}}', {"value": None}, "a b"),
]


@pytest.mark.parametrize(("where", "template", "data", "expected"), WITH_DATA, ids=[w[0] for w in WITH_DATA])
def test_sprig_case_with_data(where, template, data, expected):
    assert render(template, data) == expected
