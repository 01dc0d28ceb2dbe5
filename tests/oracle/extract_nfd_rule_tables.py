#!/usr/bin/env python3
"""Refresh tests/data/nfd/nodefeaturerule_tables.json: the case tables of NFD's own unit tests
for NodeFeatureRule matching, as data our engine runs (``tests/rules/test_nfd_tables.py``).

    python tests/oracle/extract_nfd_rule_tables.py /path/to/node-feature-discovery COMMIT

(the search tool's ``fetch`` of kubernetes-sigs/node-feature-discovery gives a git directory:
``git archive HEAD | tar -x -C DIR`` and pass DIR and ``git rev-parse HEAD``)

Read from the Go source, never written here: every ``tcs := []TC{...}`` / ``tcs = []TC{...}``
table of ``pkg/apis/nfd/nodefeaturerule/expression_test.go`` and ``expression-api_test.go``,
parsed as Go composite literals, and turned into one shape: a feature (which of NFD's three
sets hold it -- ``flags``, ``attributes``, ``instances``, ``null`` when absent, as a nil Go map),
a ``matchExpressions`` set and/or a ``matchName``, and NFD's expected answer (``matched``,
``error``, the matched elements templates see). Each case says which NFD function it tested.
``rule_test.go`` is not a table (it mutates one feature set between ``Execute`` calls); its
steps are transcribed by hand in ``tests/data/nfd/rule_test_steps.yaml``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "nfd" / "nodefeaturerule_tables.json"
FILES = ("expression_test.go", "expression-api_test.go")
TOKEN = re.compile(r'\s+|//[^\n]*|(?P<str>"(?:[^"\\\n]|\\.)*")|(?P<raw>`[^`]*`)'
                   r"|(?P<num>-?[0-9]+)|(?P<ident>[A-Za-z_][\w.]*)|(?P<punct>\[\]|[{}:,&*\[\]])")
FUNC = re.compile(r"^func (Test\w+)\(", re.MULTILINE)
TABLE = re.compile(r"\btcs\s*:?=\s*\[\]TC\{")


class Lit:
    """A Go composite literal: its type (``""`` when elided) and ``(key, value)`` items."""

    def __init__(self, type_name: str, items: list[tuple[Any, Any]]) -> None:
        self.type_name = type_name
        self.items = items

    def fields(self) -> dict[str, Any]:
        return dict(self.items)


class Ident(str):
    """A Go identifier (``nfdv1alpha1.MatchIn``, ``assert.True``, ``nil``)."""


class Reader:
    """Go tokens read on demand from ``text`` (a table ends long before the file does)."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0
        self.next: tuple[str, str] | None = None

    def peek(self) -> tuple[str, str]:
        while self.next is None:
            m = TOKEN.match(self.text, self.pos)
            if m is None:
                raise ValueError(f"cannot tokenise {self.text[self.pos:self.pos + 40]!r}")
            self.pos = m.end()
            if m.lastgroup:
                self.next = (m.lastgroup, m.group(m.lastgroup))
        return self.next

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if value is not None and tok[1] != value:
            raise ValueError(f"expected {value!r}, got {tok!r}")
        self.next = None
        return tok

    def value(self) -> Any:
        kind, text = self.peek()
        if text == "&":
            self.take()
            return self.value()
        if text == "{":
            return self.literal("")
        if kind == "str":
            self.take()
            return json.loads(text)
        if kind == "raw":
            self.take()
            return text[1:-1]
        if kind == "num":
            self.take()
            return int(text)
        type_name = ""
        while self.peek()[1] in ("[]", "*") or self.peek()[0] == "ident":
            type_name += self.take()[1]
            if self.peek()[1] == "{" or (self.peek()[0] != "ident" and self.peek()[1] not in ("[]", "*")):
                break
        if self.peek()[1] == "{":
            return self.literal(type_name)
        if self.peek()[1] == "(":
            raise ValueError(f"function call {type_name} not supported")
        return Ident(type_name)

    def literal(self, type_name: str) -> Lit:
        self.take("{")
        items: list[tuple[Any, Any]] = []
        while self.peek()[1] != "}":
            first = self.value()
            key = None
            if self.peek()[1] == ":":
                self.take()
                key, first = first, self.value()
            items.append((key, first))
            if self.peek()[1] == ",":
                self.take()
        self.take("}")
        return Lit(type_name, items)


def tables(text: str) -> list[tuple[str, list[Lit]]]:
    """``(test function, [case literal])`` for every ``tcs`` table, in file order."""
    starts = [(m.start(), m.group(1)) for m in FUNC.finditer(text)]
    out = []
    for m in TABLE.finditer(text):
        func = [name for pos, name in starts if pos < m.start()][-1]
        reader = Reader(text[m.end() - 1:])
        out.append((func, [v for _, v in reader.literal("[]TC").items]))
    return out


def _op(ident: Any) -> str:
    return {"nfdv1alpha1.MatchAny": ""}.get(str(ident), str(ident).removeprefix("nfdv1alpha1.Match"))


def _expression(lit: Lit) -> dict[str, Any]:
    f = lit.fields()
    out: dict[str, Any] = {"op": _op(f["Op"])}
    if "Value" in f:
        out["value"] = [v for _, v in f["Value"].items]
    return out


def _strings(lit: Any) -> Any:
    """A map/slice literal as JSON; ``nil`` (or an absent field) stays ``None``."""
    if lit is None or lit == Ident("nil"):
        return None
    if not isinstance(lit, Lit):
        return lit
    if lit.items and lit.items[0][0] is not None and not isinstance(lit.items[0][0], Ident):
        return {k: _strings(v) for k, v in lit.items}
    if lit.items and isinstance(lit.items[0][0], Ident):  # InstanceFeature{Attributes: ...}
        return _strings(lit.fields()["Attributes"])
    return [_strings(v) for _, v in lit.items] if lit.items or lit.type_name.startswith(("O", "[]", "II")) else {}


