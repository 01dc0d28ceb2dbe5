"""Kubernetes' own validation vectors, run against both implementations we have: the agent's
(agent/k8s_validation.py, which decides what is never sent) and the in-repo API server's
(tests/support/validation.py, which plays the real server in every other test). A value one
accepts and the other rejects would hide a 422 from the test suite.

Source: kubernetes/apimachinery pkg/util/validation/validation_test.go — TestIsQualifiedName,
TestIsValidLabelValue, TestIsDNS1123Subdomain (good/bad lists copied as data), plus the cases
where a Go ``^...$`` pattern and a Python ``re.match(...$)`` disagree: Python's ``$`` also
matches before a final newline, Go's does not, so "true\\n" is a 422 on a real server.
"""

from __future__ import annotations

import pytest

from agent import k8s_validation as agent_side
from tests.support import validation as server_side

QUALIFIED_GOOD = [
    "simple", "now-with-dashes", "1-starts-with-num", "1234", "simple/simple", "now-with-dashes/simple",
    "now-with-dashes/now-with-dashes", "now.with.dots/simple", "now-with.dashes-and.dots/simple",
    "1-num.2-num/3-num", "1234/5678", "1.2.3.4/5678", "Uppercase_Is_OK_123", "example.com/Uppercase_Is_OK_123",
    "requests.storage-foo", "a" * 63, "a" * 253 + "/" + "b" * 63,
]
QUALIFIED_BAD = [
    "nospecialchars%^=@", "cantendwithadash-", "-cantstartwithadash-", "only/one/slash", "Example.com/abc",
    "example_com/abc", "example.com/", "/simple", "a" * 64, "a" * 254 + "/abc",
]
LABEL_VALUE_GOOD = ["simple", "now-with-dashes", "1-starts-with-num", "end-with-num-1", "1234", "a" * 63, ""]
LABEL_VALUE_BAD = [
    "nospecialchars%^=@", "Tama-nui-te-rā.is.Māori.sun", "\\backslashes\\are\\bad", "-starts-with-dash",
    "ends-with-dash-", ".starts.with.dot", "ends.with.dot.", "a" * 64,
]
DNS1123_SUBDOMAIN_GOOD = [
    "a", "ab", "abc", "a1", "a-1", "a--1--2--b", "0", "01", "012", "1a", "1-a", "1--a--b--2",
    "a.a", "ab.a", "abc.a", "a1.a", "a-1.a", "a--1--2--b.a", "a.1", "ab.1", "abc.1", "a1.1", "a-1.1",
    "a--1--2--b.1", "0.a", "01.a", "012.a", "1a.a", "1-a.a", "1--a--b--2", "0.1", "01.1", "012.1", "1a.1",
    "1-a.1", "1--a--b--2.1", "a.b.c.d.e", "aa.bb.cc.dd.ee", "1.2.3.4.5", "11.22.33.44.55", "a" * 253,
]
DNS1123_SUBDOMAIN_BAD = [
    "", "A", "ABC", "aBc", "A1", "A-1", "1-A", "-", "a-", "-a", "1-", "-1", "_", "a_", "_a", "a_b", "1_", "_1",
    "1_2", ".", "a.", ".a", "a..b", "1.", ".1", "1..2", " ", "a ", " a", "a b", "1 ", " 1", "1 2", "A.a", "aB.a",
    "ab.A", "A1.a", "a1.A", "A.1", "aB.1", "A1.1", "1A.1", "0.A", "01.A", "012.A", "1A.a", "1a.A", "A.B.C.D.E",
    "AA.BB.CC.DD.EE", "a.B.c.d.e", "aa.bB.cc.dd.ee", "a@b", "a,b", "a_b", "a;b", "a:b", "a%b", "a?b", "a$b",
    "a" * 254,
]
# Go's $ is end of text; Python's $ also matches before a final "\n" (the anchoring cases)
NEWLINE_KEYS = ["simple\n", "example.com/simple\n", "example.com\n/simple", "simple\n\n", "\nsimple"]
NEWLINE_VALUES = ["true\n", "1234\n", "a\n", "\n"]

AGENT_KEY, SERVER_KEY = agent_side.qualified_name_errors, server_side.qualified_name_problems
AGENT_VALUE, SERVER_VALUE = agent_side.label_value_errors, server_side.label_value_problems


@pytest.mark.parametrize("key", QUALIFIED_GOOD)
def test_qualified_names_kubernetes_accepts(key):
    assert AGENT_KEY(key) == [] and SERVER_KEY(key) == []


@pytest.mark.parametrize("key", QUALIFIED_BAD + NEWLINE_KEYS)
def test_qualified_names_kubernetes_rejects(key):
    assert AGENT_KEY(key) and SERVER_KEY(key)


@pytest.mark.parametrize("value", LABEL_VALUE_GOOD)
def test_label_values_kubernetes_accepts(value):
    assert AGENT_VALUE(value) == [] and SERVER_VALUE(value) == []


@pytest.mark.parametrize("value", LABEL_VALUE_BAD + NEWLINE_VALUES)
def test_label_values_kubernetes_rejects(value):
    assert AGENT_VALUE(value) and SERVER_VALUE(value)


@pytest.mark.parametrize("prefix", DNS1123_SUBDOMAIN_GOOD)
def test_dns_subdomain_prefixes_kubernetes_accepts(prefix):
    key = f"{prefix}/name"
    assert AGENT_KEY(key) == [] and SERVER_KEY(key) == []


@pytest.mark.parametrize("prefix", [p for p in DNS1123_SUBDOMAIN_BAD if "/" not in p] + ["a\n", "a.b\n"])
def test_dns_subdomain_prefixes_kubernetes_rejects(prefix):
    key = f"{prefix}/name"
    assert AGENT_KEY(key) and SERVER_KEY(key)


@pytest.mark.parametrize("value", NEWLINE_VALUES)
def test_a_taint_or_annotation_key_with_a_trailing_newline_is_refused(value):
    assert agent_side.taint_errors("example.com/t", value, "NoSchedule")
    assert agent_side.annotation_key_errors("example.com/a\n")


def test_the_annotation_budget_counts_bytes_as_go_does():
    """apimachinery ValidateAnnotationsSize sums len(k)+len(v), Go's len: bytes. 131,072 'é'
    are 262,144 bytes (over the 256 KiB budget with any key) but only 131,072 characters."""
    over = {"example.com/x": "é" * 131072}
    assert server_side.validate_annotations(over)
    assert not server_side.validate_annotations({"example.com/x": "e" * 131072})
    from agent.desired import DesiredNodeState, annotation_bytes

    assert annotation_bytes(DesiredNodeState(annotations=over)) > agent_side.ANNOTATIONS_TOTAL_MAX
