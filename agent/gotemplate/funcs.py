"""The function table templates may call: Go's builtins plus the Sprig subset (sprig.py).

Each function declares Go-like parameter kinds so a call with the wrong count or type fails
the way Go's text/template fails ("wrong number of args", "wrong type for value"). Only
the names in `FUNCTIONS` exist; the parser rejects anything else, which is what keeps
user-written rule templates from reaching anything but pure data transformations.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.gotemplate.fmt import (
    MAX_VALUE_CHARS,
    FunctionError,
    WorkMeter,
    go_type,
    sprint,
    sprintf,
    sprintln,
    truth,
)
from agent.gotemplate.sprig import SPRIG


@dataclass(frozen=True)
class Function:
    """A callable plus Go-style parameter kinds: any, str, int, bool, map."""

    impl: Callable[..., object]
    params: tuple[str, ...] = ()
    variadic: str | None = None
    metered: bool = False  # impl takes the render's WorkMeter as keyword `meter`


_KIND_CHECKS: dict[str, tuple[str, Callable[[object], bool]]] = {
    "any": ("interface {}", lambda v: True),
    "str": ("string", lambda v: isinstance(v, str)),
    "int": ("int", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    "bool": ("bool", lambda v: isinstance(v, bool)),
    "map": ("map[string]interface {}", lambda v: isinstance(v, Mapping)),
}


def call_function(name: str, args: list[object], meter: WorkMeter) -> object:
    """Check `args` against the declared signature of `name`, charge `meter`, and call it.

    Every call costs work proportional to the size of its arguments, so loops that grow and
    re-process lists or strings run out of budget instead of going quadratic unbounded."""
    function = FUNCTIONS[name]
    meter.charge(1 + sum(len(arg) for arg in args if isinstance(arg, (str, list, tuple, Mapping))) // 16)
    count, fixed = len(args), len(function.params)
    if count < fixed or (function.variadic is None and count != fixed):
        want = f"at least {fixed}" if function.variadic else str(fixed)
        raise FunctionError(f"wrong number of args for {name}: want {want} got {count}")
    rest = (function.variadic,) * (count - fixed) if function.variadic else ()
    for arg, kind in zip(args, function.params + rest, strict=True):
        type_name, accepts = _KIND_CHECKS[kind]
        if not accepts(arg):
            raise FunctionError(f"wrong type for value; expected {type_name}; got {go_type(arg)}")
    return function.impl(*args, meter=meter) if function.metered else function.impl(*args)


def _basic_kind(value: object) -> str:
    if value is None:
        return "invalid"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "other"


def eq(first: object, *others: object) -> bool:
    """Go's eq: true if `first` equals any of `others`; mismatched basic kinds are an error."""
    if not others:
        raise FunctionError("missing argument for comparison")
    first_kind = _basic_kind(first)
    for other in others:
        other_kind = _basic_kind(other)
        if first_kind != other_kind:
            if first_kind != "invalid" and other_kind != "invalid":
                raise FunctionError("incompatible types for comparison")
            continue
        if first_kind == "other":
            raise FunctionError(f"non-comparable type {go_type(first)}")
        if first == other:
            return True
    return False


def ne(first: object, second: object) -> bool:
    return not eq(first, second)


def lt(first: object, second: object) -> bool:
    first_kind, second_kind = _basic_kind(first), _basic_kind(second)
    if first_kind in ("invalid", "bool", "other") or second_kind in ("invalid", "bool", "other"):
        raise FunctionError("invalid type for comparison")
    if first_kind != second_kind:
        raise FunctionError("incompatible types for comparison")
    if isinstance(first, str) and isinstance(second, str):
        return first < second
    if isinstance(first, (int, float)) and isinstance(second, (int, float)):
        return first < second
    raise FunctionError("invalid type for comparison")  # not reached: both int, float or str


def le(first: object, second: object) -> bool:
    return lt(first, second) or eq(first, second)


def gt(first: object, second: object) -> bool:
    return not le(first, second)


def ge(first: object, second: object) -> bool:
    return not lt(first, second)


def length(item: object) -> int:
    if isinstance(item, str):
        return len(item.encode("utf-8", "surrogatepass"))  # Go counts bytes
    if isinstance(item, (list, tuple, Mapping)):
        return len(item)
    if item is None:
        raise FunctionError("len of nil pointer")
    raise FunctionError(f"len of type {go_type(item)}")


