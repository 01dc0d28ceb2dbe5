#!/usr/bin/env python3
"""Refresh tests/data/go_template_corpus.json: what real Go's text/template does for ~250 cases.

    apt-get install -t bookworm-backports golang-1.23-go     # or any Go >= 1.22
    python tests/oracle/make_template_corpus.py [--go /usr/lib/go-1.23/bin/go]

The templates and data are written here (every construct and builtin function the engine
supports, whitespace trimming, range/with/else, errors); the expected output or error comes
from Go (tests/oracle/gotemplate.go), never from our code. CI does not need Go.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from go_run import record  # tests/oracle/go_run.py, beside this script

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "go_template_corpus.json"

DATA = [
    {"a": "x", "n": 3, "f": 1.5, "t": True, "e": "", "z": 0, "l": ["p", "q", "r"], "m": {"k1": "v1", "k2": "v2"},
     "nested": {"inner": {"deep": "d"}}, "nums": [3, 1, 2], "empty": [], "none": None},
    {"a": "", "n": -1, "f": 0.0, "t": False, "e": "e", "z": 7, "l": [], "m": {}, "nested": {"inner": {}},
     "nums": [], "empty": [1], "none": None},
    {"pci": {"device": [{"vendor": "10de", "class": "0300"}, {"vendor": "8086", "class": "0200"}]},
     "cpu": {"cpuid": [{"Name": "AVX"}, {"Name": "SSE4"}]}, "a": "x", "l": ["p"], "m": {"k": "v"}, "n": 1},
]

# Left out on purpose: range over an integer ({{range 3}}) is Go >= 1.24 (release notes:
# "text/template: ... range-over-int"), newer than the Go recorded here (Debian backports: 1.23);
# index of a missing map key and %T of a number depend on Go's static types (map[string]string
# gives "", map[string]interface{} gives <no value>; int vs int64), which JSON data cannot carry.
TEMPLATES = [
    # text, actions, trimming, comments
    "plain text", "{{.a}}", "{{ .a }}", "a {{- .a -}} b", "a  {{- .a}}  b", "a {{.a -}}\n\n b", "{{/* c */}}x",
    "{{- /* c */ -}} x", "{{.a}}{{.a}}", "{{`raw`}}", "{{\"q\\tq\"}}", "{{'a'}}", "{{1}}", "{{-1}}", "{{1.5}}",
    "{{1e3}}", "{{0x10}}", "{{true}}", "{{nil}}", "{{.none}}", "{{.}}", "{{.nested.inner.deep}}",
    "{{.missing}}", "{{.nested.missing}}", "{{.a.b}}", "{{.m.k1}}", "{{.m}}", "{{.l}}", "{{.nums}}", "{{.f}}",
    "{{.n}}", "{{.t}}", "{{.z}}", "{{.empty}}",
    # variables and pipelines
    "{{$x := .a}}{{$x}}", "{{$x := 1}}{{$x = 2}}{{$x}}", "{{$}}", "{{$.a}}", "{{.a | print}}",
    "{{.a | printf \"%s-%s\" .a}}", "{{(print .a) | len}}", "{{$x := .l}}{{range $x}}{{.}}{{end}}", "{{$y}}",
    # if / else if / else
    "{{if .t}}T{{end}}", "{{if .t}}T{{else}}F{{end}}", "{{if .e}}E{{else if .t}}T{{else}}N{{end}}",
    "{{if .l}}L{{end}}", "{{if .m}}M{{end}}", "{{if .z}}Z{{end}}", "{{if .none}}N{{else}}-{{end}}",
    "{{if .a}}{{.a}}{{end}}", "{{if and .t .a}}both{{end}}", "{{if or .e .a}}one{{end}}", "{{if not .t}}not{{end}}",
    # range
    "{{range .l}}[{{.}}]{{end}}", "{{range .l}}{{.}}{{else}}none{{end}}", "{{range $i, $e := .l}}{{$i}}={{$e}};{{end}}",
    "{{range $k, $v := .m}}{{$k}}={{$v}};{{end}}", "{{range .m}}{{.}}{{end}}", "{{range .nums}}{{.}}{{end}}",
    "{{range .l}}{{if eq . \"q\"}}{{break}}{{end}}{{.}}{{end}}",
    "{{range .l}}{{if eq . \"q\"}}{{continue}}{{end}}{{.}}{{end}}", "{{range .empty}}x{{else}}empty{{end}}",
    "{{range .pci.device}}{{.vendor}}:{{.class}} {{end}}", "{{range .cpu.cpuid}}{{.Name}},{{end}}",
    "{{range $d := .pci.device}}{{if eq $d.vendor \"10de\"}}nvidia{{end}}{{end}}", "{{range .a}}{{end}}",
    # with
    "{{with .a}}[{{.}}]{{end}}", "{{with .a}}[{{.}}]{{else}}none{{end}}", "{{with .nested.inner}}{{.deep}}{{end}}",
    "{{with $x := .a}}{{$x}}{{end}}", "{{with .e}}E{{else with .a}}A{{end}}",
    # builtins
    "{{len .l}}", "{{len .m}}", "{{len .a}}", "{{len .n}}", "{{index .l 1}}", "{{index .l 5}}", "{{if .m}}{{index .m \"k1\"}}{{end}}", "{{slice .a 0}}", "{{slice .l 1 2}}",
    "{{slice .l 1}}", "{{slice .l 2 1}}", "{{print .a .n}}", "{{print 1 2}}", "{{print \"a\" \"b\"}}", "{{print .a 1 \"b\"}}",
    "{{println .a .n}}", "{{printf \"%d\" .n}}", "{{printf \"%5d|%-5d|%05d\" .n .n .n}}", "{{printf \"%s\" .l}}",
    "{{printf \"%v\" .m}}", "{{printf \"%q\" .a}}", "{{printf \"%x\" .n}}", "{{printf \"%X\" 255}}", "{{printf \"%o\" 8}}",
    "{{printf \"%b\" 5}}", "{{printf \"%t\" .t}}", "{{printf \"%.2f\" .f}}", "{{printf \"%e\" .f}}", "{{printf \"%g\" .f}}",
    "{{printf \"%T\" .a}}", "{{printf \"%d\" .a}}", "{{printf \"%s\"}}", "{{printf \"%d %d\" 1}}",
    "{{printf \"%%\"}}", "{{printf \"%c\" 65}}", "{{printf \"%U\" 65}}", "{{printf \"%v\" .none}}", "{{printf \"%+d\" .n}}",
    "{{printf \"%8.3f|\" .f}}", "{{printf \"%-8s|\" .a}}", "{{printf \"%x\" .a}}", "{{printf \"%q\" .l}}",
    "{{eq .a \"x\"}}", "{{eq .n 3}}", "{{eq .a \"y\" \"x\"}}", "{{eq .n 1 2 3}}", "{{eq .a 1}}", "{{ne .a \"x\"}}",
    "{{lt 1 2}}", "{{lt .n 5}}", "{{le 2 2}}", "{{gt \"b\" \"a\"}}", "{{ge .f 1.5}}", "{{lt 1 1.5}}", "{{lt .a 1}}",
    "{{eq .t true}}", "{{eq .none nil}}", "{{and 1 0 2}}", "{{and 1 2}}", "{{or 0 \"\" .a}}", "{{or 0 \"\"}}",
    "{{not 0}}", "{{not .a}}", "{{and}}", "{{not 1 2}}", "{{html \"<a&b>\"}}", "{{js \"a'b\"}}",
    "{{urlquery \"a b&c\"}}", "{{len}}", "{{index}}",
    # errors
    "{{", "{{.a", "{{end}}", "{{if .t}}", "{{range}}{{end}}", "{{nosuchfunc 1}}", "{{.a 1}}", "{{1 2}}",
    "{{$x}}", "{{else}}", "{{with}}{{end}}", "{{break}}", "{{ .a | }}", "{{(1}}", "{{.l.x}}", "{{index 1 1}}",
]


def cases() -> list[dict]:
    out = []
    for template in TEMPLATES:
        for index, data in enumerate(DATA):
            if index and ("pci" in template or "cpu" in template) != (index == 2):
                continue
            out.append({"template": template, "data": data})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--go", default=shutil.which("go") or "/usr/lib/go-1.23/bin/go")
    args = parser.parse_args()
    results = record(args.go, HERE / "gotemplate.go", cases(), OUT, "tests/oracle/make_template_corpus.py")
    errors = sum(1 for r in results if "error" in r)
    print(f"{len(results)} template cases ({errors} errors) -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
