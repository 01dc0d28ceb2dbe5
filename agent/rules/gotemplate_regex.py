"""Go RE2 regular expressions for the Sprig regex functions.

Go's regexp is RE2: no backreferences or lookaround, `$` means end of text, `\\z` is end of
text, POSIX classes like `[[:alpha:]]`, and "all matches" skips an empty match that touches
the previous match. This module translates the pattern to the syntax Python's regex parser
reads, refuses what RE2 refuses, and implements Go's match iteration and `$1`/`${name}`
expansion. Matching itself runs on the linear-time Pike VM in gotemplate_pikevm, never on
Python's backtracking engine, so a hostile pattern cannot hang rule evaluation.
"""

from __future__ import annotations

import re
from functools import lru_cache

from agent.rules.gotemplate_fmt import FunctionError, WorkMeter
from agent.rules.gotemplate_pikevm import LinearRegex, Match

MAX_PATTERN_CHARS = 1024
_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f", "digit": "0-9", "graph": "!-~", "lower": "a-z",
    "print": " -~", "punct": "!-/:-@\\[-`{-~", "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z",
    "word": "0-9A-Za-z_", "xdigit": "0-9A-Fa-f",
}
_UNSUPPORTED_GROUPS = ("(?=", "(?!", "(?<=", "(?<!", "(?#", "(?(", "(?>", "(?P=")
_NAME = re.compile(r"[A-Za-z0-9_]+")


@lru_cache(maxsize=256)
def compile_go(pattern: str) -> LinearRegex:
    """Compile a Go regexp, or raise FunctionError with Go's complaint."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise FunctionError(f"regexp longer than {MAX_PATTERN_CHARS} characters")
    return LinearRegex(_translate(pattern), pattern)


def _translate(pattern: str) -> str:
    multiline = re.match(r"\(\?[a-zA-Z]*m", pattern) is not None
    out: list[str] = []
    index, in_class = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            escape = pattern[index + 1 : index + 2]
            if escape.isdigit() and escape != "0":
                raise FunctionError(f"error parsing regexp: invalid escape sequence: `\\{escape}`")
            if escape in ("p", "P", "C", "Z", "X", "G"):
                raise FunctionError(f"error parsing regexp: unsupported escape: `\\{escape}`")
            if escape == "Q":
                end = pattern.find("\\E", index + 2)
                literal = pattern[index + 2 :] if end < 0 else pattern[index + 2 : end]
                out.append(re.escape(literal))
                index = len(pattern) if end < 0 else end + 2
                continue
            out.append("\\Z" if escape == "z" else pattern[index : index + 2])
            index += 2
            continue
        if in_class:
            posix = re.match(r"\[:(\^?)([a-z]+):\]", pattern[index:])
            if posix and posix.group(2) in _POSIX_CLASSES and not posix.group(1):
                out.append(_POSIX_CLASSES[posix.group(2)])
                index += posix.end()
                continue
            if char in "[&~|":
                out.append("\\" + char)  # literal in RE2; Python warns about set operators
            else:
                out.append(char)
                in_class = char != "]"
            index += 1
            continue
        if char == "[":
            in_class = True
            out.append(char)
            # a leading ']' (or '^]') is a literal in both dialects; copy it verbatim
            lead = re.match(r"\^?\]?", pattern[index + 1 :]).group(0)
            out.append(lead)
            index += 1 + len(lead)
            continue
        if char == "(" and pattern.startswith(_UNSUPPORTED_GROUPS, index):
            raise FunctionError(f"error parsing regexp: invalid or unsupported Perl syntax: `{pattern[index:index + 3]}`")
        if char == "(" and pattern.startswith("(?<", index):
            out.append("(?P<")
            index += 3
            continue
        out.append("\\Z" if char == "$" and not multiline else char)
        index += 1
    return "".join(out)


def find_all(regex: LinearRegex, text: str, limit: int = -1, meter: WorkMeter | None = None) -> list[Match]:
    """Go's allMatches: successive matches; an empty match touching the previous one is skipped."""
    matches: list[Match] = []
    pos, previous_end = 0, -1
    while pos <= len(text) and (limit < 0 or len(matches) < limit):
        match = regex.search(text, pos, meter)
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


def replace_all(
    regex: LinearRegex, text: str, replacement: str, literal: bool = False, meter: WorkMeter | None = None
) -> str:
    """Go's ReplaceAllString (with $1 / ${name} expansion) or ReplaceAllLiteralString."""
    out: list[str] = []
    last = 0
    for match in find_all(regex, text, -1, meter):
        out.append(text[last : match.start()])
        out.append(replacement if literal else expand(regex, match, replacement))
        last = match.end()
    out.append(text[last:])
    return "".join(out)


def expand(regex: LinearRegex, match: Match, template: str) -> str:
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
        closed = name_match and (not braced or template.startswith("}", name_match.end()))
        if not closed:
            out.append("$")
            index = rest
            continue
        name = name_match.group(0)
        index = name_match.end() + (1 if braced else 0)
        out.append(_group(regex, match, name))


def _group(regex: LinearRegex, match: Match, name: str) -> str:
    if name.isdigit():
        number = int(name)
        return (match.group(number) or "") if number <= regex.groups else ""
    if name in regex.groupindex:
        return match.group(name) or ""
    return ""


def split(regex: LinearRegex, text: str, limit: int, meter: WorkMeter | None = None) -> list[str]:
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
