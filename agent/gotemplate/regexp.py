"""Go regular expressions (``InRegexp`` in rules, the Sprig ``regex*`` functions in templates).

Go's regexp *is* RE2, so matching runs on Google's RE2 (``google-re2``): linear time, so a
hostile pattern in a user's rule cannot hang the agent, and RE2's syntax is Go's. This module
is only the thin Go-API layer on top: the few places Go's parser differs from RE2's (Go
rejects ``\\C``; RE2 accepts it), Go's error texts, Go's "all matches" iteration (an empty
match right after the previous match is skipped), ``$1``/``${name}`` expansion and ``Split``.
tests/rules/test_go_regexp_corpus.py checks all of it against real Go's output.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Protocol

import re2

from agent.gotemplate.fmt import FunctionError, WorkMeter

__all__ = ["FunctionError", "GoRegexp", "Match", "compile_go", "expand", "find_all", "replace_all", "split"]

MAX_PATTERN_CHARS = 1024
DEFAULT_WORK = 1_000_000
_NAME = re.compile(r"[A-Za-z0-9_]+")

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every bad pattern of a user's rule to stderr
_OPTIONS.max_mem = 8 << 20

# RE2's error text -> Go's regexp/syntax ErrorCode text (same meaning, different words)
_GO_ERRORS = (
    ("missing ]", "missing closing ]"),
    ("missing )", "missing closing )"),
    ("unexpected )", "unexpected )"),
    ("trailing \\", "trailing backslash at end of expression"),
    ("no argument for repetition operator", "missing argument to repetition operator"),
    ("invalid repetition size", "invalid repeat count"),
    ("bad repetition operator", "invalid nested repetition operator"),
    ("invalid perl operator", "invalid or unsupported Perl syntax"),
    ("invalid named capture group", "invalid named capture"),
    ("invalid escape sequence", "invalid escape sequence"),
    ("invalid character class range", "invalid character class range"),
    ("invalid character class", "invalid character class"),
    ("invalid UTF-8", "invalid UTF-8"),
    ("duplicate capture group name", "duplicate capture group name"),
    ("pattern too large", "expression too large"),
)


class _Re2Match(Protocol):
    """What this module uses of a match of google-re2 (which ships no type information)."""

    def start(self) -> int: ...
    def span(self, group: int) -> tuple[int, int]: ...


class _Re2Regexp(Protocol):
    """What this module uses of a pattern compiled by google-re2, in byte offsets."""

    groups: int
    groupindex: Mapping[str, int]
    programsize: int

    def search(self, data: bytes, pos: int) -> _Re2Match | None: ...


class Match:
    """One match, in character offsets (``start``, ``end``, ``span``, ``group``), as Go reports
    it in runes."""

    __slots__ = ("regex", "spans", "string")

    def __init__(self, string: str, spans: tuple[int, ...], regex: GoRegexp) -> None:
        self.string, self.spans, self.regex = string, spans, regex

    def span(self, number: int = 0) -> tuple[int, int]:
        return self.spans[2 * number], self.spans[2 * number + 1]

    def start(self) -> int:
        return self.spans[0]

    def end(self) -> int:
        return self.spans[1]

    def group(self, which: int | str = 0) -> str | None:
        number = self.regex.groupindex[which] if isinstance(which, str) else which
        start, end = self.span(number)
        return None if start < 0 else self.string[start:end]


class _Subject:
    """A string as RE2 sees it (UTF-8 bytes) with the byte offset of every character."""

    __slots__ = ("data", "offsets", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.data = text.encode("utf-8", "surrogatepass")
        self.offsets = list(itertools.accumulate((len(c.encode("utf-8", "surrogatepass")) for c in text), initial=0))

    def char(self, byte_offset: int) -> int:
        return -1 if byte_offset < 0 else bisect.bisect_left(self.offsets, byte_offset)


class GoRegexp:
    """A compiled Go regexp: ``search``, ``groups``, ``groupindex``, ``names``, ``pattern``."""

    def __init__(self, compiled: _Re2Regexp, pattern: str) -> None:
        self._re = compiled
        self.pattern = pattern
        self.groups = compiled.groups
        self.names = _capture_names(pattern, self.groups) or _names_from(compiled)
        self.groupindex: dict[str, int] = {}
        for index, name in enumerate(self.names):
            if name:
                self.groupindex.setdefault(name, index)  # Go's SubexpIndex: the first of that name

    def search(self, text: str | _Subject, pos: int = 0, meter: WorkMeter | None = None) -> Match | None:
        """The leftmost-first match at or after character ``pos`` (``^``/``\\b`` see the whole
        text, as in Go). RE2 works on bytes and may put an empty ``\\B`` match inside a
        multi-byte character, where Go (which works on runes) never looks: such a match is
        skipped. ``meter`` is charged what an automaton simulation may cost, text length times
        program size (RE2's DFA is usually far cheaper), so a render's regex work stays bounded."""
        subject = text if isinstance(text, _Subject) else _Subject(text)
        (meter or WorkMeter(DEFAULT_WORK)).charge((len(subject.text) - pos + 1) * self._re.programsize)
        at = subject.offsets[min(pos, len(subject.text))]
        while True:
            found = self._re.search(subject.data, at)
            if found is None:
                return None
            start = found.start()
            if start < len(subject.data) and 0x80 <= subject.data[start] < 0xC0:
                at = subject.offsets[bisect.bisect_right(subject.offsets, start)]
                continue
            spans = tuple(subject.char(b) for index in range(self.groups + 1) for b in found.span(index))
            return Match(subject.text, spans, self)


def _names_from(compiled: _Re2Regexp) -> list[str]:
    names = [""] * (compiled.groups + 1)
    for name, index in compiled.groupindex.items():
        names[index] = name
    return names


def _open_parens(pattern: str) -> Iterator[int]:
    """Where each ``(`` that opens a group stands: not escaped, not in ``\\Q...\\E`` or a class."""
    index, in_class = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            if pattern.startswith("Q", index + 1):
                end = pattern.find("\\E", index + 2)
                index = len(pattern) if end < 0 else end + 2
            else:
                index += 2
            continue
        if in_class:
            if pattern.startswith("[:", index):
                end = pattern.find(":]", index + 2)
                index = index + 1 if end < 0 else end + 2
                continue
            in_class = char != "]"
            index += 1
            continue
        if char == "[":
            in_class = True
            index += 1
            if pattern.startswith("^", index):
                index += 1
            if pattern.startswith("]", index):
                index += 1
            continue
        if char == "(":
            yield index
        index += 1


def _capture_names(pattern: str, groups: int) -> list[str] | None:
    """Go's SubexpNames, in order, duplicates included (RE2 reports only the first of a
    duplicated name, Go allows them). None if the scan disagrees with RE2's group count."""
    names = [""]
    for index in _open_parens(pattern):
        named = re.match(r"\(\?P?<([A-Za-z0-9_]+)>", pattern[index:])
        if named:
            names.append(named.group(1))
        elif not pattern.startswith("(?", index):
            names.append("")
    return names if len(names) == groups + 1 else None


def _re2_syntax(pattern: str) -> str:
    """``(?<name>`` written ``(?P<name>``: the same group to Go (>= 1.22) and to RE2 since
    2023-07, but older RE2 (Debian bookworm's 2022-06-01, which the arm/v7 image links) knows
    only the second form. A ``(?<`` that is no valid name is left for RE2 to refuse."""
    named = [i for i in _open_parens(pattern) if re.match(r"\(\?<[A-Za-z0-9_]+>", pattern[i:])]
    for index in reversed(named):
        pattern = f"{pattern[:index + 2]}P{pattern[index + 2:]}"
    return pattern


def _go_rejects(pattern: str) -> str | None:
    """What Go refuses although RE2 accepts it: ``\\C`` (any byte)."""
    index = 0
    while index < len(pattern):
        if pattern[index] == "\\":
            if pattern.startswith("Q", index + 1):  # \Q...\E is literal text
                end = pattern.find("\\E", index + 2)
                index = len(pattern) if end < 0 else end + 2
                continue
            if pattern.startswith("C", index + 1):
                return "invalid escape sequence: `\\C`"
            index += 2
            continue
        index += 1
    return None


def _go_error(message: str, pattern: str) -> str:
    at = pattern.find("(?<")
    if message.startswith("invalid perl operator: (?<") and at >= 0:
        # Go (>= 1.22) reads every "(?<" as a named group, so a lookbehind is a bad name there:
        # the complaint quotes the group up to its ">", or the rest of the pattern without one
        close = pattern.find(">", at)
        return f"error parsing regexp: invalid named capture: `{pattern[at:] if close < 0 else pattern[at:close + 1]}`"
    for theirs, ours in _GO_ERRORS:
        if message.startswith(theirs):
            detail = message[len(theirs):].lstrip(": ")
            return f"error parsing regexp: {ours}: `{detail}`"
    return f"error parsing regexp: {message}: `{pattern}`"


@lru_cache(maxsize=512)
def compile_go(pattern: str) -> GoRegexp:
    """Compile a Go regexp, or raise FunctionError with Go's complaint."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FunctionError(f"regexp longer than {MAX_PATTERN_CHARS} characters")
    rejected = _go_rejects(pattern)
    if rejected:
        raise FunctionError(f"error parsing regexp: {rejected}")
    try:
        return GoRegexp(re2.compile(_re2_syntax(pattern), _OPTIONS), pattern)
    except re2.error as exc:
        text = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise FunctionError(_go_error(text, pattern)) from None


def find_all(regex: GoRegexp, text: str, limit: int = -1, meter: WorkMeter | None = None) -> list[Match]:
    """Go's allMatches: successive matches; an empty match touching the previous one is skipped."""
    matches: list[Match] = []
    pos, previous_end = 0, -1
    subject = _Subject(text)
    while pos <= len(text) and (limit < 0 or len(matches) < limit):
        match = regex.search(subject, pos, meter)
        if match is None:
            break
        accept = True
        if match.end() == pos:  # empty match: step over one character
            accept = match.start() != previous_end
            pos += 1
        else:
            pos = match.end()
        previous_end = match.end()
        if accept:
            matches.append(match)
    return matches


def replace_all(regex: GoRegexp, text: str, replacement: str, literal: bool = False,
                meter: WorkMeter | None = None) -> str:
    """Go's ReplaceAllString (with $1 / ${name} expansion) or ReplaceAllLiteralString."""
    out: list[str] = []
    last = 0
    for match in find_all(regex, text, -1, meter):
        out.append(text[last : match.start()])
        out.append(replacement if literal else expand(regex, match, replacement))
        last = match.end()
    out.append(text[last:])
    return "".join(out)


def expand(regex: GoRegexp, match: Match, template: str) -> str:
    """Go's Regexp.Expand: `$$` is a dollar, `$name`/`${name}` a group, malformed `$` is literal."""
    out: list[str] = []
    index = 0
    while True:
        dollar = template.find("$", index)
        if dollar < 0:
            out.append(template[index:])
            return "".join(out)
        out.append(template[index:dollar])
        rest = dollar + 1
        if template.startswith("$", rest):
            out.append("$")
            index = rest + 1
            continue
        braced = template.startswith("{", rest)
        name_match = _NAME.match(template, rest + 1 if braced else rest)
        if name_match is None or (braced and not template.startswith("}", name_match.end())):
            out.append("$")
            index = rest
            continue
        name = name_match.group(0)
        index = name_match.end() + (1 if braced else 0)
        out.append(_group(regex, match, name))


def _group(regex: GoRegexp, match: Match, name: str) -> str:
    if name.isdigit():
        number = int(name)
        return (match.group(number) or "") if number <= regex.groups else ""
    for number, named in enumerate(regex.names):  # as Go: the first group of that name that took part
        if named == name and match.span(number)[0] >= 0:
            return match.group(number) or ""
    return ""


def split(regex: GoRegexp, text: str, limit: int, meter: WorkMeter | None = None) -> list[str]:
    """Go's Regexp.Split(s, n)."""
    if limit == 0:
        return []
    if regex.pattern and not text:
        return [""]
    pieces: list[str] = []
    begin = end = 0
    for match in find_all(regex, text, limit, meter):
        if limit > 0 and len(pieces) == limit - 1:
            break
        end = match.start()
        if match.end() != 0:
            pieces.append(text[begin:end])
        begin = match.end()
    if end != len(text):
        pieces.append(text[begin:])
    return pieces
