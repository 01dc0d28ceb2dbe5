"""Walk rules directories and load every label file and NodeFeatureRule YAML into a Catalogue.

What a rules directory may hold (see ``labels/README.md``):

- ``*.yaml`` / ``*.yml`` at any depth: NodeFeatureRule documents;
- ``<namespace>/<name>``: an auto-labeller label file;
- ``<namespace>.<name>`` directly in the directory: the same label file under its ConfigMap
  (flat) key;
- documentation (``*.md``, ``*.txt``, ``README*``, ``LICENSE*``, ``NOTICE*``): ignored.

Entries starting with ``.`` are skipped, which covers editor/VCS junk and the kubelet's
ConfigMap machinery (``..data`` -> ``..2026_01_01_00_00_00.123/``): the visible entries of a
mounted ConfigMap are symlinks into ``..data``, so they are followed (with loop protection)
and reported under their visible paths.  Loading never raises for bad content: every bad
file, document, rule or line becomes a ``Problem`` with file:line.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass, field

from agent.desired import Problem
from agent.rules.label_files import flat_key_to_label, parse_label_file
from agent.rules.model import Catalogue, LabelFile, RuleOptions, RuleSet
from agent.rules.nfr_parser import parse_rule_file
from agent.rules.static_checks import static_problems
from agent.rules.vocabulary import engine_vocabulary, vocabulary_problems

log = logging.getLogger(__name__)

YAML_SUFFIXES = (".yaml", ".yml")
DOC_SUFFIXES = (".md", ".txt", ".rst")
DOC_PREFIXES = ("readme", "license", "notice", "owners", "changelog")
MAX_RULE_FILE_BYTES = 1024 * 1024
MAX_DEPTH = 8
MAX_FILES = 5000


def is_documentation(name: str) -> bool:
    lower = name.lower()
    return lower.endswith(DOC_SUFFIXES) or lower.startswith(DOC_PREFIXES)


@dataclass
class _Walk:
    files: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)  # (display path, parts)
    problems: list[Problem] = field(default_factory=list)
    seen_dirs: set[str] = field(default_factory=set)


def _walk(directory: str, parts: tuple[str, ...], state: _Walk) -> None:
    real = os.path.realpath(directory)
    if real in state.seen_dirs:
        state.problems.append(Problem(directory, "directory", "symlink loop or directory reached twice; skipped"))
        return
    if len(parts) > MAX_DEPTH:
        state.problems.append(Problem(directory, "directory", f"deeper than {MAX_DEPTH} levels; skipped"))
        return
    state.seen_dirs.add(real)
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        state.problems.append(Problem(directory, "directory", f"cannot list: {exc.strerror or exc}"))
        return
    for name in names:
        if name.startswith(".") or name == "__pycache__":
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path):
            _walk(path, parts + (name,), state)
        elif os.path.isfile(path):
            if len(state.files) >= MAX_FILES:
                state.problems.append(Problem(path, "file", f"more than {MAX_FILES} files in the rules directories; rest skipped"))
                return
            state.files.append((path, parts + (name,)))
        elif os.path.lexists(path):
            state.problems.append(Problem(path, "file", "dangling symlink or special file; skipped"))


def _read(path: str, limit: int) -> bytes | Problem:
    """The file's bytes, or why it is not read."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        return Problem(f"{path}:1", "file", f"cannot read: {exc.strerror or exc}")
    if len(data) > limit:
        return Problem(f"{path}:1", "file", f"larger than {limit} bytes; skipped")
    return data


def _load_yaml(path: str, problems: list[Problem]) -> list[RuleSet]:
    data = _read(path, MAX_RULE_FILE_BYTES)
    if isinstance(data, Problem):
        problems.append(data)
        return []
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        problems.append(Problem(f"{path}:1", "file", f"not UTF-8 text ({exc.reason} at byte {exc.start}); skipped"))
        return []
    rule_sets, found = parse_rule_file(path, text)
    problems.extend(found)
    return rule_sets


def _load_label_file(path: str, parts: tuple[str, ...], problems: list[Problem], warnings: list[Problem]) -> LabelFile | None:
    if len(parts) == 2:
        namespace, name = parts
    elif len(parts) == 1:
        split = flat_key_to_label(parts[0])
        if split is None:
            problems.append(Problem(f"{path}:1", parts[0], "not a label file: expected <namespace>/<name> or the flat key <namespace>.<name>"))
            return None
        namespace, name = split
    else:
        warnings.append(Problem(f"{path}:1", "/".join(parts), "ignored: not YAML and not a <namespace>/<name> label file"))
        return None
    data = _read(path, 256 * 1024)
    if isinstance(data, Problem):
        problems.append(data)
        return None
    label_file, found, notes = parse_label_file(path, namespace, name, data)
    problems.extend(found)
    warnings.extend(notes)
    return label_file


def load_catalogue(dirs: list[str] | tuple[str, ...], options: RuleOptions | None = None) -> Catalogue:
    """Load every rules directory in ``dirs`` (in order).  Never raises for bad content."""
    problems: list[Problem] = []
    warnings: list[Problem] = []
    rule_sets: list[RuleSet] = []
    label_files: dict[str, LabelFile] = {}
    files: list[str] = []
    for directory in dirs:
        if not os.path.isdir(directory):
            problems.append(Problem(str(directory), "directory", "rules directory does not exist or is not a directory"))
            continue
        state = _Walk()
        _walk(str(directory), (), state)
        problems.extend(state.problems)
        for path, parts in state.files:
            name = parts[-1]
            if name.lower().endswith(YAML_SUFFIXES):
                files.append(path)
                rule_sets.extend(_load_yaml(path, problems))
            elif is_documentation(name):
                continue
            else:
                label_file = _load_label_file(path, parts, problems, warnings)
                if label_file is None:
                    continue
                files.append(path)
                if label_file.key in label_files:
                    first = label_files[label_file.key]
                    warnings.append(Problem(f"{path}:1", label_file.key, f"label file also defined by {first.path}; dependencies merged"))
                    label_file = LabelFile(first.namespace, first.name, first.path, first.dependencies + label_file.dependencies)
                label_files[label_file.key] = label_file
    names: dict[str, str] = {}
    for rule_set in rule_sets:
        if rule_set.name in names:
            warnings.append(Problem(rule_set.origin, rule_set.name, f"NodeFeatureRule name also used at {names[rule_set.name]}; both are evaluated"))
        names.setdefault(rule_set.name, rule_set.origin)
    ordered = sorted(rule_sets, key=lambda r: r.name)  # NFD: objects in metadata.name order (stable)
    catalogue = Catalogue(
        dirs=tuple(str(d) for d in dirs),
        rule_sets=tuple(ordered),
        label_files=tuple(label_files[k] for k in sorted(label_files)),
        problems=tuple(problems),
        warnings=tuple(warnings),
        files=tuple(files),
    )
    checked = static_problems(catalogue, options or RuleOptions())
    unknown, third_party = vocabulary_problems(catalogue, engine_vocabulary())
    checked += unknown
    for problem in problems + checked:
        log.debug("catalogue problem: %s", problem)
    return dataclasses.replace(catalogue, problems=catalogue.problems + tuple(checked),
                               warnings=catalogue.warnings + tuple(third_party))
