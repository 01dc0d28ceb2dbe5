"""Lexer for the Go text/template subset used by NodeFeatureRule templates.

Splits a template into text items and action items (the tokens between ``{{`` and ``}}``),
applying Go's trim markers (``{{- `` and `` -}}``) and dropping comments (``{{/* */}}``).
Every token keeps its offset so errors can name line and column. Rule files are user input,
so every malformed construct raises `TemplateError` rather than anything else.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_TEMPLATE_BYTES = 64 * 1024  # NFD refuses templates larger than this

_SPACE = " \t\r\n"
_KEYWORDS = frozenset(
    {"if", "else", "end", "range", "with", "break", "continue", "define", "template", "block"}
)
_ALNUM = re.compile(r"[A-Za-z0-9_\u00c0-\U0010ffff]*")  # Go: letters, digits, underscore
Constant = str | bool | int | float  # the value of a literal in a template
_NUMBER = re.compile(
    r"[+-]?(?:0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+"
    r"|(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)(?:[eE][+-]?[0-9_]+)?)"
)
_OLD_OCTAL = re.compile(r"[+-]?0[0-7_]+")
_SIMPLE_ESCAPES = {
    "a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\",
}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class TemplateError(ValueError):
    """A template failed to parse or execute; `line`/`column` locate the failing construct."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        where = f"{line}:{column}: " if line is not None else ""
        super().__init__(f"template:{where}{message}")


def position(source: str, offset: int) -> tuple[int, int]:
    """1-based (line, column) of `offset` in `source`."""
    line = source.count("\n", 0, offset) + 1
    column = offset - (source.rfind("\n", 0, offset) + 1) + 1
    return line, column


def error_at(source: str, offset: int, message: str) -> TemplateError:
    line, column = position(source, offset)
    return TemplateError(message, line, column)


@dataclass(frozen=True)
class Token:
    """One lexeme inside an action. `spaced` is true when whitespace preceded it."""

    kind: str  # field, variable, dot, ident, keyword, bool, nil, number, string, char,
    # pipe, lparen, rparen, declare, assign, comma
    value: Constant  # a str but for bool (bool), number (int or float) and char (int)
    pos: int
    end: int
    spaced: bool

    @property
    def word(self) -> str:
        """The name a field, variable, identifier or keyword token holds."""
        if not isinstance(self.value, str):
            raise TypeError(f"a {self.kind} token holds no name")
        return self.value


@dataclass(frozen=True)
class TextItem:
    text: str
    pos: int


@dataclass(frozen=True)
class ActionItem:
    tokens: tuple[Token, ...]
    pos: int  # offset of the opening "{{"


def lex(source: str) -> list[TextItem | ActionItem]:
    """Split `source` into text and action items, or raise `TemplateError`."""
    if len(source.encode("utf-8", "surrogatepass")) > MAX_TEMPLATE_BYTES:
        raise TemplateError(f"template is larger than {MAX_TEMPLATE_BYTES} bytes")
    items: list[TextItem | ActionItem] = []
    pos, trim_next_text = 0, False
    while pos < len(source):
        start = source.find("{{", pos)
        text = source[pos:] if start < 0 else source[pos:start]
        content = len(source) if start < 0 else start + 2
        trim_left = start >= 0 and _has_left_trim(source, content)
        if trim_left:
            text, content = text.rstrip(_SPACE), content + 2
        if trim_next_text:
            text = text.lstrip(_SPACE)
        if text:
            items.append(TextItem(text, pos))
        if start < 0:
            break
        if source.startswith("/*", content):
            pos, trim_next_text = _skip_comment(source, start, content)
            continue
        tokens, pos, trim_next_text = _lex_action(source, start, content)
        items.append(ActionItem(tuple(tokens), start))
    return items


def _has_left_trim(source: str, at: int) -> bool:
    return source.startswith("-", at) and at + 1 < len(source) and source[at + 1] in _SPACE


