"""Compare Kubernetes resource quantities by value, not spelling.

The API server stores quantities in canonical form: we send ``"1000"`` and read back ``"1k"``.
Comparing strings would make every reconcile look like a change, so the diff compares
``parse_quantity`` values (exact fractions) instead.
"""

from __future__ import annotations

import re
from fractions import Fraction

from agent.k8s_validation import QUANTITY_MAX_CHARS

_QUANTITY_RE = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_BINARY = {"Ki": 1024, "Mi": 1024**2, "Gi": 1024**3, "Ti": 1024**4, "Pi": 1024**5, "Ei": 1024**6}
#: bounds that keep a hostile value from the Node cheap to reject: ``1e10000000`` would
#: otherwise build a ten-million-digit integer. Kubernetes itself caps quantities at
#: int64 scale (about 9.2e18), far inside these.
MAX_QUANTITY_CHARS = QUANTITY_MAX_CHARS
MAX_EXPONENT = 64
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


def parse_quantity(text: object) -> Fraction | None:
    """The exact value of a quantity string (or int), ``None`` when it is not one."""
    if isinstance(text, bool):
        return None
    if isinstance(text, int):
        return Fraction(text)
    if not isinstance(text, str) or len(text) > MAX_QUANTITY_CHARS:
        return None
    match = _QUANTITY_RE.fullmatch(text.strip())
    if not match:
        return None
    number, suffix = match.group(1), match.group(2) or ""
    value = Fraction(number)
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _DECIMAL:
        return value * (Fraction(10) ** _DECIMAL[suffix])
    if suffix:
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            return None
        return value * (Fraction(10) ** exponent)
    return value


def same_quantity(live: object, wanted: str) -> bool:
    """True when ``live`` (as stored) equals ``wanted`` (as we would send it)."""
    a, b = parse_quantity(live), parse_quantity(wanted)
    return a is not None and a == b


def canonical_count(quantity: str) -> str | None:
    """A whole, non-negative count as a plain decimal string (what we send); ``None`` if
    ``quantity`` is not one."""
    value = parse_quantity(quantity)
    if value is None or value < 0 or value.denominator != 1:
        return None
    return str(value.numerator)
