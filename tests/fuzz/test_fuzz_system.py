"""Fuzz the system source: /etc/os-release and /usr/lib/os-release, DMI attributes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.sources.system import DMI_ATTRIBUTES, DMI_DIR, parse_os_release
from tests.fuzz.hosttree import JUNK_BYTES, ODD_DIGITS, fuzz, host_tree, huge, merge, slot, slots, value_bytes
from tests.fuzz.properties import check_source

KEYS = ["ID", "VERSION_ID", "NAME", "PRETTY_NAME", "ID_LIKE", "VERSION_CODENAME", "X", "id", "ÄÖ", "BAD KEY", ""]
VALUES = ["ubuntu", "22.04", '"22.04"', "'12'", '"rhel fedora"', "3.19.1", "1.2.3.4", "v1", '"', "''",
          "\"a\"b\"", "=", "a" * 80, "10.", ".5"] + ODD_DIGITS
LINE = st.one_of(
    st.tuples(st.sampled_from(KEYS), st.sampled_from(["=", " = ", "=="]), st.one_of(st.sampled_from(VALUES), st.text(max_size=15)))
    .map("".join),
    st.sampled_from(["# comment", "", "   ", "export ID=x", "ID"]),
    st.text(max_size=25),
)
OS_RELEASE = st.one_of(
    st.lists(LINE, max_size=10).map(lambda ls: "\n".join(ls).encode()),
    st.lists(LINE, max_size=6).map(lambda ls: "\r\n".join(ls).encode()),
    st.tuples(st.lists(LINE, max_size=4), JUNK_BYTES).map(lambda t: "\n".join(t[0]).encode() + t[1]),
    JUNK_BYTES, st.binary(max_size=60), huge(b"ID=ubuntu\n"),
)
DMI = slots({f"{DMI_DIR}/{attr}": value_bytes(["Dell Inc.", "PowerEdge R750", "1", "\u00e9", "To Be Filled By O.E.M."])
             for attr in DMI_ATTRIBUTES[:6]})


@st.composite
def system_tree(draw) -> dict:
    spec = draw(slot("/etc/os-release", OS_RELEASE, weight_file=10))
    if draw(st.booleans()):
        spec = merge(spec, draw(slot("/usr/lib/os-release", OS_RELEASE)))
    if draw(st.booleans()):
        spec = merge(spec, draw(DMI))
    return spec


@fuzz(350)
@given(spec=system_tree())
def test_system_source_survives_any_tree(spec):
    with host_tree(spec) as root:
        # os-release values are host text: invalid ones (spaces, quotes) are dropped by discovery
        result = check_source("system", root, strict=False)
    for key, value in result.labels.items():
        assert key.startswith("feature.node.kubernetes.io/system-os_release.")
        if key.endswith((".major", ".minor")):
            assert value.isdigit()


@fuzz(200)
@given(text=st.text(max_size=300))
def test_parse_os_release_total(text):
    release = parse_os_release(text)
    for key, value in release.items():
        assert key and "=" not in key and "\n" not in value
