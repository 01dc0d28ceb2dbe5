"""Executor for parsed Go templates: walks the node tree against the data, Go semantics.

Only Mapping keys and sequence items of the data are ever read (never Python attributes).
Runaway templates are bounded by a step budget, an output cap and the value-size cap that
template functions enforce; every failure becomes a TemplateError naming line and column.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from functools import partial

from agent.gotemplate.fmt import (
    MAX_VALUE_CHARS,
    FunctionError,
    WorkMeter,
    format_value,
    go_type,
    sorted_keys,
    truth,
)
from agent.gotemplate.funcs import call_function
from agent.gotemplate.lexer import TemplateError, error_at
from agent.gotemplate.parser import (
    Action,
    Chain,
    Command,
    Control,
    Dot,
    Field,
    Identifier,
    Literal,
    LoopJump,
    Nil,
    Node,
    Pipe,
    Text,
    Variable,
)

MAX_OUTPUT_CHARS = 1 << 20  # 1 MiB of key=value lines is far beyond any real node
MAX_STEPS = 1_000_000  # work units per render: node visits, loop iterations, function input, regex steps
_MISSING = object()


def execute(source: str, nodes: tuple[Node, ...], data: object, *, max_steps: int = MAX_STEPS,
            max_output: int = MAX_OUTPUT_CHARS) -> str:
    """Run parsed `nodes` (from `source`) with `data` as dot and `$`, within `max_steps` work
    units and `max_output` characters (a caller with less trusted templates passes less)."""
    return _Execution(source, data, max_steps, max_output).run(nodes)


class _Break(Exception):
    pass


class _Continue(Exception):
    pass


class _Execution:
    """State of one render: variables, output buffer and the step budget."""

    def __init__(self, source: str, data: object, max_steps: int = MAX_STEPS, max_output: int = MAX_OUTPUT_CHARS):
        self.source = source
        self.max_output = max_output
        self.vars: list[tuple[str, object]] = [("$", data)]
        self.out: list[str] = []
        self.size = 0
        self.meter = WorkMeter(max_steps)
        self.data = data

    def run(self, nodes: tuple[Node, ...]) -> str:
        self.walk(nodes, self.data)
        return "".join(self.out)

    def error(self, node: Node, message: str) -> TemplateError:
        snippet = self.source[node.pos : node.end].strip()
        context = f"executing at <{snippet[:60]}>: " if snippet else ""
        return error_at(self.source, node.pos, context + message)

    def step(self, node: Node) -> None:
        try:
            self.meter.charge(1)
        except FunctionError as exc:
            raise self.error(node, str(exc)) from None

    def emit(self, node: Node, text: str) -> None:
        self.size += len(text)
        if self.size > self.max_output:
            raise self.error(node, f"output exceeds {self.max_output} characters")
        self.out.append(text)

    # -- control flow ----------------------------------------------------------------------

    def walk(self, nodes: tuple[Node, ...], dot: object) -> None:
        for node in nodes:
            self.step(node)
            if isinstance(node, Text):
                self.emit(node, node.text)
            elif isinstance(node, Action):
                value = self.eval_pipe(node.pipe, dot)
                if not node.pipe.decls:
                    self.emit(node, "<no value>" if value is None else format_value(value))
            elif isinstance(node, Control):
                if node.kind == "range":
                    self.walk_range(node, dot)
                else:
                    self.walk_if_with(node, dot)
            elif isinstance(node, LoopJump):
                raise _Break() if node.kind == "break" else _Continue()

    def walk_if_with(self, node: Control, dot: object) -> None:
        mark = len(self.vars)
        try:
            value = self.eval_pipe(node.pipe, dot)
            if truth(value):
                self.walk(node.body, value if node.kind == "with" else dot)
            elif node.else_body:
                self.walk(node.else_body, dot)
        finally:
            del self.vars[mark:]

    def walk_range(self, node: Control, dot: object) -> None:
        mark = len(self.vars)
        try:
            value = self.eval_pipe(node.pipe, dot)
            iterations = self.range_items(node, value)
            ran = False
            for key, element in iterations:
                ran = True
                self.step(node)
                if not self.range_once(node, key, element):
                    break
            if not ran and node.else_body:
                self.walk(node.else_body, dot)
        finally:
            del self.vars[mark:]

    def range_items(self, node: Control, value: object) -> Iterator[tuple[object, object]]:
        if value is None:
            return iter(())
        if isinstance(value, (list, tuple)):
            return enumerate(value)
        if isinstance(value, Mapping):
            return ((key, value[key]) for key in sorted_keys(value))
        if isinstance(value, int) and not isinstance(value, bool):
            if len(node.pipe.decls) > 1:
                raise self.error(node, f"can't use {value} to iterate over more than one variable")
            return ((i, i) for i in range(value))
        raise self.error(node, f"range can't iterate over {format_value(value)[:60]}")

    def range_once(self, node: Control, key: object, element: object) -> bool:
        """Run the body for one element; False means {{break}}."""
        decls = node.pipe.decls
        if decls:
            self.vars[-1] = (decls[-1], element)
        if len(decls) == 2:
            self.vars[-2] = (decls[0], key)
        mark = len(self.vars)
        try:
            self.walk(node.body, element)
        except _Break:
            return False
        except _Continue:
            pass
        finally:
            del self.vars[mark:]
        return True

    # -- pipelines and commands ------------------------------------------------------------

    def eval_pipe(self, pipe: Pipe, dot: object) -> object:
        value: object = _MISSING
        for command in pipe.commands:
            value = self.eval_command(command, dot, value)
        for name in pipe.decls:
            if pipe.is_assign:
                self.assign(pipe, name, value)
            else:
                self.vars.append((name, value))
        return value

    def assign(self, node: Node, name: str, value: object) -> None:
        for position in range(len(self.vars) - 1, -1, -1):
            if self.vars[position][0] == name:
                self.vars[position] = (name, value)
                return
        raise self.error(node, f"undefined variable: {name}")

    def eval_command(self, command: Command, dot: object, final: object) -> object:
        self.step(command)
        first = command.args[0]
        if isinstance(first, Identifier):
            return self.call(first, command.args[1:], dot, final)
        if len(command.args) > 1 or final is not _MISSING:
            raise self.error(first, f"can't give argument to non-function {self.source[first.pos:first.end]}")
        if isinstance(first, Nil):
            raise self.error(first, "nil is not a command")
        return self.eval_arg(first, dot)

    def eval_arg(self, node: Node, dot: object) -> object:
        if isinstance(node, Dot):
            return dot
        if isinstance(node, Nil):
            return None
        if isinstance(node, Literal):
            return node.value
        if isinstance(node, Field):
            return self.fields(node, dot, node.names)
        if isinstance(node, Variable):
            return self.fields(node, self.lookup(node), node.names)
        if isinstance(node, Identifier):
            return self.call(node, (), dot, _MISSING)
        if isinstance(node, Pipe):
            return self.eval_pipe(node, dot)
        if isinstance(node, Chain):
            return self.fields(node, self.eval_arg(node.operand, dot), node.names)
        raise self.error(node, f"can't evaluate {type(node).__name__}")

    def lookup(self, node: Variable) -> object:
        for name, value in reversed(self.vars):
            if name == node.name:
                return value
        raise self.error(node, f"undefined variable: {node.name}")

    def fields(self, node: Node, value: object, names: tuple[str, ...]) -> object:
        """Follow .a.b: Mapping keys only (missingkey=error), never Python attributes."""
        for name in names:
            if isinstance(value, Mapping):
                if name not in value:
                    raise self.error(node, f'map has no entry for key "{name}"')
                value = value[name]
            elif value is None:
                raise self.error(node, f"nil pointer evaluating interface {{}}.{name}")
            else:
                raise self.error(node, f"can't evaluate field {name} in type {go_type(value)}")
        return value

    def call(self, node: Identifier, arg_nodes: tuple[Node, ...], dot: object, final: object) -> object:
        name = node.name
        if name in ("and", "or"):
            return self.call_and_or(node, arg_nodes, dot, final)
        args = [self.eval_arg(arg, dot) for arg in arg_nodes]
        if final is not _MISSING:
            args.append(final)
        try:
            result = call_function(name, args, self.meter)
        except TemplateError:
            raise
        except FunctionError as exc:
            raise self.error(node, f"error calling {name}: {exc}") from None
        except Exception as exc:  # noqa: BLE001 - Go's safeCall turns a panicking function into an error too
            raise self.error(node, f"error calling {name}: {type(exc).__name__}: {exc}") from None
        if isinstance(result, (str, list, dict)) and len(result) > MAX_VALUE_CHARS:
            raise self.error(node, f"error calling {name}: result larger than {MAX_VALUE_CHARS}")
        return result

    def call_and_or(self, node: Identifier, arg_nodes: tuple[Node, ...], dot: object, final: object) -> object:
        """and/or evaluate lazily and return the deciding argument, like Go 1.18+."""
        lazy: list[Callable[[], object]] = [partial(self.eval_arg, arg, dot) for arg in arg_nodes]
        if final is not _MISSING:
            lazy.append(lambda: final)
        if not lazy:
            raise self.error(node, f"wrong number of args for {node.name}: want at least 1 got 0")
        value: object = None
        for evaluate in lazy:
            value = evaluate()
            if truth(value) == (node.name == "or"):
                return value
        return value
