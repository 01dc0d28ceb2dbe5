"""The Sprig functions NodeFeatureRule templates use, with Sprig's (Go) semantics.

NFD exposes Sprig minus env/expandenv/getHostByName. This is the deterministic, side-effect
free part of it that rules actually use: strings, conversions, integer math, defaults,
regexes, lists and dicts. Clock, random, crypto, network and environment functions are left
out on purpose: rule evaluation must be pure. Each entry of `SPRIG` is
(implementation, fixed parameter kinds, variadic kind or None[, metered]).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping
from functools import partial
from typing import Any

from agent.gotemplate import regexp as goregex
from agent.gotemplate.fmt import (
    MAX_VALUE_CHARS,
    FunctionError,
    WorkMeter,
    format_value,
    go_quote,
    go_type,
    sorted_keys,
    truth,
)

_GO_INT = re.compile(r"[+-]?(0[xX][_0-9a-fA-F]+|0[oO][_0-7]+|0[bB][_01]+|0[_0-7]*|[1-9][_0-9]*)")


def strval(value: object) -> str:
    return format_value(value)


def strslice(value: object) -> list[str]:
    """Sprig's strslice: a list's non-nil items as strings; a scalar becomes [scalar]."""
    if isinstance(value, (list, tuple)):
        return [strval(item) for item in value if item is not None]
    return [] if value is None else [strval(value)]


def _wrap64(number: int) -> int:
    return (number + 2**63) % 2**64 - 2**63


def _parse_go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64): 0x/0o/0b prefixes, leading 0 octal; None on error."""
    if not _GO_INT.fullmatch(text) or "__" in text or text.endswith("_"):
        return None
    sign = -1 if text.startswith("-") else 1
    digits = text.lstrip("+-")
    if digits[:2].lower() in ("0x", "0o", "0b"):
        number = int(digits, 0)
    elif digits.startswith("0") and len(digits) > 1:
        if "_" in digits:
            return None
        number = int(digits, 8)
    else:
        if "_" in digits:
            return None
        number = int(digits)
    number *= sign
    return number if -(2**63) <= number < 2**63 else None


def _trim_zero_decimal(text: str) -> str:
    """cast's trimZeroDecimal: "12.000" -> "12" so it parses as an integer."""
    stripped = text.rstrip("0")
    if stripped.endswith(".") and stripped != text and stripped[:-1]:
        return stripped[:-1]
    return text


def to_int64(value: object) -> int:
    """cast.ToInt64 as Sprig uses it: unparseable values become 0."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return _wrap64(value)
    if isinstance(value, float):
        return _wrap64(int(value)) if value == value and abs(value) != float("inf") else 0
    if isinstance(value, str):
        parsed = _parse_go_int(_trim_zero_decimal(value))
        return 0 if parsed is None else parsed
    return 0


def to_float64(value: object) -> float:
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str) and value == value.strip():
        try:
            return float(value.replace("_", "x") if "_" in value else value)
        except ValueError:
            return 0.0
    return 0.0


def atoi(text: str) -> int:
    if re.fullmatch(r"[+-]?[0-9]+", text):
        number = int(text)
        if -(2**63) <= number < 2**63:
            return number
    return 0


def _as_list(value: object, name: str) -> list[object]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise FunctionError(f"Cannot find {name} on type {go_type(value)}")


def _div(a: object, b: object, op: str) -> int:
    dividend, divisor = to_int64(a), to_int64(b)
    if divisor == 0:
        raise FunctionError("runtime error: integer divide by zero")
    quotient = abs(dividend) // abs(divisor) * (1 if (dividend < 0) == (divisor < 0) else -1)
    return _wrap64(quotient) if op == "div" else dividend - divisor * quotient


def _repeat(count: int, text: str) -> str:
    if count < 0:
        raise FunctionError("strings: negative Repeat count")
    if count * len(text) > MAX_VALUE_CHARS:
        raise FunctionError(f"repeat result exceeds {MAX_VALUE_CHARS} characters")
    return text * count


def _substr(start: int, end: int, text: str) -> str:
    if start < 0:
        start = 0
    if end < 0 or end > len(text):
        end = len(text)
    if start > end:
        raise FunctionError(f"slice bounds out of range [{start}:{end}]")
    return text[start:end]


def _trunc(count: int, text: str) -> str:
    if count >= 0 and len(text) > count:
        return text[:count]
    if count < 0 and len(text) + count > 0:
        return text[len(text) + count :]
    return text


def _title(text: str) -> str:
    """strings.Title: upper-case the first letter of every word."""
    out, previous = [], " "
    for char in text:
        separator = not (previous.isalnum() or previous == "_")
        out.append(char.upper() if separator else char)
        previous = char
    return "".join(out)


def _split(sep: str, text: str, limit: int = -1) -> list[str]:
    """strings.Split / SplitN (an empty separator splits into characters)."""
    if limit == 0:
        return []
    if sep == "":
        chars = list(text)
        return chars if limit < 0 or limit >= len(chars) else chars[: limit - 1] + ["".join(chars[limit - 1 :])]
    return text.split(sep) if limit < 0 else text.split(sep, limit - 1)


def _indexed(parts: list[str]) -> dict[str, str]:
    return {f"_{i}": part for i, part in enumerate(parts)}


def _freeze(value: object) -> Hashable:
    """A hashable stand-in with Go's DeepEqual equality (types matter: 1 != "1")."""
    if isinstance(value, (list, tuple)):
        return ("list", tuple(_freeze(item) for item in value))
    if isinstance(value, Mapping):
        return ("map", tuple((_freeze(k), _freeze(value[k])) for k in sorted_keys(value)))
    if isinstance(value, (str, int, float, bool)) or value is None:
        return (type(value).__name__, value)
    return ("object", id(value))