def _right_delim(source: str, at: int) -> tuple[int, bool] | None:
    """If a closing delimiter starts at `at`, return (offset after it, trims following text)."""
    if source.startswith("}}", at):
        return at + 2, False
    if at < len(source) and source[at] in _SPACE and source.startswith("-}}", at + 1):
        return at + 4, True
    return None


def _skip_comment(source: str, start: int, content: int) -> tuple[int, bool]:
    close = source.find("*/", content + 2)
    if close < 0:
        raise error_at(source, start, "unclosed comment")
    delim = _right_delim(source, close + 2)
    if delim is None:
        raise error_at(source, close, "comment ends before closing delimiter")
    return delim


def _lex_action(source: str, start: int, pos: int) -> tuple[list[Token], int, bool]:
    tokens: list[Token] = []
    spaced, parens = True, 0
    while True:
        delim = _right_delim(source, pos)
        if delim is not None:
            if parens:
                raise error_at(source, pos, "unclosed left paren")
            return tokens, delim[0], delim[1]
        if pos >= len(source):
            raise error_at(source, start, "unclosed action")
        char = source[pos]
        if char in _SPACE:
            pos, spaced = pos + 1, True
            continue
        token = _lex_token(source, pos, spaced)
        if token.kind == "lparen":
            parens += 1
        elif token.kind == "rparen":
            parens -= 1
            if parens < 0:
                raise error_at(source, pos, "unexpected right paren")
        tokens.append(token)
        pos, spaced = token.end, False


def _lex_token(source: str, pos: int, spaced: bool) -> Token:
    char = source[pos]
    if source.startswith(":=", pos):
        return Token("declare", ":=", pos, pos + 2, spaced)
    if char in _PUNCTUATION:
        return Token(_PUNCTUATION[char], char, pos, pos + 1, spaced)
    if char in "\"`'":
        return _lex_quote(source, pos, spaced)
    if char == "$" or (char == "." and not source[pos + 1 : pos + 2].isdigit()):
        return _lex_variable_or_field(source, pos, spaced)
    if char.isdigit() or char in "+-.":
        return _lex_number(source, pos, spaced)
    if char.isalpha() or char == "_":
        return _lex_word(source, pos, spaced)
    raise error_at(source, pos, f"unrecognized character in action: {char!r}")


_PUNCTUATION = {"|": "pipe", "(": "lparen", ")": "rparen", ",": "comma", "=": "assign"}


def _lex_quote(source: str, pos: int, spaced: bool) -> Token:
    """A "quoted" string, a `raw` string or a 'c'haracter constant, by the quote at `pos`."""
    char = source[pos]
    if char == '"':
        return _lex_quoted(source, pos, spaced)
    if char == "'":
        return _lex_char(source, pos, spaced)
    close = source.find("`", pos + 1)
    if close < 0:
        raise error_at(source, pos, "unterminated raw quoted string")
    return Token("string", source[pos + 1 : close], pos, close + 1, spaced)


def _lex_variable_or_field(source: str, pos: int, spaced: bool) -> Token:
    """`$name` (or `$`), `.Field`, or `.` alone: the dot."""
    end = _word_end(source, pos + 1)
    if source[pos] == "$":
        return _checked(source, Token("variable", source[pos:end], pos, end, spaced))
    if end == pos + 1:
        return _checked(source, Token("dot", ".", pos, end, spaced))
    return _checked(source, Token("field", source[pos + 1 : end], pos, end, spaced))


def _lex_word(source: str, pos: int, spaced: bool) -> Token:
    """A boolean, nil, a keyword or an identifier."""
    end = _word_end(source, pos)
    word = source[pos:end]
    if word in ("true", "false"):
        return _checked(source, Token("bool", word == "true", pos, end, spaced))
    kind = "nil" if word == "nil" else "keyword" if word in _KEYWORDS else "ident"
    return _checked(source, Token(kind, word, pos, end, spaced))


def _word_end(source: str, pos: int) -> int:
    """Where the run of letters, digits and underscores starting at `pos` ends."""
    match = _ALNUM.match(source, pos)  # never None: the pattern matches the empty string too
    return match.end() if match else pos


