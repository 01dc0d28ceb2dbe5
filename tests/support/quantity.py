"""Kubernetes resource quantities as the API server stores them (canonical form).

The server never keeps what the client spelled: ``"1000"`` comes back as ``"1k"``,
``"2000m"`` as ``"2"``, ``"1024Mi"`` as ``"1Gi"``. Written independently of the agent's own
quantity code so tests do not check the agent against itself.
"""

from __future__ import annotations

import re
from fractions import Fraction

_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BINARY = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_DECIMAL = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_DEC_EXP = {v: k for k, v in _DECIMAL.items() if v}


class QuantityError(ValueError):
    """Not a quantity (the real server refuses the body with 400 when decoding)."""


def parse(text: object) -> tuple[Fraction, str]:
    """(exact value, format) where format is ``binary``, ``decimal`` or ``exponent``."""
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise QuantityError(f"quantities must match the regular expression: {text!r}")
    if isinstance(text, (int, float)):
        return Fraction(text), "decimal"
    match = _RE.match(text.strip())
    if not match or text != text.strip():
        raise QuantityError("quantities must match the regular expression "
                            "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    number, suffix = Fraction(match.group(1)), match.group(2) or ""
    if suffix in _BINARY[1:]:
        return number * 1024 ** _BINARY.index(suffix), "binary"
    if suffix in _DEC_EXP:
        return number * Fraction(10) ** _DEC_EXP[suffix], "decimal"
    if suffix:
        return number * Fraction(10) ** int(suffix[1:]), "exponent"
    return number, "decimal"


def _decimal(value: Fraction, exponent_style: bool) -> str:
    sign = "-" if value < 0 else ""
    value = abs(value)
    if value == 0:
        return "0"
    if value.denominator != 1:  # fractional: milli, micro, nano (rounded up at nano)
        for exp in (-3, -6, -9):
            scaled = value * Fraction(10) ** -exp
            if scaled.denominator == 1 or exp == -9:
                mant = -(-scaled.numerator // scaled.denominator)
                return f"{sign}{mant}{'e' + str(exp) if exponent_style else _DECIMAL[exp]}"
    n = value.numerator
    exp = 0
    while exp < 18 and n % 1000 == 0:
        n //= 1000
        exp += 3
    if exponent_style:
        return f"{sign}{n}e{exp}" if exp else f"{sign}{n}"
    return f"{sign}{n}{_DECIMAL[exp]}"


def canonical(text: object) -> str:
    """The string the API server would store for ``text``."""
    value, fmt = parse(text)
    if fmt == "binary" and value.denominator == 1 and value != 0:
        n, power = abs(value.numerator), 0
        while power < 6 and n % 1024 == 0:
            n //= 1024
            power += 1
        if power:
            return f"{'-' if value < 0 else ''}{n}{_BINARY[power]}"
        return f"{'-' if value < 0 else ''}{n}"
    return _decimal(value, fmt == "exponent")
