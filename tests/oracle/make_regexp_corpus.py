#!/usr/bin/env python3
"""Refresh tests/data/go_regexp_corpus.json: what real Go's regexp does for ~600 patterns.

    apt-get install -t bookworm-backports golang-1.23-go     # or any Go >= 1.22 on PATH
    python tests/oracle/make_regexp_corpus.py [--go /usr/lib/go-1.23/bin/go]

The cases are written here (hand-picked syntax and error cases, plus seeded random patterns
over a small alphabet, where leftmost-first matching, empty matches and repetition bite);
the *expected values* all come from Go (tests/oracle/goregexp.go), never from our code.
CI does not need Go: it reads the committed JSON (tests/rules/test_go_regexp_corpus.py).
The Go version that recorded the file is stored in it.
"""

from __future__ import annotations

import argparse
import random
import shutil
from pathlib import Path

from go_run import record  # tests/oracle/go_run.py, beside this script

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "data" / "go_regexp_corpus.json"

INPUTS = ["", "a", "abc", "aaa", "Hello World", "a\nb\n", "x1y22z333", "ünïcödé ΑΒΓ δ", "foo.bar-baz_qux",
          "\t tab\r\n", "aAbB", "$1 ${x}", "abab abab", "K\u212a", "[x]"]
REPLS = ["<$0>", "[$1]", "${1}x", "$1x", "$$", "${name}", "$", "${", "$10", "-", "$name!", "${1"]

HAND = [
    # literals, classes, escapes
    "a", "abc", ".", "a.c", "(?s)a.b", "[abc]", "[^abc]", "[a-z]+", "[]a]", "[^]a]", "[a-]", "[-a]", r"[\]]",
    r"[\d]", r"\d+", r"\D", r"\w+", r"\W", r"\s", r"\S+", r"[\s\S]", r"\b", r"\B", r"\bfoo\b", r"\Bo\B",
    "[[:alpha:]]+", "[[:^alpha:]]+", "[[:digit:][:upper:]]", "[[:word:]]+", "[[:space:]]", "[[:punct:]]",
    "[[:^digit:]]", "[[:xdigit:]]+", "[[:ascii:]]+", "[[:blank:]]", "[[:cntrl:]]", "[[:graph:]]+",
    "[[:print:]]+", "[[:lower:]]", "[[:alnum:]]+", r"\x41", r"\x{263a}", r"\x{41}", r"\101", r"\0",
    r"\t", r"\n", r"\f", r"\r", r"\v", r"\a", r"\.", r"\$", r"\Q.*\E", r"\Qa.b", r"a\Q\E*",
    r"\pL+", r"\p{L}", r"\PL+", r"\p{Greek}+", r"\p{^Greek}", r"\P{^Greek}", r"\p{Latin}", r"\pN", r"\p{Lu}",
    r"[\p{Lu}\d]+", r"[^\pL]",
    # anchors and flags
    "^a", "a$", "^$", "^", "$", r"\Aa", r"a\z", "(?m)^a", "(?m)b$", "(?m)^$", "(?i)abc", "(?i)k", "(?i)[k]",
    "(?i:a)b", "a(?i)b", "(?U)a+", "(?U)a+?", "(?U:a*)a", "(?ims)a.", "(?-i)a", "(?i-s:a.)",
    # groups and alternation
    "(a)", "(a)(b)?", "(a|ab)(c|bcd)", "(?:a|b)+", "(?P<name>a+)", "(?<name>a+)b", "(?P<first>a)(?P<second>b)",
    "a|b|", "|a", "(|a)+", "(a*)+", "(a*)*", "(a|b)*c", "((a)|b)+", "(a)|(b)", "x*", "(x*)(x*)", "a*?", "a+?",
    "a??", "a{2}", "a{2,}", "a{2,3}", "a{,3}", "a{2,3}?", "a{0}", "(ab){1,2}", "a{1000}", "(?:a{10}){10}",
    "[a-c]{2}b", ".*", ".+", "(?s).*", "\\.*", "()", "(?:)", "(a)(?:b)(c)",
    # errors
    "(", ")", "a)", "(a", "[a", "[z-a]", "a**", "a*+", "a++", "*a", "+", "?", "a{1001}", "a{2}{3}", r"\8",
    r"\1", r"(a)\1", r"\C", r"\Z", r"\G", r"\e", r"\cA", "(?=a)", "(?!a)", "(?<=a)", "(?<!a)", "(?#c)",
    "(?P=name)", "(?P<n>a)(?P<n>b)", "(?P<>a)", "(?P<1a>x)", "(?<n", "(?i", "(?z)", "[[:foo:]]", r"\p{Foo}",
    "\\", "x{2,1}", "(?:a{1000}){1000}", "((((((((((((((((((((a))))))))))))))))))))", r"[a-\d]", r"\x{110000}",
    r"\xZZ", "[a-b-c]", r"\pZ", "(?i)[^k]",
]


def random_pattern(rng: random.Random, depth: int = 0) -> str:
    atoms = ["a", "b", ".", "[ab]", "[^a]", "^", "$", r"\b", "()", "(a|b)", "(?:ab)", "a?", "b*"]
    out = []
    for _ in range(rng.randint(1, 4)):
        roll = rng.random()
        if roll < 0.2 and depth < 2:
            inner = random_pattern(rng, depth + 1)
            atom = rng.choice([f"({inner})", f"(?:{inner})", f"({inner}|{random_pattern(rng, depth + 1)})"])
        else:
            atom = rng.choice(atoms)
        if rng.random() < 0.35 and atom not in ("^", "$", r"\b", "a?", "b*"):
            atom += rng.choice(["*", "+", "?", "*?", "+?", "??", "{2}", "{1,2}", "{0,1}?"])
        out.append(atom)
    return "".join(out)


def cases() -> list[dict]:
    rng = random.Random(20261124)
    out = []
    for index, pattern in enumerate(HAND):
        out.append({"pattern": pattern, "inputs": INPUTS, "repl": REPLS[index % len(REPLS)]})
    for index in range(450):
        inputs = sorted({"".join(rng.choice("ab ") for _ in range(rng.randint(0, 6))) for _ in range(8)})
        out.append({"pattern": random_pattern(rng), "inputs": inputs, "repl": REPLS[index % len(REPLS)]})
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--go", default=shutil.which("go") or "/usr/lib/go-1.23/bin/go")
    args = parser.parse_args()
    results = record(args.go, HERE / "goregexp.go", cases(), OUT, "tests/oracle/make_regexp_corpus.py")
    compiled = sum(1 for r in results if not r.get("error"))
    print(f"{len(results)} patterns ({compiled} compile, {len(results) - compiled} errors), "
          f"{sum(len(r['outcomes']) for r in results)} pattern/input outcomes -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
