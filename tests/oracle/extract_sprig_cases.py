#!/usr/bin/env python3
"""Refresh tests/data/sprig_cases.json: the template/expected-output cases of Sprig's own test
files (Masterminds/sprig ``*_test.go``), for the functions our template engine supports.

    python tests/oracle/extract_sprig_cases.py /path/to/Masterminds/sprig [commit]

(the search tool's ``fetch`` of Masterminds/sprig gives a git directory: ``git archive HEAD``
it into a folder and pass that folder and ``git rev-parse HEAD``)

Read from the Go source, never written here: every ``runt(<template>, <expected>)`` (with the
template given inline or as the last ``tpl :=``/``tpl =`` literal before it) and every entry of a
``map[string]string{<template>: <expected>}`` table that its test loop feeds to
``runt(tpl, expect)``. ``runtv`` cases (which need Go data values) and cases asserting an error
are not taken. A case is kept when each function its template calls is one our engine has
(``agent.gotemplate.funcs.FUNCTIONS``); the file records what was left out and why, by count.
Sprig tests run Go's template with Sprig's ``TxtFuncMap``; the expected strings are Sprig's.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "sprig_cases.json"
sys.path.insert(0, str(HERE.parents[1]))

LIT = r'(`[^`]*`|"(?:[^"\\\n]|\\.)*")'
RUNT_INLINE = re.compile(r"runt\(\s*" + LIT + r"\s*,\s*" + LIT + r"\s*\)")
TPL_ASSIGN = re.compile(r"\btpl\s*:?=\s*" + LIT)
RUNT_TPL = re.compile(r"runt\(\s*tpl\s*,\s*" + LIT + r"\s*\)")
MAP_START = re.compile(r"map\[string\]string\{")
MAP_ENTRY = re.compile(r"\s*" + LIT + r"\s*:\s*" + LIT + r"\s*,?")
FUNC_START = re.compile(r"^func (Test\w+)\(", re.M)
IDENT = re.compile(r"(?<![.$\w])([A-Za-z_]\w*)")
KEYWORDS = {"if", "else", "end", "range", "with", "define", "template", "block", "nil", "true", "false", "break",
            "continue"}


def go_string(literal: str) -> str:
    if literal.startswith("`"):
        return literal[1:-1]
    return ast.literal_eval(literal)  # Go and Python share these escapes (\n \t \" \\ \x \u)


def functions_called(template: str) -> set[str]:
    names = set()
    for action in re.findall(r"\{\{(.*?)\}\}", template, re.S):
        action = re.sub(r'"(?:[^"\\]|\\.)*"|`[^`]*`', " ", action)  # strings are not names
        names |= {m for m in IDENT.findall(action) if m not in KEYWORDS}
    return names


def cases_of(name: str, source: str) -> list[dict]:
    out = []
    starts = [(m.start(), m.group(1)) for m in FUNC_START.finditer(source)] + [(len(source), "")]
    for (begin, test), (end, _next) in itertools.pairwise(starts):
        body = source[begin:end]
        for m in RUNT_INLINE.finditer(body):
            out.append({"file": name, "test": test, "template": go_string(m.group(1)), "expected": go_string(m.group(2))})
        for m in RUNT_TPL.finditer(body):
            assigns = [a for a in TPL_ASSIGN.finditer(body) if a.end() <= m.start()]
            if assigns:
                out.append({"file": name, "test": test, "template": go_string(assigns[-1].group(1)),
                            "expected": go_string(m.group(1))})
        if "runt(tpl, expect)" in body:
            for start in MAP_START.finditer(body):
                pos = start.end()
                while (entry := MAP_ENTRY.match(body, pos)) is not None:
                    out.append({"file": name, "test": test, "template": go_string(entry.group(1)),
                                "expected": go_string(entry.group(2))})
                    pos = entry.end()
    return out


def main() -> None:
    from agent.gotemplate.funcs import FUNCTIONS

    repo = Path(sys.argv[1])
    commit = sys.argv[2] if len(sys.argv) > 2 else subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    found = []
    for path in sorted(repo.glob("*_test.go")):
        found += cases_of(path.name, path.read_text())
    kept, missing = [], Counter()
    for case in found:
        unknown = sorted(functions_called(case["template"]) - set(FUNCTIONS))
        if unknown:
            missing.update(unknown)
        else:
            kept.append(case)
    OUT.write_text(json.dumps({
        "source": f"Masterminds/sprig at commit {commit or 'unknown'} (MIT), *_test.go: runt() cases and "
                  "map[string]string tables fed to runt(tpl, expect); extracted by tests/oracle/extract_sprig_cases.py",
        "extracted": len(found), "kept": len(kept),
        "left_out_for_functions_the_engine_lacks": dict(sorted(missing.items())),
        "cases": kept}, indent=1, ensure_ascii=False) + "\n")
    print(f"{len(found)} cases found, {len(kept)} kept -> {OUT}")


if __name__ == "__main__":
    main()
