"""Quantities are compared by value: the server answers "1k" to our "1000"."""

from fractions import Fraction

import pytest

from agent.reconcile.quantity import canonical_count, parse_quantity, same_quantity


@pytest.mark.parametrize("text,value", [
    ("4", 4), ("1k", 1000), ("1Ki", 1024), ("2Mi", 2 * 1024**2), ("500m", Fraction(1, 2)),
    ("1e3", 1000), ("0", 0), (7, 7), ("+3", 3), ("1.5", Fraction(3, 2)),
])
def test_parse(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("junk", ["", "abc", "1 k", "k", None, True, "1Kb"])
def test_junk_is_not_a_quantity(junk):
    assert parse_quantity(junk) is None


def test_same_quantity_across_spellings():
    assert same_quantity("1k", "1000")
    assert not same_quantity("0", "4")
    assert not same_quantity(None, "4")


def test_canonical_count():
    assert canonical_count("+04") == "4"
    assert canonical_count("1k") == "1000"
    assert canonical_count("1500m") is None
    assert canonical_count("-1") is None


def test_hostile_quantities_from_the_node_are_rejected_fast():
    """A capacity value is Node data anyone with node credentials can write: parsing it must stay cheap."""
    from agent.reconcile.quantity import parse_quantity

    for text in ("1e10000000", "1E-10000000", "9" * 5000, "1" + "0" * 100000 + "k", "1e65", "1.5e99999999999"):
        assert parse_quantity(text) is None, text[:20]
    assert parse_quantity("1e18") == 10 ** 18 and parse_quantity("2Ei") == 2 * 1024 ** 6
