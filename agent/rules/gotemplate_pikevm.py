"""Linear-time regular expression matching (a Pike VM, as in Go's regexp) for rule templates.

Python's `re` backtracks, so a hostile pattern such as `(a+)+$` in a user's rule file could
hang the agent on every node. Go's RE2 semantics have no backreferences or lookaround, which
makes a Thompson/Pike simulation possible: time is O(len(text) x program size), and matches
are leftmost-first with Go's submatch rules. The pattern is parsed by Python's own regex
parser (after gotemplate_regex has translated RE2 syntax) and compiled to a tiny program.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from re import _constants as sre  # noqa: I001  (the parser's opcode names)
from re import _parser as sre_parse

from agent.rules.gotemplate_fmt import FunctionError, WorkMeter

MAX_PROGRAM = 20_000  # instructions after expanding counted repeats like x{2,500}
DEFAULT_WORK = 1_000_000  # thread steps when the caller supplies no meter


def _is_word(char: str) -> bool:
    return char.isascii() and (char.isalnum() or char == "_")


@dataclass(frozen=True)
class Match:
    """The subset of `re.Match` the template functions use."""

    string: str
    spans: tuple[int | None, ...]  # start0, end0, start1, end1, ...
    groupindex: dict

    def start(self) -> int:
        return self.spans[0]

    def end(self) -> int:
        return self.spans[1]

    def group(self, which: int | str = 0) -> str | None:
        number = self.groupindex[which] if isinstance(which, str) else which
        start, end = self.spans[2 * number], self.spans[2 * number + 1]
        return None if start is None or end is None else self.string[start:end]


class LinearRegex:
    """A compiled pattern: `search(text, pos)` runs the Pike VM from `pos`."""

    def __init__(self, python_pattern: str, go_pattern: str):
        try:
            parsed = sre_parse.parse(python_pattern, re.ASCII)
        except (re.error, OverflowError, RecursionError) as exc:
            raise FunctionError(f"error parsing regexp: {exc}: `{go_pattern}`") from None
        self.pattern = go_pattern
        self.groups = parsed.state.groups - 1
        self.groupindex = dict(parsed.state.groupdict)
        self.program: list[tuple] = [("save", 0)]
        self._emit(list(parsed), parsed.state.flags)
        self.program += [("save", 1), ("match",)]

    # -- compiler --------------------------------------------------------------------------

    def _add(self, instruction: tuple) -> int:
        if len(self.program) >= MAX_PROGRAM:
            raise FunctionError(f"regexp too large: `{self.pattern}`")
        self.program.append(instruction)
        return len(self.program) - 1

    def _patch(self, at: int, instruction: tuple) -> None:
        self.program[at] = instruction

    def _emit(self, items: list, flags: int) -> None:
        for op, arg in items:
            if op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
                self._add(("char", _predicate(op, arg, flags)))
            elif op is sre.BRANCH:
                self._emit_branch(arg[1], flags)
            elif op is sre.SUBPATTERN:
                group, add_flags, del_flags, body = arg
                inner = (flags | add_flags) & ~del_flags
                if group:
                    self._add(("save", 2 * group))
                self._emit(list(body), inner)
                if group:
                    self._add(("save", 2 * group + 1))
            elif op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
                self._emit_repeat(arg, flags, greedy=op is sre.MAX_REPEAT)
            elif op is sre.AT:
                self._add(("assert", arg, bool(flags & re.MULTILINE)))
            else:
                raise FunctionError(f"error parsing regexp: unsupported syntax ({op}) in `{self.pattern}`")

    def _emit_branch(self, alternatives: list, flags: int) -> None:
        jumps = []
        for index, alternative in enumerate(alternatives):
            if index < len(alternatives) - 1:
                split = self._add(("split", 0, 0))
                self._emit(list(alternative), flags)
                jumps.append(self._add(("jmp", 0)))
                self._patch(split, ("split", split + 1, len(self.program)))
            else:
                self._emit(list(alternative), flags)
        for jump in jumps:
            self._patch(jump, ("jmp", len(self.program)))

    def _emit_repeat(self, arg: tuple, flags: int, greedy: bool) -> None:
        low, high, body = arg
        for _ in range(low):
            self._emit(list(body), flags)
        if high is sre.MAXREPEAT:
            loop = self._add(("split", 0, 0))
            self._emit(list(body), flags)
            self._add(("jmp", loop))
            self._patch(loop, _split(loop + 1, len(self.program), greedy))
            return
        exits = []
        for _ in range(high - low):
            split = self._add(("split", 0, 0))
            exits.append(split)
            self._emit(list(body), flags)
        for split in exits:
            self._patch(split, _split(split + 1, len(self.program), greedy))

    # -- virtual machine -------------------------------------------------------------------

    def search(self, text: str, pos: int = 0, meter: WorkMeter | None = None) -> Match | None:
        """Leftmost-first match starting at or after `pos`, like Go's FindStringSubmatchIndex.

        Every thread step is charged to `meter`, so total regex work per render is bounded."""
        meter = meter or WorkMeter(DEFAULT_WORK)
        empty: tuple = (None,) * (2 * (self.groups + 1))
        work = [0]
        try:
            return self._run(text, pos, empty, work)
        finally:
            meter.charge(work[0])

    def _run(self, text: str, pos: int, empty: tuple, work: list) -> Match | None:
        current: list[tuple[int, tuple]] = []
        self._follow(current, set(), 0, empty, text, pos, work)
        matched: tuple | None = None
        while True:
            following: list[tuple[int, tuple]] = []
            seen: set[int] = set()
            char = text[pos] if pos < len(text) else None
            for pc, caps in current:
                instruction = self.program[pc]
                if instruction[0] == "match":
                    matched = caps
                    break  # lower-priority threads can no longer win
                if char is not None and instruction[1](char):
                    self._follow(following, seen, pc + 1, caps, text, pos + 1, work)
            if pos >= len(text) or (not following and matched is not None):
                break
            pos += 1
            if matched is None:
                self._follow(following, seen, 0, empty, text, pos, work)
            current = following
        return Match(text, matched, self.groupindex) if matched is not None else None

    def _follow(self, threads: list, seen: set, pc: int, caps: tuple, text: str, pos: int, work: list) -> None:
        """Add the thread at `pc` and everything reachable without consuming input, in priority order."""
        stack = [(pc, caps)]
        while stack:
            pc, caps = stack.pop()
            if pc in seen:
                continue
            seen.add(pc)
            work[0] += 1
            if work[0] > DEFAULT_WORK:
                raise FunctionError(f"regexp `{self.pattern}` is too expensive for this input")
            instruction = self.program[pc]
            kind = instruction[0]
            if kind == "jmp":
                stack.append((instruction[1], caps))
            elif kind == "split":
                stack.append((instruction[2], caps))
                stack.append((instruction[1], caps))
            elif kind == "save":
                slot = instruction[1]
                stack.append((pc + 1, caps[:slot] + (pos,) + caps[slot + 1 :]))
            elif kind == "assert":
                if _assertion_holds(instruction[1], instruction[2], text, pos):
                    stack.append((pc + 1, caps))
            else:
                threads.append((pc, caps))


def _split(body: int, exit_: int, greedy: bool) -> tuple:
    return ("split", body, exit_) if greedy else ("split", exit_, body)


def _assertion_holds(kind: object, multiline: bool, text: str, pos: int) -> bool:
    before = text[pos - 1] if pos > 0 else ""
    after = text[pos] if pos < len(text) else ""
    if kind is sre.AT_BEGINNING:
        return pos == 0 or (multiline and before == "\n")
    if kind is sre.AT_BEGINNING_STRING:
        return pos == 0
    if kind is sre.AT_END:
        return pos == len(text) or (multiline and after == "\n")
    if kind is sre.AT_END_STRING:
        return pos == len(text)
    boundary = _is_word(before) != _is_word(after)
    if kind is sre.AT_BOUNDARY:
        return boundary
    if kind is sre.AT_NON_BOUNDARY:
        return not boundary
    raise FunctionError(f"unsupported regexp assertion {kind}")


_CATEGORIES = {
    sre.CATEGORY_DIGIT: lambda c: "0" <= c <= "9",
    sre.CATEGORY_NOT_DIGIT: lambda c: not "0" <= c <= "9",
    sre.CATEGORY_SPACE: lambda c: c in " \t\n\r\f\v",
    sre.CATEGORY_NOT_SPACE: lambda c: c not in " \t\n\r\f\v",
    sre.CATEGORY_WORD: _is_word,
    sre.CATEGORY_NOT_WORD: lambda c: not _is_word(c),
}


def _predicate(op: object, arg: object, flags: int):
    """A function char -> bool for one single-character instruction."""
    fold = bool(flags & re.IGNORECASE)
    if op is sre.ANY:
        dotall = bool(flags & re.DOTALL)
        return lambda c: dotall or c != "\n"
    if op in (sre.LITERAL, sre.NOT_LITERAL):
        wanted = chr(arg)
        variants = {wanted, wanted.lower(), wanted.upper()} if fold else {wanted}
        negate = op is sre.NOT_LITERAL
        return lambda c: (c in variants) != negate
    negate = bool(arg) and arg[0][0] is sre.NEGATE
    tests = []
    for item_op, item_arg in arg[1:] if negate else arg:
        if item_op is sre.LITERAL:
            tests.append(lambda c, v=chr(item_arg): c == v)
        elif item_op is sre.RANGE:
            tests.append(lambda c, lo=item_arg[0], hi=item_arg[1]: lo <= ord(c) <= hi)
        elif item_op is sre.CATEGORY and item_arg in _CATEGORIES:
            tests.append(_CATEGORIES[item_arg])
        else:
            raise FunctionError(f"unsupported character class item {item_op}")

    def in_class(c: str) -> bool:
        candidates = (c, c.lower(), c.upper()) if fold else (c,)
        return any(test(x) for x in candidates for test in tests) != negate

    return in_class