def _feature(kind: str, value: Any) -> dict[str, Any]:
    """NFD input -> our case feature; ``value`` None is a nil map (the set does not exist)."""
    if kind == "flags":
        return {"flags": None if value is None else sorted(value)}
    if kind == "attributes":
        return {"attributes": value}
    return {"instances": value}


def _truth(ident: Any) -> bool:
    return {"assert.True": True, "assert.False": False, "true": True, "false": False}[str(ident)]


def _error(f: dict[str, Any]) -> bool:
    if "expectErr" in f:
        return _truth(f["expectErr"])
    return str(f.get("err", "assert.Nil")) == "assert.NotNil"


def _elements(f: dict[str, Any]) -> Any:
    out = _strings(f.get("output"))
    return out if out is not None else []


def _mes_yaml(text: str | None) -> dict[str, Any]:
    return yaml.safe_load(text or "") or {}


def _single_value(f: dict[str, Any]) -> dict[str, Any]:
    """``evaluateMatchExpression(me, valid, value)``: one key, present (with a value, or a
    flag when the value is nil) or absent. Go formats the value with ``%v``."""
    value, valid = f.get("input"), _truth(f.get("valid", Ident("false")))
    if not valid:
        return {"attributes": {}}
    if value is None or value == Ident("nil"):
        return {"flags": ["key"]}
    text = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
    if isinstance(value, Ident):
        text = str(value)
    return {"attributes": {"key": str(text)}}


def _case(test: str, f: dict[str, Any], errors_table: bool) -> dict[str, Any]:
    case: dict[str, Any] = {"test": test, "name": f["name"]}
    if test == "TestEvaluateMatchExpression":
        values = [v for _, v in f["values"].items] if "values" in f else []
        case["feature"] = _single_value(f) if not errors_table else _single_value({**f, "valid": Ident("true")})
        case["matchExpressions"] = {"key": {"op": _op(f["op"]), "value": values}}
        case["expect"] = {"matched": False if errors_table else _truth(f["result"]), "error": errors_table}
        return case
    if test in ("TestEvaluateMatchExpressionKeys", "TestEvaluateMatchExpressionValues"):
        kind = "flags" if test.endswith("Keys") else "attributes"
        values = [v for _, v in f["values"].items] if "values" in f else []
        expr: dict[str, Any] = {"op": _op(f["op"]), "value": values}
        if f.get("valueType"):
            expr["type"] = f["valueType"]
        case["feature"] = _feature(kind, _strings(f.get("input")) if kind == "attributes" else list((_strings(f.get("input")) or {}).keys()))
        if kind == "attributes" and case["feature"]["attributes"] is None:
            case["feature"]["attributes"] = {}
        case["matchExpressions"] = {f.get("key", ""): expr}
        case["expect"] = {"matched": _truth(f["result"]), "error": _error(f)}
        return case
    if test in ("TestMatchKeys", "TestMatchValues", "TestMatchInstances"):
        kind = {"TestMatchKeys": "flags", "TestMatchValues": "attributes", "TestMatchInstances": "instances"}[test]
        raw = _strings(f.get("input"))
        feature = list((raw or {}).keys()) if kind == "flags" else raw
        if feature is None:
            feature = [] if kind != "attributes" else {}
        case["feature"] = _feature(kind, feature)
        case["matchExpressions"] = _mes_yaml(f.get("mes"))
    elif test in ("TestMatchKeyNames", "TestMatchValueNames", "TestMatchInstanceAttributeNames"):
        kind = {"TestMatchKeyNames": "flags", "TestMatchValueNames": "attributes"}.get(test, "instances")
        raw = _strings(f.get("input"))
        case["feature"] = _feature(kind, list(raw) if kind == "flags" else raw)
        case["matchName"] = _expression(f["me"])
    else:  # TestMatchMulti, TestMatchNamesMulti
        keys = _strings(f.get("inputKeys"))
        case["feature"] = {
            "flags": None if keys is None else sorted(keys),
            "attributes": _strings(f.get("inputValues")),
            "instances": _strings(f.get("inputInstances")),
        }
        if test == "TestMatchMulti":
            case["matchExpressions"] = {k: _expression(v) for k, v in f["mes"].items}
        else:
            case["matchName"] = _expression(f["me"])
    result = f.get("result")
    case["expect"] = {"matched": _truth(result) if result is not None else False, "error": _error(f),
                      "elements": _elements(f)}
    return case


def extract(root: Path) -> list[dict[str, Any]]:
    cases = []
    for name in FILES:
        text = (root / "pkg/apis/nfd/nodefeaturerule" / name).read_text()
        seen: dict[str, int] = {}
        for test, lits in tables(text):
            seen[test] = seen.get(test, 0) + 1
            errors_table = test == "TestEvaluateMatchExpression" and seen[test] == 2
            for lit in lits:
                case = _case(test, lit.fields(), errors_table)
                case["file"] = name
                cases.append(case)
    return cases


def main() -> None:
    root, commit = Path(sys.argv[1]), sys.argv[2]
    cases = extract(root)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({
        "source": f"kubernetes-sigs/node-feature-discovery {commit}, pkg/apis/nfd/nodefeaturerule/"
                  + " and ".join(FILES) + " (Apache-2.0), extracted by tests/oracle/extract_nfd_rule_tables.py",
        "commit": commit,
        "cases": cases,
    }, indent=1, sort_keys=False) + "\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