def _uniq(items: object) -> list[object]:
    seen: set[Hashable] = set()
    result: list[object] = []
    for item in _as_list(items, "uniq"):
        key = _freeze(item)
        if key not in seen:
            seen.add(key)
            result.append(item)
    return result


def _has(needle: object, haystack: object) -> bool:
    if haystack is None:
        return False
    return any(type(needle) is type(item) and needle == item for item in _as_list(haystack, "has"))


def _dict(*pairs: object) -> dict[str, object]:
    result: dict[str, object] = {}
    for position in range(0, len(pairs), 2):
        result[strval(pairs[position])] = pairs[position + 1] if position + 1 < len(pairs) else ""
    return result


def _keys(*maps: Mapping[Any, object]) -> list[str]:
    return [key for mapping in maps for key in sorted_keys(mapping)]


def _regex_find_all(pattern: str, text: str, limit: int, *, meter: WorkMeter) -> list[str]:
    return [m.group(0) or "" for m in goregex.find_all(goregex.compile_go(pattern), text, limit, meter)]


def _regex_find(pattern: str, text: str, *, meter: WorkMeter) -> str:
    found = _regex_find_all(pattern, text, 1, meter=meter)
    return found[0] if found else ""


def _regex_match(pattern: str, text: str, *, meter: WorkMeter) -> bool:
    try:
        regex = goregex.compile_go(pattern)
    except FunctionError:
        return False  # Sprig's regexMatch ignores a bad pattern; mustRegexMatch reports it
    return regex.search(text, 0, meter) is not None


def _must_regex_match(pattern: str, text: str, *, meter: WorkMeter) -> bool:
    return goregex.compile_go(pattern).search(text, 0, meter) is not None


def _regex_replace(pattern: str, text: str, replacement: str, *, meter: WorkMeter, literal: bool = False) -> str:
    return goregex.replace_all(goregex.compile_go(pattern), text, replacement, literal, meter)


def _regex_split(pattern: str, text: str, limit: int, *, meter: WorkMeter) -> list[str]:
    return goregex.split(goregex.compile_go(pattern), text, limit, meter)


def _default(fallback: object, *given: object) -> object:
    return given[0] if given and truth(given[0]) else fallback


# implementation, parameter kinds, kind of the variadic rest (None: fixed arity) and, when
# present and true, whether it takes the render's WorkMeter (agent.gotemplate.funcs.Function)
Signature = (tuple[Callable[..., object], tuple[str, ...], str | None]
             | tuple[Callable[..., object], tuple[str, ...], str | None, bool])