def index(item: object, *keys: object) -> object:
    """Go's index: slices by int, maps by key (a missing key gives the zero value)."""
    value = item
    for key in keys:
        if value is None:
            raise FunctionError("index of untyped nil")
        if isinstance(value, (list, tuple, str)):
            if not isinstance(key, int) or isinstance(key, bool):
                raise FunctionError(f"cannot index slice/array with type {go_type(key)}")
            sequence = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
            if not 0 <= key < len(sequence):
                raise FunctionError(f"index out of range: {key}")
            value = sequence[key]
        elif isinstance(value, Mapping):
            if not isinstance(key, str) and all(isinstance(k, str) for k in value):
                raise FunctionError(f"value has type {go_type(key)}; should be string")
            value = value[key] if key in value else _zero_value(value)
        else:
            raise FunctionError(f"can't index item of type {go_type(value)}")
    return value


def _zero_value(mapping: Mapping[object, object]) -> object:
    """Go returns the map's element zero value; NFD element maps are map[string]string."""
    return "" if all(isinstance(v, str) for v in mapping.values()) else None


def slice_(item: object, *indexes: object) -> object:
    """Go's slice: item[a:b] for strings and slices (the 3-index form only for slices)."""
    if not isinstance(item, (str, list, tuple)):
        raise FunctionError(f"can't slice item of type {go_type(item)}")
    if len(indexes) > 3 or (len(indexes) == 3 and isinstance(item, str)):
        raise FunctionError("too many slice indexes")
    size = len(item.encode("utf-8", "surrogatepass")) if isinstance(item, str) else len(item)
    start, stop = _slice_bounds([_slice_index(position) for position in indexes], size)
    if isinstance(item, str):
        return item.encode("utf-8", "surrogatepass")[start:stop].decode("utf-8", "replace")
    return list(item[start:stop])


def _slice_index(position: object) -> int:
    if not isinstance(position, int) or isinstance(position, bool):
        raise FunctionError(f"cannot index slice/array with type {go_type(position)}")
    return position


def _slice_bounds(bounds: list[int], size: int) -> tuple[int, int]:
    """Start and stop of a slice of `size` items; Go's range check (0 <= low <= high <= max <= size)."""
    start = bounds[0] if bounds else 0
    stop = bounds[1] if len(bounds) > 1 else size
    if not 0 <= start <= stop <= size or (len(bounds) == 3 and not stop <= bounds[2] <= size):
        raise FunctionError(f"index out of range: {stop if stop > size else start}")
    return start, stop


def _printf(template: str, *args: object) -> str:
    return sprintf(template, list(args), MAX_VALUE_CHARS)


def _escaper_input(args: tuple[object, ...]) -> str:
    """Go's evalArgs for html/js/urlquery: one string as is, else fmt.Sprint of all."""
    return args[0] if len(args) == 1 and isinstance(args[0], str) else sprint(list(args))


_HTML_ESCAPES = {"&": "&amp;", "'": "&#39;", "<": "&lt;", ">": "&gt;", '"': "&#34;", "\0": "\ufffd"}
_JS_ESCAPES = {"\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E", "&": "\\u0026",
               "=": "\\u003D"}


def _html(*args: object) -> str:
    """Go's template.HTMLEscapeString."""
    return "".join(_HTML_ESCAPES.get(c, c) for c in _escaper_input(args))


def _js(*args: object) -> str:
    """Go's template.JSEscapeString: quotes, backslash, <>&= and non-printable runes as \\uXXXX."""
    out = []
    for char in _escaper_input(args):
        if char in _JS_ESCAPES:
            out.append(_JS_ESCAPES[char])
        elif char.isprintable():
            out.append(char)
        else:
            out.append(f"\\u{ord(char):04X}")
    return "".join(out)


def _urlquery(*args: object) -> str:
    """Go's url.QueryEscape: unreserved characters kept, space as +, the rest %XX."""
    return urllib.parse.quote_plus(_escaper_input(args), safe="")


BUILTINS: dict[str, Function] = {
    # and/or are evaluated lazily by the executor; these entries give arity and the name.
    "and": Function(lambda *a: a[-1], ("any",), "any"),
    "or": Function(lambda *a: a[-1], ("any",), "any"),
    "not": Function(lambda v: not truth(v), ("any",)),
    "len": Function(length, ("any",)),
    "index": Function(index, ("any",), "any"),
    "slice": Function(slice_, ("any",), "any"),
    "eq": Function(eq, ("any",), "any"),
    "ne": Function(ne, ("any", "any")),
    "lt": Function(lt, ("any", "any")),
    "le": Function(le, ("any", "any")),
    "gt": Function(gt, ("any", "any")),
    "ge": Function(ge, ("any", "any")),
    "print": Function(lambda *a: sprint(list(a)), (), "any"),
    "println": Function(lambda *a: sprintln(list(a)), (), "any"),
    "printf": Function(_printf, ("str",), "any"),
    "html": Function(_html, (), "any"),
    "js": Function(_js, (), "any"),
    "urlquery": Function(_urlquery, (), "any"),
}


FUNCTIONS: dict[str, Function] = {
    **{name: Function(*signature) for name, signature in SPRIG.items()},
    **BUILTINS,
}