def _checked(source: str, token: Token) -> Token:
    """Go requires a terminator (space, delimiter, '.', ',', '|', ':', '(', ')') after words."""
    nxt = source[token.end : token.end + 1]
    if nxt and nxt not in _SPACE and nxt not in ".,|:()=" and not source.startswith("}}", token.end):
        raise error_at(source, token.end, f"bad character {nxt!r} after {source[token.pos:token.end]!r}")
    return token


def _lex_number(source: str, pos: int, spaced: bool) -> Token:
    match = _NUMBER.match(source, pos)
    text = match.group(0) if match else ""
    end = pos + len(text)
    if not text.strip("+-") or (end < len(source) and (source[end].isalnum() or source[end] in "._")):
        raise error_at(source, pos, f"bad number syntax: {source[pos:end + 1]!r}")
    clean = text.replace("_", "")
    try:
        if _OLD_OCTAL.fullmatch(clean) and clean.strip("+-") != "0":
            value: int | float = int(clean, 8)
        elif clean.lower().lstrip("+-").startswith(("0x", "0o", "0b")) or not re.search("[.eE]", clean):
            value = int(clean, 0)
        else:
            value = float(clean)
    except ValueError:
        raise error_at(source, pos, f"bad number syntax: {text!r}") from None
    if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
        raise error_at(source, pos, f"number {text} overflows int")
    return _checked(source, Token("number", value, pos, end, spaced))


def _lex_quoted(source: str, pos: int, spaced: bool) -> Token:
    index = pos + 1
    while index < len(source):
        char = source[index]
        if char == "\\":
            index += 2
            continue
        if char == "\n":
            break
        if char == '"':
            return Token("string", unescape(source, pos + 1, index), pos, index + 1, spaced)
        index += 1
    raise error_at(source, pos, "unterminated quoted string")


def _lex_char(source: str, pos: int, spaced: bool) -> Token:
    index = pos + 1
    while index < len(source) and source[index] not in "'\n":
        index += 2 if source[index] == "\\" else 1
    if index >= len(source) or source[index] != "'":
        raise error_at(source, pos, "unterminated character constant")
    value = unescape(source, pos + 1, index, quote="'")
    if len(value) != 1:
        raise error_at(source, pos, f"malformed character constant: {source[pos:index + 1]}")
    return Token("char", ord(value), pos, index + 1, spaced)


def unescape(source: str, start: int, end: int, quote: str = '"') -> str:
    """Decode Go escape sequences in source[start:end]."""
    out: list[str] = []
    index = start
    while index < end:
        char = source[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        code = source[index + 1 : index + 2]
        if code in _SIMPLE_ESCAPES or code == quote:
            out.append(_SIMPLE_ESCAPES.get(code, quote))
            index += 2
            continue
        decoded, index = _numeric_escape(source, index, end)
        out.append(decoded)
    return "".join(out)


def _numeric_escape(source: str, index: int, end: int) -> tuple[str, int]:
    """The character of the \\xhh, \\uhhhh, \\Uhhhhhhhh or \\ooo escape at `index`, and the index after it."""
    code = source[index + 1 : index + 2]
    digits = {"x": 2, "u": 4, "U": 8}.get(code)
    base, width, skip = (16, digits, 2) if digits else (8, 3, 1)
    chunk = source[index + skip : index + skip + width]
    if (not digits and not code.isdigit()) or len(chunk) != width or index + skip + width > end:
        raise error_at(source, index, f"invalid escape sequence \\{code}")
    try:
        value = int(chunk, base)
    except ValueError:
        raise error_at(source, index, f"invalid escape sequence \\{code}{chunk}") from None
    if value > 0x10FFFF or (base == 8 and value > 255) or 0xD800 <= value <= 0xDFFF:
        raise error_at(source, index, f"invalid escape sequence \\{code}{chunk}")
    return chr(value), index + skip + width
