"""Go `fmt` semantics for template values: %v printing, print/println/printf and truthiness.

Template values are plain Python data standing in for Go's interface{} values: None (nil),
bool, int, float (float64), str, list/tuple (slices) and Mappings (maps). Printing must match
Go byte for byte because the output becomes Kubernetes label keys and values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

MAX_VALUE_CHARS = 1 << 20  # largest string or list any template function may build
MAX_WIDTH = 100_000  # Go allows 1e6; no label needs more, and it bounds memory per verb


class FunctionError(Exception):
    """A template function was called with bad arguments or failed (Go: "error calling f")."""


class WorkMeter:
    """One render's budget of work units (node visits, function input sizes, regex VM steps).

    Shared by the executor and the costly functions so that no combination of loops and
    regexes can run unbounded; exceeding it raises FunctionError."""

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0

    def charge(self, units: int) -> None:
        self.used += units
        if self.used > self.limit:
            raise FunctionError(f"template execution exceeded {self.limit} steps")


def go_type(value: object) -> str:
    """The Go type name Go would report for `value` in error messages."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "[]interface {}"
    if isinstance(value, Mapping):
        return "map[string]interface {}"
    return type(value).__name__


def truth(value: object) -> bool:
    """Go template truthiness: nil, false, 0, "" and empty slices/maps are false."""
    if value is None:
        return False
    if isinstance(value, (bool, int, float)):
        return value != 0
    if isinstance(value, (str, list, tuple, Mapping)):
        return len(value) > 0
    return True


