"""NodeFeatureRule operators with NFD's semantics (``pkg/apis/nfd/nodefeaturerule/expression.go``).

``check_expression`` validates an expression when it is loaded (value counts, integers,
``GtLt`` ordering, regex syntax); ``evaluate`` applies it to one key that is present (with a
value or, for a flag, without one) or absent.  A non-integer feature value under ``Gt`` is a
``RuleEvaluationError`` (the whole rule fails, as in NFD), never a quiet ``False``.

``type: version`` compares like Masterminds semver's loose parser, which NFD uses:
``v?MAJOR[.MINOR[.PATCH]][-prerelease][+build]``, missing parts are 0, the prerelease and
build parts are dropped.  Implemented here (a dozen lines) because neither ``packaging``
(PEP 440) nor an installed ``semver`` parses that grammar.  Regexes use the linear-time RE2
engine shared with the template helper, so a hostile pattern cannot hang evaluation.
"""

from __future__ import annotations

import re

from agent.gotemplate.regexp import FunctionError, compile_go
from agent.rules.model import OPERATORS, Expression

# Go's ^...$ without (?m) anchors at the ends of the text: fullmatch, never Python's $ (which
# also matches before a final newline). Neither Go parser trims whitespace.
_SEMVER = re.compile(
    r"v?([0-9]+)(\.[0-9]+)?(\.[0-9]+)?"
    r"(-([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?(\+([0-9A-Za-z\-]+(\.[0-9A-Za-z\-]+)*))?"
)
_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = range(-(2**63), 2**63)  # strconv.Atoi on a 64-bit platform: out of range is an error
NO_VALUES = ("Exists", "DoesNotExist", "IsTrue", "IsFalse")
SOME_VALUES = ("In", "NotIn", "InRegexp")
ONE_VALUE = ("Gt", "Ge", "Lt", "Le")
TWO_VALUES = ("GtLt", "GeLe")


class RuleEvaluationError(ValueError):
    """An expression cannot be evaluated (NFD: the rule fails with an error)."""


def parse_version(text: str) -> tuple[int, int, int]:
    """Loose semver -> (major, minor, patch); prerelease/build dropped."""
    match = _SEMVER.fullmatch(text)
    if not match:
        raise RuleEvaluationError(f"invalid semantic version {text!r}")
    major, minor, patch = match.group(1), match.group(2), match.group(3)
    return (int(major), int(minor[1:]) if minor else 0, int(patch[1:]) if patch else 0)


def _number(text: str, value_type: str) -> tuple[int, ...]:
    """``text`` as something to order: a version's three parts, or an integer as a 1-tuple."""
    if value_type == "version":
        return parse_version(text)
    if not _INT.fullmatch(text) or int(text) not in _INT64:
        raise RuleEvaluationError(f"not an integer: {text!r}")
    return (int(text),)


def check_expression(expr: Expression) -> list[str]:
    """Why ``expr`` is malformed (empty list = fine); checked once, at load. The first problem
    found, in this order: the operator, its number of values, ``type: version`` with it, the
    values themselves."""
    if expr.op not in OPERATORS:
        return [f"unknown op {expr.op!r} (one of {', '.join(OPERATORS)})"]
    problem = _count_problem(expr.op, len(expr.values))
    if problem is None and expr.value_type == "version" and expr.op not in ONE_VALUE + TWO_VALUES:
        problem = f"type: version is only allowed with Gt, Ge, Lt, Le, GtLt, GeLe (not {expr.op})"
    problem = problem or _values_problem(expr)
    return [problem] if problem else []


def _count_problem(op: str, count: int) -> str | None:
    """Why ``count`` values do not suit ``op``, or None."""
    if op in NO_VALUES and count:
        return f"op {op} takes no values, got {count}"
    if op in SOME_VALUES and not count:
        return f"op {op} needs at least one value"
    if op in ONE_VALUE and count != 1:
        return f"op {op} needs exactly one value, got {count}"
    if op in TWO_VALUES and count != 2:
        return f"op {op} needs exactly two values, got {count}"
    return None


def _values_problem(expr: Expression) -> str | None:
    """Why the values of ``expr`` (their number already right) are not what its operator reads:
    integers or versions, ordered for a range; patterns RE2 compiles. None when they are."""
    try:
        if expr.op in ONE_VALUE + TWO_VALUES:
            bounds = [_number(v, expr.value_type) for v in expr.values]
            if expr.op in TWO_VALUES and not bounds[0] < bounds[1]:
                return f"op {expr.op} needs value[0] < value[1], got {list(expr.values)}"
        if expr.op == "InRegexp":
            for pattern in expr.values:
                compile_go(pattern)
    except RuleEvaluationError as exc:
        return f"op {expr.op}: {exc}"
    except FunctionError as exc:
        return f"op InRegexp: {exc}"
    return None


def _compare(op: str, value: str, expr: Expression) -> bool:
    try:
        left = _number(value, expr.value_type)
    except RuleEvaluationError as exc:
        raise RuleEvaluationError(f"{expr.describe()}: feature value {exc}") from None
    bounds = [_number(v, expr.value_type) for v in expr.values]
    if op == "Gt":
        return left > bounds[0]
    if op == "Ge":
        return left >= bounds[0]
    if op == "Lt":
        return left < bounds[0]
    if op == "Le":
        return left <= bounds[0]
    if op == "GtLt":
        return bounds[0] < left < bounds[1]
    return bounds[0] <= left <= bounds[1]  # GeLe


def evaluate(expr: Expression, present: bool, value: str | None) -> bool:
    """Apply ``expr`` to one key.  ``value`` is None for a flag (present, no value) or absent
    key; value operators then give False, as NFD evaluates them against no value."""
    op = expr.op
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if not present or value is None:
        return False  # NotIn on a missing key is False too
    if op == "In":
        return value in expr.values
    if op == "NotIn":
        return value not in expr.values
    if op == "InRegexp":
        try:
            return any(compile_go(p).search(value) is not None for p in expr.values)
        except FunctionError as exc:
            raise RuleEvaluationError(f"{expr.describe()}: {exc}") from None
    if op == "IsTrue":
        return value == "true"
    if op == "IsFalse":
        return value == "false"
    if op in ONE_VALUE + TWO_VALUES:
        return _compare(op, value, expr)
    raise RuleEvaluationError(f"unknown op {op!r}")
