"""The type and lint gates: `mypy` (strict for agent/ and tests/support/) and `ruff check` (the
whole repository), both configured in pyproject.toml, report nothing, and `lizard` finds no
function in the package over cyclomatic complexity 15 (lizard counts each `and`/`or`, which
ruff's C901 does not), `vulture` finds no unused name in the package, and no comment in the package or the tests points
at an issue number in place of the reason. Each gate is also shown to fail on a planted error, so a configuration that checks nothing cannot pass for a clean one."""

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
_WARNING = re.compile(r"^(?P<path>[^:]+):\d+: warning: (?P<name>\S+) has .*? (?P<ccn>\d+) CCN,", re.MULTILINE)


def test_no_function_in_the_package_is_over_complexity_15() -> None:
    done = run("lizard", "--CCN", str(COMPLEXITY_BOUND), "--warnings_only", "-x", GENERATED, "agent")
    assert done.returncode in (0, 1) and not done.stderr.strip(), done.stderr[-2000:]
    over = {(m["path"], m["name"]): int(m["ccn"]) for m in _WARNING.finditer(done.stdout)}
    assert len(over) == len(done.stdout.strip().splitlines()), f"unparsed lizard output: {done.stdout}"
    found = {f"{path} {name}: {ccn}" for (path, name), ccn in over.items()}
    assert not found, f"over cyclomatic complexity {COMPLEXITY_BOUND}: {sorted(found)}"


def test_lizard_reports_a_function_over_the_bound(tmp_path) -> None:
    conditions = "\n".join(f"    if value == {i} or value == -{i}:\n        return {i}" for i in range(8))
    planted = tmp_path / "planted.py"
    planted.write_text(f"def branchy(value):\n{conditions}\n    return 0\n")
    done = run("lizard", "--CCN", str(COMPLEXITY_BOUND), "--warnings_only", str(planted))
    assert done.returncode == 1 and "branchy has" in done.stdout and "17 CCN" in done.stdout, done.stdout + done.stderr


# A name the package defines and nothing uses. A use in the tests, the benchmarks or the deploy
# scripts counts (vulture matches names, not objects), so what it reports is unused everywhere.
DEAD_CODE_SCOPE = ("agent", "tests", "bench", "deploy")
# Names called by a framework, never by our code: each with who reads it.
CALLED_BY_A_FRAMEWORK = {
    ("agent/deviceplugin/server.py", "PreStartContainer"): "the kubelet, over gRPC (DevicePlugin service)",
    ("agent/gotemplate/regexp.py", "log_errors"): "re2.Options",
    ("agent/gotemplate/regexp.py", "max_mem"): "re2.Options",
    ("agent/placement/webhook.py", "protocol_version"): "http.server.BaseHTTPRequestHandler",
    ("agent/placement/webhook.py", "disable_nagle_algorithm"): "socketserver.StreamRequestHandler",
    ("agent/placement/webhook.py", "log_message"): "http.server.BaseHTTPRequestHandler",
    ("agent/placement/webhook.py", "do_POST"): "http.server.BaseHTTPRequestHandler",
    ("agent/placement/webhook.py", "daemon_threads"): "socketserver.ThreadingMixIn",
    ("agent/placement/webhook.py", "handle_error"): "socketserver.BaseServer",
    ("agent/snapshot.py", "gname"): "tarfile.TarInfo",
}
_UNUSED = re.compile(r"^(?P<path>[^:]+):\d+: unused \w+ '(?P<name>[^']+)' \(\d+% confidence\)$")


def unused_names(*paths: str) -> set[tuple[str, str]]:
    done = run("vulture", "--min-confidence", "60", "--exclude", "agent/deviceplugin/v1beta1,agent/dra/api",
               *paths)
    assert done.returncode in (0, 3) and not done.stderr.strip(), done.stdout[-3000:] + done.stderr[-2000:]
    matches = [_UNUSED.match(line) for line in done.stdout.splitlines()]
    assert all(matches), f"unparsed vulture output: {done.stdout}"
    return {(m["path"], m["name"]) for m in matches if m}


def test_no_name_in_the_package_is_unused() -> None:
    found = {(path, name) for path, name in unused_names(*DEAD_CODE_SCOPE) if path.startswith("agent/")}
    assert not found - set(CALLED_BY_A_FRAMEWORK), sorted(found - set(CALLED_BY_A_FRAMEWORK))
    stale = set(CALLED_BY_A_FRAMEWORK) - found
    assert not stale, f"reported no more, remove from CALLED_BY_A_FRAMEWORK: {sorted(stale)}"


def test_vulture_reports_an_unused_function(tmp_path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text("def used():\n    return 1\n\n\ndef forgotten():\n    return 2\n\n\nused()\n")
    assert unused_names(str(planted)) == {(str(planted), "forgotten")}


# A reference to an issue sends the reader to the tracker; the comment states the reason itself.
_ISSUE_REFERENCE = re.compile(r"\bissues? #?\d", re.IGNORECASE)


def issue_references(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if _ISSUE_REFERENCE.search(line)]


def test_no_comment_names_an_issue_instead_of_its_reason() -> None:
    found = [f"{path.relative_to(REPO)}:{n}" for top in ("agent", "tests") for path in sorted((REPO / top).rglob("*.py"))
             for n in issue_references(path.read_text(encoding="utf-8", errors="replace"))]
    assert not found, found


def test_an_issue_reference_is_found() -> None:
    planted = '"""Backoff (issue ' + '15)."""\n# see Issue #' + '7\nx = 1  # a tissue 5 mm thick\n'
    assert issue_references(planted) == [1, 2]
