"""YAML to plain data that remembers line numbers, so every rule element can say file:line.

``yaml.compose_all`` keeps marks on nodes; we convert nodes to ``LineMap`` / ``LineList``
(dict / list subclasses carrying the 1-based line of themselves and of each key or item).
Only safe scalar types are constructed.  Aliases are expanded with a budget so an
alias bomb ("billion laughs") is refused instead of eating memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MAX_NODES = 200_000
MAX_DEPTH = 64


class YamlShapeError(ValueError):
    """The document is not plain data we accept; ``line`` locates it."""

    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.line = line


class LineMap(dict[str, Any]):
    """A mapping with ``line`` (where it starts) and ``key_lines`` (where each key is).

    Values are whatever the YAML held (``Any``): their readers check each one's shape."""

    line: int = 0
    key_lines: dict[str, int]

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list[Any]):
    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


class _Converter:
    def __init__(self) -> None:
        self.budget = MAX_NODES
        self.scalars = SafeConstructor()
        self.active: set[int] = set()  # nodes being converted: a repeat is a recursive alias

    def convert(self, node: Node) -> Any:
        if id(node) in self.active:
            raise YamlShapeError("recursive alias (a node that contains itself)", node.start_mark.line + 1)
        if len(self.active) > MAX_DEPTH:
            raise YamlShapeError(f"nested deeper than {MAX_DEPTH} levels", node.start_mark.line + 1)
        self.active.add(id(node))
        try:
            return self._convert(node)
        finally:
            self.active.discard(id(node))

    def _convert(self, node: Node) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise YamlShapeError(f"document too large or alias bomb (more than {MAX_NODES} nodes)", node.start_mark.line + 1)
        line = node.start_mark.line + 1
        if isinstance(node, ScalarNode):
            try:
                return self.scalars.construct_object(node)
            except yaml.YAMLError as exc:
                raise YamlShapeError(f"cannot read scalar: {exc}", line) from None
        if isinstance(node, SequenceNode):
            items = LineList(self.convert(item) for item in node.value)
            items.line = line
            items.item_lines = [item.start_mark.line + 1 for item in node.value]
            return items
        if isinstance(node, MappingNode):
            out = LineMap()
            out.line = line
            out.key_lines = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise YamlShapeError("merge keys (<<) are not supported", key_node.start_mark.line + 1)
                key = self.convert(key_node)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    raise YamlShapeError("mapping keys must be scalars", key_node.start_mark.line + 1)
                key = str(key).lower() if isinstance(key, bool) else str(key)
                if key in out:
                    raise YamlShapeError(f"duplicate key {key!r}", key_node.start_mark.line + 1)
                out[key] = self.convert(value_node)
                out.key_lines[key] = key_node.start_mark.line + 1
            return out
        raise YamlShapeError(f"unsupported YAML node {type(node).__name__}", line)


def load_documents(text: str) -> Iterator[tuple[int, Any]]:
    """Yield ``(start line, data)`` per document; raises ``yaml.YAMLError`` or
    ``YamlShapeError`` at the first bad document."""
    converter = _Converter()
    for node in yaml.compose_all(text, Loader=yaml.SafeLoader):
        yield node.start_mark.line + 1, converter.convert(node)
