"""Parser for the Go text/template subset: items from the lexer become an immutable tree.

Checks what Go checks at parse time (unknown functions, undefined variables, stray
{{else}}/{{end}}, break outside range, non-executable pipeline stages) and additionally caps
nesting so that hostile templates cannot exhaust the interpreter stack.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.gotemplate.funcs import FUNCTIONS
from agent.gotemplate.lexer import ActionItem, Constant, TemplateError, TextItem, Token, error_at, lex

MAX_NESTING = 64  # control structures plus parentheses, innermost to outermost


@dataclass(frozen=True)
class Node:
    pos: int
    end: int


@dataclass(frozen=True)
class Text(Node):
    text: str


@dataclass(frozen=True)
class Dot(Node):
    pass


@dataclass(frozen=True)
class Nil(Node):
    pass


@dataclass(frozen=True)
class Literal(Node):
    value: Constant


@dataclass(frozen=True)
class Field(Node):
    names: tuple[str, ...]  # .a.b -> ("a", "b")


@dataclass(frozen=True)
class Variable(Node):
    name: str  # "$" or "$x"
    names: tuple[str, ...]  # field chain after the variable


@dataclass(frozen=True)
class Identifier(Node):
    name: str  # a function name


@dataclass(frozen=True)
class Chain(Node):
    operand: Node  # (pipeline) or identifier
    names: tuple[str, ...]


@dataclass(frozen=True)
class Command(Node):
    args: tuple[Node, ...]


@dataclass(frozen=True)
class Pipe(Node):
    decls: tuple[str, ...]
    is_assign: bool
    commands: tuple[Command, ...]


@dataclass(frozen=True)
class Action(Node):
    pipe: Pipe


@dataclass(frozen=True)
class Control(Node):
    kind: str  # if, with or range
    pipe: Pipe
    body: tuple[Node, ...]
    else_body: tuple[Node, ...]


@dataclass(frozen=True)
class LoopJump(Node):
    kind: str  # break or continue


@dataclass(frozen=True)
class _Stop:
    """The {{end}} or {{else ...}} action that ended a list of nodes."""

    word: str  # end or else
    item: ActionItem


def parse(source: str) -> tuple[Node, ...]:
    """Parse `source` into a node list, or raise `TemplateError` with line and column."""
    return _Parser(source).parse_top()


class _Parser:
    def __init__(self, source: str):
        self.source = source
        self.items = lex(source)
        self.index = 0
        self.vars: list[str] = ["$"]
        self.depth = 0
        self.range_depth = 0

    def error(self, offset: int, message: str) -> TemplateError:
        return error_at(self.source, offset, message)

    def parse_top(self) -> tuple[Node, ...]:
        nodes, stop = self.parse_list()
        if stop is not None:
            raise self.error(stop.item.pos, f"unexpected {{{{{stop.word}}}}}")
        return nodes

    def parse_list(self) -> tuple[tuple[Node, ...], _Stop | None]:
        """Parse nodes until {{end}}, {{else ...}} or end of input; return the stopper."""
        nodes: list[Node] = []
        while self.index < len(self.items):
            item = self.items[self.index]
            self.index += 1
            if isinstance(item, TextItem):
                nodes.append(Text(item.pos, item.pos + len(item.text), item.text))
                continue
            if not item.tokens:
                raise self.error(item.pos, "missing value for command")
            first = item.tokens[0]
            if first.kind == "keyword":
                if first.value in ("end", "else"):
                    if first.value == "end" and len(item.tokens) > 1:
                        raise self.error(item.tokens[1].pos, "unexpected token in end")
                    return tuple(nodes), _Stop(first.word, item)
                nodes.append(self.parse_keyword(first, item))
                continue
            nodes.append(Action(item.pos, first.end, self.parse_pipe(item.tokens, "command")))
        return tuple(nodes), None

    def parse_keyword(self, first: Token, item: ActionItem) -> Node:
        if first.value in ("if", "with", "range"):
            return self.parse_control(first.word, item.tokens[1:], item)
        if first.value in ("break", "continue"):
            if not self.range_depth:
                raise self.error(first.pos, f"{{{{{first.value}}}}} outside {{{{range}}}}")
            if len(item.tokens) > 1:
                raise self.error(item.tokens[1].pos, f"unexpected token in {{{{{first.value}}}}}")
            return LoopJump(first.pos, first.end, first.word)
        raise self.error(first.pos, f"{{{{{first.value}}}}} is not supported in rule templates")

    def parse_control(self, kind: str, tokens: tuple[Token, ...], item: ActionItem) -> Control:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(item.pos, f"template nesting deeper than {MAX_NESTING}")
        mark = len(self.vars)
        pipe = self.parse_pipe(tokens, kind, at=item.pos)
        self.range_depth += kind == "range"
        body, stop = self.parse_list()
        self.range_depth -= kind == "range"
        else_body: tuple[Node, ...] = ()
        if stop is None:
            raise self.error(item.pos, f"unexpected EOF: {{{{{kind}}}}} is never closed by {{{{end}}}}")
        if stop.word == "else":
            else_body = self.parse_else(kind, stop.item)
        del self.vars[mark:]
        self.depth -= 1
        return Control(item.pos, tokens[-1].end if tokens else item.pos, kind, pipe, body, else_body)

    def parse_else(self, kind: str, item: ActionItem) -> tuple[Node, ...]:
        tokens = item.tokens[1:]
        if tokens and tokens[0].kind == "keyword" and tokens[0].value == kind and kind in ("if", "with"):
            # {{else if x}} / {{else with x}} is a nested control that consumes the final {{end}}
            return (self.parse_control(kind, tokens[1:], item),)
        if tokens:
            raise self.error(tokens[0].pos, f"unexpected {self.describe(tokens[0])} in {{{{else}}}}")
        body, stop = self.parse_list()
        if stop is None:
            raise self.error(item.pos, f"unexpected EOF: {{{{{kind}}}}} is never closed by {{{{end}}}}")
        if stop.word != "end":
            raise self.error(stop.item.pos, f"expected {{{{end}}}}; found {{{{{stop.word}}}}}")
        return body

    def describe(self, token: Token) -> str:
        return repr(self.source[token.pos : token.end])

    # -- pipelines -------------------------------------------------------------------------

    def parse_pipe(self, tokens: tuple[Token, ...], context: str, at: int | None = None) -> Pipe:
        cursor = _Cursor(tokens, at if at is not None else (tokens[0].pos if tokens else 0))
        pipe = self.pipeline(cursor, context)
        if (extra := cursor.peek()) is not None:
            raise self.error(extra.pos, f"unexpected {self.describe(extra)} in {context}")
        return pipe

    def pipeline(self, cursor: _Cursor, context: str) -> Pipe:
        start = cursor.position()
        decls, is_assign = self.declarations(cursor, context)
        commands: list[Command] = []
        while True:
            commands.append(self.command(cursor, context))
            token = cursor.peek()
            if token is None or token.kind != "pipe":
                break
            cursor.next()
            after = cursor.peek()
            if after is None or after.kind == "rparen":
                break  # as Go's parser: a "|" right before the end of the pipeline adds no command
        for stage, command in enumerate(commands[1:], start=2):
            if isinstance(command.args[0], (Literal, Dot, Nil)):
                raise self.error(command.pos, f"non executable command in pipeline stage {stage}")
        if not is_assign:
            self.vars.extend(decls)
        return Pipe(start, cursor.position(), decls, is_assign, tuple(commands))

    def declarations(self, cursor: _Cursor, context: str) -> tuple[tuple[str, ...], bool]:
        first, second = cursor.peek(), cursor.peek(1)
        if first is None or first.kind != "variable" or second is None:
            return (), False
        if second.kind in ("declare", "assign"):
            cursor.next(), cursor.next()
            if second.kind == "assign" and context == "range":
                raise self.error(second.pos, "range can only initialize variables")
            if second.kind == "assign" and first.value not in self.vars:
                raise self.error(first.pos, f'undefined variable "{first.value}"')
            return (first.word,), second.kind == "assign"
        if second.kind != "comma":
            return (), False
        if context != "range":
            raise self.error(second.pos, f"too many declarations in {context}")
        cursor.next(), cursor.next()
        third, fourth = cursor.next(), cursor.next()
        if third is None or third.kind != "variable" or fourth is None or fourth.kind != "declare":
            raise self.error(second.pos, "range can only initialize variables")
        return (first.word, third.word), False

    def command(self, cursor: _Cursor, context: str) -> Command:
        start = cursor.position()
        args: list[Node] = []
        while (token := cursor.peek()) is not None and token.kind not in ("pipe", "rparen"):
            if args and not token.spaced:
                raise self.error(token.pos, f"unexpected {self.describe(token)} in operand")
            args.append(self.operand(cursor))
        if not args:
            raise self.error(start, f"missing value for {context}")
        return Command(start, args[-1].end, tuple(args))

    def operand(self, cursor: _Cursor) -> Node:
        token = cursor.take()
        kind = token.kind
        if kind == "field":
            names = (token.word, *self.chain(cursor))
            return Field(token.pos, cursor.position(), names)
        if kind == "variable":
            if token.value not in self.vars:
                raise self.error(token.pos, f'undefined variable "{token.value}"')
            names = self.chain(cursor)
            return Variable(token.pos, cursor.position(), token.word, names)
        if kind == "ident":
            if token.value not in FUNCTIONS:
                raise self.error(token.pos, f'function "{token.value}" not defined')
            node: Node = Identifier(token.pos, token.end, token.word)
        elif kind == "lparen":
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise self.error(token.pos, f"template nesting deeper than {MAX_NESTING}")
            node = self.pipeline(cursor, "parenthesized pipeline")
            closing = cursor.next()
            if closing is None or closing.kind != "rparen":
                raise self.error(token.pos, "unclosed left paren")
            self.depth -= 1
        elif kind in ("bool", "number", "string", "char"):
            node = Literal(token.pos, token.end, token.value)
        elif kind == "dot":
            node = Dot(token.pos, token.end)
        elif kind == "nil":
            node = Nil(token.pos, token.end)
        else:
            raise self.error(token.pos, f"unexpected {self.describe(token)} in command")
        names = self.chain(cursor)
        if not names:
            return node
        if not isinstance(node, (Identifier, Pipe)):
            raise self.error(token.pos, f"unexpected . after term {self.describe(token)}")
        return Chain(node.pos, cursor.position(), node, names)

    @staticmethod
    def chain(cursor: _Cursor) -> tuple[str, ...]:
        names: list[str] = []
        while (token := cursor.peek()) is not None and token.kind == "field" and not token.spaced:
            names.append(cursor.take().word)
        return tuple(names)


class _Cursor:
    """Read position within one action's tokens."""

    def __init__(self, tokens: tuple[Token, ...], start: int):
        self.tokens = tokens
        self.index = 0
        self.start = start

    def peek(self, ahead: int = 0) -> Token | None:
        at = self.index + ahead
        return self.tokens[at] if at < len(self.tokens) else None

    def next(self) -> Token | None:
        token = self.peek()
        self.index += token is not None
        return token

    def take(self) -> Token:
        """The next token, which the caller has seen with `peek`."""
        token = self.tokens[self.index]
        self.index += 1
        return token

    def position(self) -> int:
        if self.index < len(self.tokens):
            return self.tokens[self.index].pos
        return self.tokens[-1].end if self.tokens else self.start
