"""Every NodeFeatureRule operator, with its edge cases as NFD's
``pkg/apis/nfd/nodefeaturerule/expression.go`` decides them (node-feature-discovery 76e6cc8c)."""

from __future__ import annotations

import pytest

from agent.rules.expressions import RuleEvaluationError, check_expression, evaluate, parse_version
from agent.rules.model import Expression

MISSING = object()

CASES = [
    # op, values, type, feature value (None=flag, MISSING=absent), expected
    ("In", ["a", "b"], "", "b", True),
    ("In", ["a"], "", "c", False),
    ("In", ["a"], "", MISSING, False),
    ("In", ["a"], "", None, False),  # flag: value ops see no value
    ("NotIn", ["a"], "", "c", True),
    ("NotIn", ["a"], "", "a", False),
    ("NotIn", ["a"], "", MISSING, False),  # a missing key is false, not true
    ("InRegexp", ["^10"], "", "10de", True),
    ("InRegexp", ["de"], "", "10de", True),  # unanchored
    ("InRegexp", ["^de"], "", "10de", False),
    ("InRegexp", ["x", "^1"], "", "10de", True),
    ("Exists", [], "", "anything", True),
    ("Exists", [], "", None, True),
    ("Exists", [], "", MISSING, False),
    ("DoesNotExist", [], "", MISSING, True),
    ("DoesNotExist", [], "", None, False),
    ("Gt", ["5"], "", "6", True),
    ("Gt", ["5"], "", "5", False),
    ("Ge", ["5"], "", "5", True),
    ("Lt", ["5"], "", "-1", True),
    ("Le", ["5"], "", "6", False),
    ("GtLt", ["1", "5"], "", "5", False),
    ("GtLt", ["1", "5"], "", "3", True),
    ("GeLe", ["1", "5"], "", "5", True),
    ("GeLe", ["1", "5"], "", "0", False),
    ("Gt", ["5"], "", MISSING, False),
    ("IsTrue", [], "", "true", True),
    ("IsTrue", [], "", "True", False),
    ("IsFalse", [], "", "false", True),
    ("IsFalse", [], "", MISSING, False),
    ("Ge", ["22.04"], "version", "22.04", True),
    ("Ge", ["22.04"], "version", "20.10", False),
    ("Gt", ["5.15"], "version", "6.5.0-35-generic", True),  # prerelease dropped
    ("Lt", ["5.4"], "version", "5.10", False),  # numeric, not string, compare
    ("GtLt", ["5.4", "6.0"], "version", "v5.15.3", True),
    ("Le", ["1.0.0"], "version", "1", True),
]


@pytest.mark.parametrize("op,values,value_type,value,expected", CASES, ids=[f"{c[0]}-{c[4]}-{i}" for i, c in enumerate(CASES)])
def test_operator_table(op, values, value_type, value, expected):
    expr = Expression("k", op, tuple(values), value_type)
    assert check_expression(expr) == []
    present = value is not MISSING
    assert evaluate(expr, present, None if value is MISSING else value) is expected


@pytest.mark.parametrize("op,values", [("Gt", ["5"]), ("GeLe", ["1", "9"])])
def test_non_integer_feature_value_is_an_error_not_false(op, values):
    with pytest.raises(RuleEvaluationError, match="not an integer"):
        evaluate(Expression("k", op, tuple(values)), True, "abc")


@pytest.mark.parametrize("expr,why", [
    (Expression("k", "Foo"), "unknown op"),
    (Expression("k", "In"), "at least one value"),
    (Expression("k", "Exists", ("x",)), "takes no values"),
    (Expression("k", "Gt", ("1", "2")), "exactly one value"),
    (Expression("k", "GtLt", ("1",)), "exactly two values"),
    (Expression("k", "GtLt", ("5", "1")), "value\\[0\\] < value\\[1\\]"),
    (Expression("k", "Gt", ("x",)), "not an integer"),
    (Expression("k", "In", ("1",), "version"), "only allowed with"),
    (Expression("k", "Gt", ("not.a.version!",), "version"), "invalid semantic version"),
    (Expression("k", "InRegexp", ("(",)), "InRegexp"),
])
def test_malformed_expressions_are_refused_at_load(expr, why):
    errors = check_expression(expr)
    assert errors and __import__("re").search(why, errors[0]), errors


def test_version_parsing_is_loose_semver():
    assert parse_version("v1.2.3-rc1+build") == (1, 2, 3)
    assert parse_version("22.04") == (22, 4, 0)
    assert parse_version("6") == (6, 0, 0)
    with pytest.raises(RuleEvaluationError):
        parse_version("six")


# Recorded from real Go (Go 1.19, Debian 2026-11-24): strconv.Atoi, which NFD's Gt/Lt use on
# the feature value, and Masterminds semver NewVersion (golang-github-masterminds-semver-dev
# 3.2.0), which `type: version` uses. Neither trims whitespace; Go's $ is end of text.
GO_ATOI = [("5", 5), (" 5", None), ("5\n", None), ("+5", 5), ("-5", -5), ("0x10", None),
           ("9223372036854775807", 9223372036854775807), ("9223372036854775808", None),
           ("-9223372036854775808", -9223372036854775808), ("", None), ("1_000", None), ("٣", None)]
GO_SEMVER = [("1.2.3", (1, 2, 3)), (" 1.2.3", None), ("1.2.3\n", None), ("v1.2", (1, 2, 0)), ("5", (5, 0, 0)),
             ("1.2.3-rc1+b7", (1, 2, 3)), ("1.2.3.4", None), ("01.2.3", (1, 2, 3)), ("4.19.0-26-amd64", (4, 19, 0))]


@pytest.mark.parametrize("text,number", GO_ATOI)
def test_integer_values_parse_as_go_atoi_does(text, number):
    expr = Expression("x", "Ge", ("-9223372036854775808",))
    if number is None:
        with pytest.raises(RuleEvaluationError):
            evaluate(expr, True, text)
    else:
        assert evaluate(expr, True, text) is True
        assert evaluate(Expression("x", "Le", (str(number),)), True, text) is True
        assert evaluate(Expression("x", "Lt", (str(number),)), True, text) is False


@pytest.mark.parametrize("text,version", GO_SEMVER)
def test_versions_parse_as_masterminds_semver_does(text, version):
    if version is None:
        with pytest.raises(RuleEvaluationError):
            parse_version(text)
    else:
        assert parse_version(text) == version
