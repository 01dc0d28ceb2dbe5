"""The type and lint gates: `mypy` (strict for agent/ and tests/support/) and `ruff check` (the
whole repository), both configured in pyproject.toml, report nothing, and `lizard` finds no
function in the package over cyclomatic complexity 15 (lizard counts each `and`/`or`, which
ruff's C901 does not). Each gate is also shown to fail on a planted error, so a configuration that checks nothing cannot pass for a clean one."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, input=stdin, capture_output=True, text=True,
                          timeout=600)


def test_mypy_finds_no_error_in_the_package() -> None:
    done = run("mypy")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_mypy_is_strict_on_the_package(tmp_path) -> None:
    planted = tmp_path / "main.py"
    planted.write_text('"""planted"""\n\n\ndef untyped(value):\n    return value\n\n\nwrong: int = "text"\n')
    done = run("mypy", "--shadow-file", str(REPO / "agent" / "__main__.py"), str(planted))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "agent/__main__.py:4: error: Function is missing a type annotation  [no-untyped-def]" in done.stdout
    assert "agent/__main__.py:8: error: Incompatible types in assignment" in done.stdout


def test_ruff_finds_nothing_in_the_repository() -> None:
    done = run("ruff", "check", "--no-cache")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def test_ruff_checks_the_package() -> None:
    done = run("ruff", "check", "--no-cache", "--output-format", "concise", "--stdin-filename", "agent/planted.py",
               "-", stdin="import os\n\n\ndef f(items=[]):\n    return items\n")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "agent/planted.py:1:8: F401" in done.stdout
    assert "agent/planted.py:4:13: B006" in done.stdout


COMPLEXITY_BOUND = 15
GENERATED = "agent/deviceplugin/v1beta1/*"  # grpcio-tools' output (regenerate.py): not ours to shape
# Functions still over the bound, each to be split; an entry whose function is back under the
# bound fails the test below until it is removed, so this list only shrinks.
OVER_THE_BOUND = frozenset({
    ("agent/rules/expressions.py", "check_expression"),
    ("agent/rules/matcher.py", "_flat"),
})
_WARNING = re.compile(r"^(?P<path>[^:]+):\d+: warning: (?P<name>\S+) has .*? (?P<ccn>\d+) CCN,", re.MULTILINE)


def test_no_function_in_the_package_is_over_complexity_15() -> None:
    done = run("lizard", "--CCN", str(COMPLEXITY_BOUND), "--warnings_only", "-x", GENERATED, "agent")
    assert done.returncode in (0, 1) and not done.stderr.strip(), done.stderr[-2000:]
    over = {(m["path"], m["name"]): int(m["ccn"]) for m in _WARNING.finditer(done.stdout)}
    assert len(over) == len(done.stdout.strip().splitlines()), f"unparsed lizard output: {done.stdout}"
    new = {f"{path} {name}: {ccn}" for (path, name), ccn in over.items() if (path, name) not in OVER_THE_BOUND}
    assert not new, f"over cyclomatic complexity {COMPLEXITY_BOUND}: {sorted(new)}"
    fixed = OVER_THE_BOUND - set(over)
    assert not fixed, f"back under the bound, remove from OVER_THE_BOUND: {sorted(fixed)}"


def test_lizard_reports_a_function_over_the_bound(tmp_path) -> None:
    conditions = "\n".join(f"    if value == {i} or value == -{i}:\n        return {i}" for i in range(8))
    planted = tmp_path / "planted.py"
    planted.write_text(f"def branchy(value):\n{conditions}\n    return 0\n")
    done = run("lizard", "--CCN", str(COMPLEXITY_BOUND), "--warnings_only", str(planted))
    assert done.returncode == 1 and "branchy has" in done.stdout and "17 CCN" in done.stdout, done.stdout + done.stderr
