"""Fuzz the local source: NFD feature files in features.d (keys, values, directives, expiry
times, binary junk, invalid keys, oversized files, non-regular entries)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from agent.discovery import LOCAL_FEATURES_DIR
from agent.sources.local import MAX_FEATURE_FILE_SIZE, parse_feature_file, parse_rfc3339
from tests.fuzz.hosttree import JUNK_BYTES, fuzz, host_tree, slot
from tests.fuzz.properties import check_source

KEYS = ["gpu", "vendor.io/accel", "example.com/a.b-c_d", "feature.node.kubernetes.io/x", "UPPER.io/x", "a/b/c", "/x",
        "x/", "-bad", "bad-", "a" * 64, "sp ace", "é", "tab\there", "k8s.io/" + "n" * 63, "a.b/" + "c" * 64, ""]
VALUES = ["", "true", "false", "1.2.3", "v" * 64, "has space", "-x", "x-", "é", "a=b", "ok_value"]
EXPIRY = ["2999-01-01T00:00:00Z", "2000-01-01T00:00:00Z", "2999-01-01T00:00:00.123456789+05:30", "2999-13-01T00:00:00Z",
          "0000-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "2999-01-01", "garbage",
          "2999-01-01t00:00:00z", "2999-02-30T00:00:00Z", "2999-01-01T24:00:00Z", "2999-01-01T00:00:00+24:00"]
LINE = st.one_of(
    st.tuples(st.sampled_from(KEYS), st.sampled_from(["=", ""]), st.sampled_from(VALUES)).map("".join),
    st.sampled_from(["# +no-label", "# +no-feature", "# +unknown", "# plain comment", "#", "# +expiry-time", "", "   ", "="]),
    st.sampled_from(EXPIRY).map(lambda t: f"# +expiry-time={t}"),
    st.text(max_size=30),
)
FILE = st.one_of(
    st.lists(LINE, max_size=12).map(lambda ls: "\n".join(ls).encode("utf-8", "surrogatepass")),
    st.lists(LINE, max_size=6).map(lambda ls: "\r\n".join(ls).encode("utf-8", "surrogatepass")),
    JUNK_BYTES, st.binary(max_size=60),
    st.just(b"gpu=true\n" * (MAX_FEATURE_FILE_SIZE // 9 + 1)), st.just(b"k=" + b"v" * (MAX_FEATURE_FILE_SIZE - 3)),
)
NAMES = ["10-gpu", "20-accel", ".hidden", "zz", "with space", "\u00e9", "a.conf"]


@st.composite
def local_tree(draw) -> dict:
    spec: dict = {}
    for name in draw(st.lists(st.sampled_from(NAMES), unique=True, max_size=4)):
        spec.update(draw(slot(f"{LOCAL_FEATURES_DIR}/{name}", FILE, weight_file=10)))
    if draw(st.integers(0, 9)) == 0:
        spec[LOCAL_FEATURES_DIR] = draw(st.sampled_from([("file", b"gpu=true\n"), ("link", "features.d"), ("link", "/nowhere")]))
    return spec


@fuzz(400)
@given(spec=local_tree())
def test_local_source_survives_any_tree(spec):
    with host_tree(spec) as root:
        result = check_source("local", root)
    label = result.features.get("label")
    assert set(result.labels) == {k if "/" in k else "feature.node.kubernetes.io/" + k
                                  for k in (label.attributes if label else {})}


NOW = datetime(2030, 6, 1, tzinfo=UTC)


@fuzz(300)
@given(text=st.lists(LINE, max_size=15).map("\n".join))
def test_parse_feature_file_total(text):
    """Every line is either kept (valid label), reported with its line number, or a comment."""
    parsed = parse_feature_file(text, NOW)
    lines = text.splitlines()
    for number, message in parsed.problems:
        assert 1 <= number <= len(lines) and message
    for key in parsed.labels:
        assert any(line.strip().startswith(key) for line in lines)


@fuzz(200)
@given(text=st.one_of(st.sampled_from(EXPIRY), st.text(max_size=40)))
def test_parse_rfc3339_raises_only_valueerror(text):
    try:
        parsed = parse_rfc3339(text)
    except ValueError:
        return
    assert parsed.tzinfo is not None
    _ = parsed < NOW  # comparing with an aware "now" must not overflow
