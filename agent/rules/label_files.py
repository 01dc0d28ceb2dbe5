"""k8s-auto-labeller label files: ``labels/<namespace>/<name>`` lists dependency label keys.

If any dependency is on the node, the agent sets ``<namespace>/<name>=true``.  Existing
auto-labeller directories work unchanged; on top of that format we accept blank lines,
``#`` comments and ``key=value`` (the dependency then requires that value).  Every line is
hostile input: a line that is not a valid label key (binary junk, spaces, ``kubernetes.io``
typos) is a ``Problem`` naming file:line and is skipped; the rest of the file still counts.

A ConfigMap cannot hold ``/`` in a key, so a label file may also sit directly in a rules
directory under its *flat key* ``<namespace>.<name>`` (split at the **last** dot, so
``kkohtaka.org.edgetpu`` is ``kkohtaka.org/edgetpu``).  ``deploy/render_catalogue_configmap.py``
writes exactly these keys and refuses label names that would not read back the same.
"""

from __future__ import annotations

from agent.desired import Problem
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.rules.model import Dependency, LabelFile

MAX_LABEL_FILE_BYTES = 256 * 1024
MAX_LINE_CHARS = 512


def flat_key_to_label(flat: str) -> tuple[str, str] | None:
    """``accelerators.edgetpu`` -> (``accelerators``, ``edgetpu``); None when there is no dot."""
    namespace, dot, name = flat.rpartition(".")
    if not dot or not namespace or not name:
        return None
    return namespace, name


def _line_problem(text: str) -> str | None:
    if len(text) > MAX_LINE_CHARS:
        return f"line longer than {MAX_LINE_CHARS} characters"
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in text) or "\ufffd" in text:
        return "control characters or undecodable bytes (not a text line)"
    return None


def parse_dependency(line: str, origin: str) -> tuple[Dependency | None, str | None]:
    """One line -> (dependency, None), (None, None) for blank/comment, or (None, why)."""
    text = line.strip()
    if not text or text.startswith("#"):
        return None, None
    problem = _line_problem(text)
    if problem:
        return None, problem
    key, sep, value = text.partition("=")
    key = key.strip()
    errors = [f"key: {e}" for e in qualified_name_errors(key)]
    if sep:
        value = value.strip()
        errors += [f"value: {e}" for e in label_value_errors(value)]
    if errors:
        return None, f"invalid dependency {text[:80]!r}: {'; '.join(errors)}"
    return Dependency(key, value if sep else None, origin), None


def parse_label_file(path: str, namespace: str, name: str, data: bytes) -> tuple[LabelFile | None, list[Problem], list[Problem]]:
    """Parse one label file's bytes -> (file, problems, warnings).  The generated key
    ``<namespace>/<name>`` must itself be a valid label key; otherwise the whole file is
    skipped with a Problem at line 1.  A file with no dependency is only a warning."""
    problems: list[Problem] = []
    key = f"{namespace}/{name}"
    key_errors = qualified_name_errors(key)
    if key_errors:
        return None, [Problem(f"{path}:1", key, f"label file path does not name a valid label key: {'; '.join(key_errors)}")], []
    if len(data) > MAX_LABEL_FILE_BYTES:
        return None, [Problem(f"{path}:1", key, f"label file larger than {MAX_LABEL_FILE_BYTES} bytes; skipped")], []
    text = data.decode("utf-8", errors="replace")
    dependencies: list[Dependency] = []
    for number, line in enumerate(text.split("\n"), start=1):
        origin = f"{path}:{number}"
        dependency, problem = parse_dependency(line.rstrip("\r"), origin)
        if problem:
            problems.append(Problem(origin, key, f"line skipped: {problem}"))
        elif dependency is not None:
            dependencies.append(dependency)
    warnings = []
    if not dependencies:
        warnings.append(Problem(f"{path}:1", key, "label file lists no valid dependency labels; it can never match"))
    return LabelFile(namespace, name, path, tuple(dependencies)), problems, warnings