def format_value(value: object) -> str:
    """Go's %v for a value."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float_shortest(value)
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return "[" + " ".join(format_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        return "map[" + " ".join(f"{format_value(k)}:{format_value(value[k])}" for k in sorted_keys(value)) + "]"
    return str(value)


def sorted_keys(mapping: Mapping[Any, object]) -> list[Any]:
    """Map keys in Go's order (fmt and range sort map keys); mixed key types group by type.

    Keys are any template value (Go's interface{}), hence `Any`: `sorted` needs them ordered."""
    try:
        return sorted(mapping)
    except TypeError:
        return sorted(mapping, key=lambda key: (go_type(key), str(key)))


def format_float_shortest(value: float) -> str:
    """Go's %v for float64 (%g, shortest): exponent form when exp < -4 or exp >= 6 (1e+06)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    sign, digits, exponent_code = Decimal(repr(value)).as_tuple()
    exponent = int(exponent_code)  # a number: NaN and the infinities returned above
    text = "".join(map(str, digits)).rstrip("0") or "0"
    exponent += len(digits) - len(text)
    point = len(text) + exponent  # position of the decimal point in `text`
    exp = point - 1
    prefix = "-" if sign else ""
    if exp < -4 or exp >= 6:
        mantissa = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{text}"
    if point >= len(text):
        return prefix + text + "0" * (point - len(text))
    return f"{prefix}{text[:point]}.{text[point:]}"


def go_quote(text: str, quote: str = '"') -> str:
    """strconv.Quote: Go escapes, printable Unicode kept as is."""
    named = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}
    out = [quote]
    for char in text:
        code = ord(char)
        if char in (quote, "\\"):
            out.append("\\" + char)
        elif char in named:
            out.append(named[char])
        elif char.isprintable() and not 0xD800 <= code <= 0xDFFF:
            out.append(char)
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:
            out.append("\\ufffd")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    out.append(quote)
    return "".join(out)


def sprint(args: Sequence[object]) -> str:
    """fmt.Sprint: a space between operands when neither side is a string."""
    parts: list[str] = []
    previous_string = False
    for index, arg in enumerate(args):
        is_string = isinstance(arg, str)
        if index and not is_string and not previous_string:
            parts.append(" ")
        parts.append(format_value(arg))
        previous_string = is_string
    return "".join(parts)


def sprintln(args: Sequence[object]) -> str:
    return " ".join(format_value(arg) for arg in args) + "\n"


def sprintf(template: str, args: Sequence[object], limit: int) -> str:
    """fmt.Sprintf for the verbs templates use; bad verbs render Go's %!v(...) forms."""
    out: list[str] = []
    size, index, used = 0, 0, 0
    while index < len(template):
        percent = template.find("%", index)
        if percent < 0:
            out.append(template[index:])
            break
        out.append(template[index:percent])
        size += len(out[-1])
        spec, index = _parse_spec(template, percent + 1, args, used)
        used, verb = spec.used, spec.verb
        if verb is None:
            out.append("%!(NOVERB)")
        elif spec.bad:
            out.append(spec.bad)
        elif verb == "%":
            out.append("%")
        elif used >= len(args):
            out.append(f"%!{verb}(MISSING)")
        else:
            out.append(format_verb(args[used], verb, spec))
            used += 1
        size += len(out[-1])
        if size > limit:
            raise FunctionError(f"printf result exceeds {limit} characters")
    if used < len(args):
        extra = ", ".join(f"{go_type(a)}={format_value(a)}" if a is not None else "<nil>" for a in args[used:])
        out.append(f"%!(EXTRA {extra})")
    result = "".join(out)
    if len(result) > limit:
        raise FunctionError(f"printf result exceeds {limit} characters")
    return result


@dataclass
class _Spec:
    """One %-directive: flags, width and precision (None when not given), verb, operands used."""

    used: int  # operands consumed by this and the earlier directives ('*' ones too)
    flags: str = ""
    width: int | None = None
    prec: int | None = None
    verb: str | None = None
    bad: str = ""  # Go's %!(BADWIDTH) or %!(BADPREC) for a width or precision it refuses

    def set_number(self, name: str, value: int | None) -> None:
        if name == "width":
            self.width = value
        else:
            self.prec = value


def _parse_spec(template: str, index: int, args: Sequence[object], used: int) -> tuple[_Spec, int]:
    spec = _Spec(used)
    while index < len(template) and template[index] in "+-# 0":
        spec.flags += template[index]
        index += 1
    index = _parse_number(template, index, args, spec, "width")
    if template.startswith(".", index):
        spec.prec = 0
        index = _parse_number(template, index + 1, args, spec, "prec")
    if index < len(template):
        spec.verb = template[index]
        index += 1
    return spec, index


def _parse_number(template: str, index: int, args: Sequence[object], spec: _Spec, name: str) -> int:
    """Read the width or precision (`name`) at `index` into `spec`: `*` takes the next operand,
    digits are the number itself, nothing leaves it unset. Returns the index after it."""
    bad = "%!(BADWIDTH)" if name == "width" else "%!(BADPREC)"
    if template.startswith("*", index):
        star = args[spec.used] if spec.used < len(args) else None
        spec.used += 1
        if isinstance(star, int) and not isinstance(star, bool) and abs(star) <= MAX_WIDTH:
            if name == "width" and star < 0:
                spec.flags, star = spec.flags + "-", -star
            spec.set_number(name, star if star >= 0 else None)
        else:
            spec.bad = bad
        return index + 1
    start = index
    while index < len(template) and template[index].isdigit():
        index += 1
    if index > start:
        number = int(template[start:index][:8])
        if number > MAX_WIDTH:
            spec.bad = bad
        else:
            spec.set_number(name, number)
    return index


def format_verb(arg: object, verb: str, spec: _Spec) -> str:
    """Format one operand for one verb, Go style (slices and maps element by element)."""
    if verb == "T":
        return _pad(go_type(arg), spec)
    if isinstance(arg, (list, tuple)) and (verb != "v" or spec.flags):
        return "[" + " ".join(format_verb(item, verb, spec) for item in arg) + "]"
    if isinstance(arg, Mapping) and verb != "v":
        keys = sorted_keys(arg)
        return "map[" + " ".join(f"{format_verb(k, verb, spec)}:{format_verb(arg[k], verb, spec)}" for k in keys) + "]"
    text = _format_scalar(arg, verb, spec)
    if text is None:
        return f"%!{verb}({go_type(arg)}={format_value(arg)})" if arg is not None else f"%!{verb}(<nil>)"
    return text


def _format_scalar(arg: object, verb: str, spec: _Spec) -> str | None:
    """`arg` printed for `verb`, or None when Go would print %!verb(type=value)."""
    integer = arg if isinstance(arg, int) and not isinstance(arg, bool) else None
    if verb == "v" and not isinstance(arg, float):
        return _pad(format_value(arg), spec, numeric=integer is not None)
    if isinstance(arg, str):
        return _format_string(arg, verb, spec)
    if integer is not None:
        return _format_integer(integer, verb, spec)
    if verb == "t" and isinstance(arg, bool):
        return _pad(format_value(arg), spec)
    if verb in "veEfFgG" and isinstance(arg, float):
        return _format_float(arg, verb, spec)
    return None


def _format_string(arg: str, verb: str, spec: _Spec) -> str | None:
    if verb == "s":
        return _pad(arg if spec.prec is None else arg[: spec.prec], spec)
    if verb == "q":
        return _pad(go_quote(arg), spec)
    if verb in "xX":
        sep = " " if " " in spec.flags else ""
        text = sep.join(f"{b:02x}" for b in arg.encode("utf-8", "surrogatepass"))
        return _pad(text.upper() if verb == "X" else text, spec)
    return None


def _format_integer(integer: int, verb: str, spec: _Spec) -> str | None:
    if verb == "q" and 0 <= integer <= 0x10FFFF:
        return _pad(go_quote(chr(integer), "'"), spec)
    if verb == "c" and 0 <= integer <= 0x10FFFF:
        return _pad(chr(integer), spec)
    if verb == "U" and integer >= 0:
        return _pad(f"U+{integer:04X}", spec)
    if verb in "dboxXO":
        return _format_in_base(integer, verb, spec)
    return None


def _format_in_base(integer: int, verb: str, spec: _Spec) -> str:
    """%d, %b, %o, %O, %x, %X of an integer: precision pads the digits, '#' adds Go's prefix."""
    flags, prec = spec.flags, spec.prec
    base = {"d": "d", "b": "b", "o": "o", "O": "o", "x": "x", "X": "X"}[verb]
    digits = format(abs(integer), base)
    if prec is not None:
        digits = digits.rjust(prec, "0")
    prefix = {"b": "0b", "o": "0", "x": "0x", "X": "0X"}.get(verb, "") if "#" in flags else ""
    prefix = "0o" if verb == "O" else prefix
    sign = "-" if integer < 0 else "+" if "+" in flags else " " if " " in flags else ""
    return _pad(digits, spec, numeric=True, sign=sign + prefix)


def _format_float(value: float, verb: str, spec: _Spec) -> str:
    flags, prec = spec.flags, spec.prec
    sign = "-" if math.copysign(1, value) < 0 else "+" if "+" in flags else " " if " " in flags else ""
    magnitude = abs(value)
    if math.isnan(value):
        return _pad("NaN", spec, sign="+" if "+" in flags else " " if " " in flags else "")
    if math.isinf(value):
        return _pad("Inf", spec, sign=sign or "+")
    if verb == "v" or (verb in "gG" and prec is None):
        text = format_float_shortest(magnitude)
        return _pad(text.upper() if verb == "G" else text, spec, numeric=True, sign=sign)
    python_verb = "f" if verb == "F" else verb
    text = format(magnitude, f".{6 if prec is None else prec}{python_verb}")
    return _pad(text, spec, numeric=True, sign=sign)


def _pad(text: str, spec: _Spec, numeric: bool = False, sign: str = "") -> str:
    width, flags = spec.width or 0, spec.flags
    body_width = width - len(sign)
    if "-" in flags:
        return (sign + text).ljust(width)
    if "0" in flags and numeric:
        return sign + text.rjust(body_width, "0")
    return (sign + text).rjust(width)
