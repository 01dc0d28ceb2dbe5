"""A safe, pure-Python Go text/template engine for NodeFeatureRule labelsTemplate/varsTemplate.

    render(template, data) -> str                     # raises TemplateError
    render_key_values(template, data) -> dict         # NFD's "key=value" lines, parsed
    compile_template(template).render(data)           # parse once, render many times

Semantics follow Go's text/template with Option("missingkey=error") and the Sprig functions
rules use (see agent/gotemplate/sprig.py). `data` is plain data: Mappings, lists/tuples, str, int,
float, bool and None; NFD's shape is `.<dom>.<feature>` -> list of {"Name"} (flags),
{"Name", "Value"} (attributes) or attribute dicts (instances). The engine only ever reads
Mapping keys and sequence items; it never touches Python attributes, so rule files from
users cannot reach interpreter internals. Hostile templates are bounded: at most 64 KiB of
source, nesting depth, execution steps and output size are capped, and every failure is a
TemplateError with line and column.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from agent.gotemplate.exec import MAX_OUTPUT_CHARS, MAX_STEPS, execute
from agent.gotemplate.lexer import MAX_TEMPLATE_BYTES, TemplateError, position
from agent.gotemplate.parser import MAX_NESTING, Command, Identifier, Literal, Node, parse
from agent.gotemplate.regexp import FunctionError, compile_go

__all__ = [
    "MAX_NESTING",
    "MAX_OUTPUT_CHARS",
    "MAX_STEPS",
    "MAX_TEMPLATE_BYTES",
    "CompiledTemplate",
    "TemplateError",
    "compile_template",
    "parse_key_value_lines",
    "render",
    "render_key_values",
]


@dataclass(frozen=True)
class CompiledTemplate:
    """A parsed template; rendering it is pure (no I/O, clock or globals)."""

    source: str
    nodes: tuple[Node, ...]

    def render(self, data: Mapping[str, object], *, max_steps: int = MAX_STEPS,
               max_output: int = MAX_OUTPUT_CHARS) -> str:
        return execute(self.source, self.nodes, data, max_steps=max_steps, max_output=max_output)

    def render_key_values(self, data: Mapping[str, object]) -> dict[str, str]:
        return parse_key_value_lines(self.render(data))


def compile_template(template: str) -> CompiledTemplate:
    """Parse `template`, raising TemplateError for syntax errors, unknown functions, > 64 KiB,
    and regexp literals Go would not compile (so ``validate`` names them with file:line)."""
    if not isinstance(template, str):
        raise TemplateError(f"template must be a string, not {type(template).__name__}")
    nodes = parse(template)
    _check_regexp_literals(template, nodes)
    return CompiledTemplate(template, nodes)


# Sprig's regexMatch alone ignores a bad pattern (it is simply false, as in NFD); the others
# would fail at run time anyway, so their literal patterns are checked at load
REGEXP_FUNCTIONS = frozenset({"mustRegexMatch", "regexFind", "regexFindAll", "regexReplaceAll",
                              "regexReplaceAllLiteral", "regexSplit"})


def _walk(node: object) -> Iterator[object]:
    yield node
    if dataclasses.is_dataclass(node):
        for item in dataclasses.fields(node):
            value = getattr(node, item.name)
            for child in value if isinstance(value, tuple) else (value,):
                if dataclasses.is_dataclass(child):
                    yield from _walk(child)


def _check_regexp_literals(source: str, nodes: tuple[Node, ...]) -> None:
    """A literal pattern given to a regex function is compiled now, as Go would at run time:
    a pattern Go rejects is an error of the rule, reported at load with its position."""
    for top in nodes:
        for node in _walk(top):
            if not isinstance(node, Command) or len(node.args) < 2:
                continue
            name, pattern = node.args[0], node.args[1]
            if isinstance(name, Identifier) and name.name in REGEXP_FUNCTIONS and isinstance(pattern, Literal) \
                    and isinstance(pattern.value, str):
                try:
                    compile_go(pattern.value)
                except FunctionError as exc:
                    line, column = position(source, pattern.pos)
                    raise TemplateError(f"{name.name}: {exc}", line, column) from None


def render(template: str, data: Mapping[str, object]) -> str:
    """Execute Go template `template` against `data` (missingkey=error)."""
    return compile_template(template).render(data)


def render_key_values(template: str, data: Mapping[str, object]) -> dict[str, str]:
    """Render and split into a dict the way NFD's template helper ExpandMap does."""
    return compile_template(template).render_key_values(data)


def parse_key_value_lines(text: str) -> dict[str, str]:
    """NFD's ExpandMap: each line is stripped, blank lines skipped, split at the first "=";
    a non-blank line without "=" is an error; later duplicates win. Keys and values are
    returned unvalidated (label-name checks belong to the caller)."""
    result: dict[str, str] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if not stripped:
            continue
        key, separator, value = stripped.partition("=")
        if not separator:
            raise TemplateError(
                f"missing value in expanded template output line {number}: {stripped[:80]!r} "
                "(format must be '<key>=<value>')"
            )
        result[key] = value
    return result
