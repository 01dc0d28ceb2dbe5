"""The test API server's patch code against external test suites and the real library.

Sources (all under tests/data/k8s/, none written here):

* ``json_patch_tests.json``, ``json_patch_spec_tests.json``: the RFC 6902 test suite,
  json-patch/json-patch-tests at commit 2a928f9 (Apache-2.0), unchanged;
* ``rfc7386_examples.json``: RFC 7386's section 3 example and Appendix A test cases;
* ``evanphx_patch_corpus.json``: what evanphx/json-patch, the library kube-apiserver applies
  JSON patch and merge patch with, answers for each of them (tests/oracle/make_patch_corpus.py).

kube-apiserver follows the library, not the RFC, where they differ; so does the fake, and
the cases where the library departs from the RFC suite are pinned here by number.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.support import patching

DATA = Path(__file__).resolve().parents[1] / "data" / "k8s"
SUITES = {name: json.loads((DATA / name).read_text()) for name in ("json_patch_tests.json", "json_patch_spec_tests.json")}
RFC7386 = json.loads((DATA / "rfc7386_examples.json").read_text())["cases"]
CORPUS = json.loads((DATA / "evanphx_patch_corpus.json").read_text())
JSON_CASES = [c for c in CORPUS["cases"] if c["kind"] == "json"]
MERGE_CASES = [c for c in CORPUS["cases"] if c["kind"] == "merge"]

# The corpus was recorded with Debian's evanphx/json-patch (its v4 line); kube-apiserver
# vendors gopkg.in/evanphx/json-patch.v4 v4.12/v4.13, whose patch.go (read in kubernetes'
# vendor/ tree) differs in three cases: it replaces and tests the whole document at path ""
# and treats a missing ``value`` of ``test`` on a null element as a match (the older code
# panics). For these the expected outcome is the vendored code's, as read, not the recording.
VENDORED_V4_13 = {
    ("json_patch_tests.json", 43): ("ok", {"baz": "qux"}),
    ("json_patch_tests.json", 56): ("ok", {"foo": 1}),
    ("json_patch_tests.json", 79): ("ok", [None]),
}
# Where evanphx (and so kube-apiserver) departs from the RFC 6902 suite's expectation.
LIBRARY_DEPARTS_FROM_RFC_SUITE = {
    ("json_patch_tests.json", 10),  # a scalar document (disabled in the suite)
    ("json_patch_tests.json", 11), ("json_patch_tests.json", 12),  # add at the root path "" fails
    ("json_patch_tests.json", 63),
    ("json_patch_tests.json", 19),  # negative array index: counted from the end, not an error
    ("json_patch_tests.json", 77), ("json_patch_tests.json", 78),  # a missing value is null
    ("json_patch_tests.json", 82),  # copy from a missing key copies null
    ("json_patch_tests.json", 85),  # duplicate "op" members: the last wins (disabled in the suite)
    ("json_patch_tests.json", 87), ("json_patch_tests.json", 88),  # "00" and "01" are array indexes
    ("json_patch_tests.json", 43), ("json_patch_tests.json", 56),  # Debian's copy only; v4.13 agrees
}


def outcome_of_library(case: dict) -> tuple[str, object]:
    key = (case["suite"], case["index"])
    if key in VENDORED_V4_13:
        return VENDORED_V4_13[key]
    return ("ok", case["result"]) if case["ok"] else ("error", case["error"])


def ours(doc, ops) -> tuple[str, object]:
    try:
        return "ok", patching.json_patch(doc, ops)
    except patching.PatchError as err:
        return "error", err


def test_the_corpus_covers_every_suite_case():
    for name, tests in SUITES.items():
        with_patch = [i for i, t in enumerate(tests) if "patch" in t]
        assert [c["index"] for c in JSON_CASES if c["suite"] == name] == with_patch
    assert len(MERGE_CASES) == len(RFC7386) == 16
    assert len(JSON_CASES) == 112
    assert "go version" in CORPUS["recorded_with"] and "evanphx" in CORPUS["recorded_with"]


@pytest.mark.parametrize("case", JSON_CASES, ids=lambda c: f"{c['suite'][:-5]}-{c['index']}")
def test_json_patch_does_what_kube_apiservers_library_does(case):
    test = SUITES[case["suite"]][case["index"]]
    kind, value = outcome_of_library(case)
    before = copy.deepcopy(test["doc"])
    got_kind, got = ours(test["doc"], test["patch"])
    assert test["doc"] == before  # atomic: the target is never modified
    if not isinstance(test["doc"], (dict, list)):  # a Node is always an object: the server never meets this
        assert kind == got_kind == "error"
        return
    assert got_kind == kind, (test.get("comment"), value, got)
    if kind == "ok":
        assert got == value
    else:
        assert got.code == 422 and got.message == patching.GENERIC_422


@pytest.mark.parametrize("case", JSON_CASES, ids=lambda c: f"{c['suite'][:-5]}-{c['index']}")
def test_the_library_agrees_with_the_rfc_suite_except_where_pinned(case):
    test = SUITES[case["suite"]][case["index"]]
    kind, value = ("ok", case["result"]) if case["ok"] else ("error", case["error"])
    expected_kind = "error" if "error" in test else "ok"
    agrees = kind == expected_kind and ("expected" not in test or value == test["expected"])
    assert agrees != ((case["suite"], case["index"]) in LIBRARY_DEPARTS_FROM_RFC_SUITE), (test, kind, value)


@pytest.mark.parametrize("index", range(len(RFC7386)))
def test_merge_patch_rfc7386_examples(index):
    case, recorded = RFC7386[index], MERGE_CASES[index]
    if isinstance(case["patch"], dict):
        assert patching.merge_patch(case["target"], case["patch"]) == case["result"]
        assert recorded["ok"] and recorded["result"] == case["result"]  # the library agrees with the RFC
    elif isinstance(case["patch"], list):  # a whole-document array: the library agrees, a Node cannot be one
        assert recorded["ok"] and recorded["result"] == case["result"]
        with pytest.raises(patching.PatchError) as info:
            patching.apply(patching.MERGE, {"metadata": {}}, case["patch"])
        assert info.value.code == 400
    else:  # null or a string: evanphx answers ErrBadJSONPatch, patch.go makes it a 400
        assert not recorded["ok"] and recorded["error"] == "Invalid JSON Patch"
        with pytest.raises(patching.PatchError) as info:
            patching.apply(patching.MERGE, {"metadata": {}}, case["patch"])
        assert (info.value.code, info.value.message) == (400, "Invalid JSON Patch")