SPRIG: dict[str, Signature] = {
    "lower": (str.lower, ("str",), None),
    "upper": (str.upper, ("str",), None),
    "title": (_title, ("str",), None),
    "trim": (str.strip, ("str",), None),
    "trimAll": (lambda cut, s: s.strip(cut), ("str", "str"), None),
    "trimPrefix": (lambda prefix, s: s.removeprefix(prefix), ("str", "str"), None),
    "trimSuffix": (lambda suffix, s: s.removesuffix(suffix), ("str", "str"), None),
    "replace": (lambda old, new, s: s.replace(old, new), ("str", "str", "str"), None),
    "contains": (lambda sub, s: sub in s, ("str", "str"), None),
    "hasPrefix": (lambda prefix, s: s.startswith(prefix), ("str", "str"), None),
    "hasSuffix": (lambda suffix, s: s.endswith(suffix), ("str", "str"), None),
    "split": (lambda sep, s: _indexed(_split(sep, s)), ("str", "str"), None),
    "splitn": (lambda sep, n, s: _indexed(_split(sep, s, n)), ("str", "int", "str"), None),
    "splitList": (_split, ("str", "str"), None),
    "join": (lambda sep, items: sep.join(strslice(items)), ("str", "any"), None),
    "quote": (lambda *v: " ".join(go_quote(strval(x)) for x in v if x is not None), (), "any"),
    "squote": (lambda *v: " ".join(f"'{strval(x)}'" for x in v if x is not None), (), "any"),
    "cat": (lambda *v: " ".join(strval(x) for x in v if x is not None), (), "any"),
    "repeat": (_repeat, ("int", "str"), None),
    "substr": (_substr, ("int", "int", "str"), None),
    "trunc": (_trunc, ("int", "str"), None),
    "nospace": (lambda s: "".join(s.split()), ("str",), None),
    "indent": (lambda n, s: " " * n + s.replace("\n", "\n" + " " * n), ("int", "str"), None),
    "nindent": (lambda n, s: "\n" + " " * n + s.replace("\n", "\n" + " " * n), ("int", "str"), None),
    "toString": (strval, ("any",), None),
    "toStrings": (strslice, ("any",), None),
    "atoi": (atoi, ("str",), None),
    "int": (to_int64, ("any",), None),
    "int64": (to_int64, ("any",), None),
    "float64": (to_float64, ("any",), None),
    "add": (lambda *v: _wrap64(sum(to_int64(x) for x in v)), (), "any"),
    "add1": (lambda v: _wrap64(to_int64(v) + 1), ("any",), None),
    "sub": (lambda a, b: _wrap64(to_int64(a) - to_int64(b)), ("any", "any"), None),
    "mul": (lambda a, *v: _wrap64(_product([a, *v])), ("any",), "any"),
    "div": (lambda a, b: _div(a, b, "div"), ("any", "any"), None),
    "mod": (lambda a, b: _div(a, b, "mod"), ("any", "any"), None),
    "max": (lambda a, *v: max(to_int64(x) for x in (a, *v)), ("any",), "any"),
    "min": (lambda a, *v: min(to_int64(x) for x in (a, *v)), ("any",), "any"),
    "default": (_default, ("any",), "any"),
    "empty": (lambda v: not truth(v), ("any",), None),
    "coalesce": (lambda *v: next((x for x in v if truth(x)), None), (), "any"),
    "ternary": (lambda yes, no, condition: yes if condition else no, ("any", "any", "bool"), None),
    # metered entries (4th element True) receive the render's WorkMeter as `meter=`
    "regexMatch": (_regex_match, ("str", "str"), None, True),
    "mustRegexMatch": (_must_regex_match, ("str", "str"), None, True),
    "regexFind": (_regex_find, ("str", "str"), None, True),
    "regexFindAll": (_regex_find_all, ("str", "str", "int"), None, True),
    "regexReplaceAll": (_regex_replace, ("str",) * 3, None, True),
    "regexReplaceAllLiteral": (partial(_regex_replace, literal=True), ("str",) * 3, None, True),
    "regexSplit": (_regex_split, ("str", "str", "int"), None, True),
    "list": (lambda *v: list(v), (), "any"),
    "first": (lambda v: (_as_list(v, "first") or [None])[0], ("any",), None),
    "last": (lambda v: (_as_list(v, "last") or [None])[-1], ("any",), None),
    "rest": (lambda v: _as_list(v, "rest")[1:], ("any",), None),
    "initial": (lambda v: _as_list(v, "initial")[:-1], ("any",), None),
    "reverse": (lambda v: _as_list(v, "reverse")[::-1], ("any",), None),
    "compact": (lambda v: [x for x in _as_list(v, "compact") if truth(x)], ("any",), None),
    "sortAlpha": (lambda v: sorted(strslice(v)), ("any",), None),
    "uniq": (_uniq, ("any",), None),
    "has": (_has, ("any", "any"), None),
    "without": (lambda v, *omit: [x for x in _as_list(v, "without") if not _has(x, list(omit))], ("any",), "any"),
    "append": (lambda v, x: _as_list(v, "append") + [x], ("any", "any"), None),
    "push": (lambda v, x: _as_list(v, "push") + [x], ("any", "any"), None),
    "prepend": (lambda v, x: [x] + _as_list(v, "prepend"), ("any", "any"), None),
    "concat": (lambda *v: [x for items in v for x in _as_list(items, "concat")], (), "any"),
    "dict": (_dict, (), "any"),
    "get": (lambda d, key: d.get(key, ""), ("map", "str"), None),
    "hasKey": (lambda d, key: key in d, ("map", "str"), None),
    "keys": (_keys, ("map",), "map"),
    "values": (lambda d: [d[k] for k in sorted_keys(d)], ("map",), None),
}


def _product(values: list[object]) -> int:
    result = 1
    for value in values:
        result = _wrap64(result * to_int64(value))
    return result
