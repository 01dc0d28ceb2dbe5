"""local source: NFD feature files (features.d) read through the host seam."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import LOCAL_FEATURES_DIR, DiscoveryConfig, run_source
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import local
from tests.support.hostfiles import put

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
D = LOCAL_FEATURES_DIR


def feature_file(root: Path, name: str, content: str | bytes, directory: str = D) -> Path:
    return put(root, f"{directory}/{name}", content)


def run(root: Path, config: local.Config | None = None):
    return local.discover(HostFS(root), config or local.Config(), now=NOW)


def test_site_file_with_directives(tmp_path):
    feature_file(tmp_path, "site-info", "# written by the rack provisioning job\nrack=r12\n# +no-label\ninventory-id=inv-0042\n"
                                        "example.com/maintenance-window=sunday\ngpu-burned-in\n")
    result = run(tmp_path)
    assert result.errors == ()
    assert result.labels == {NFD_PREFIX + "rack": "r12", "example.com/maintenance-window": "sunday",
                             NFD_PREFIX + "gpu-burned-in": "true"}
    assert dict(result.features["label"].attributes) == {"rack": "r12", "example.com/maintenance-window": "sunday",
                                                        "gpu-burned-in": "true"}
    assert dict(result.features["feature"].attributes) == {"rack": "r12", "inventory-id": "inv-0042",
                                                          "example.com/maintenance-window": "sunday",
                                                          "gpu-burned-in": "true"}
    assert result.label_origins[NFD_PREFIX + "rack"] == f"{D}/site-info"


def test_no_feature_applies_to_next_line_only(tmp_path):
    feature_file(tmp_path, "f", "# +no-feature\nlabel-only=1\nboth=2\n")
    result = run(tmp_path)
    assert dict(result.features["feature"].attributes) == {"both": "2"}
    assert dict(result.features["label"].attributes) == {"label-only": "1", "both": "2"}


def test_expiry_until_next_directive(tmp_path):
    feature_file(tmp_path, "f", "# +expiry-time=2025-01-01T00:00:00Z\nold=1\nalso-old\n"
                                "# +expiry-time=2030-01-01T00:00:00+02:00\nfresh=1\n")
    result = run(tmp_path)
    assert result.errors == ()
    assert result.labels == {NFD_PREFIX + "fresh": "1"}


def test_unknown_directive_is_reported_and_file_continues(tmp_path):
    feature_file(tmp_path, "f", "# +frobnicate\nok=1\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "ok": "1"}
    assert [(e.path, "unknown directive" in e.message) for e in result.errors] == [(f"{D}/f:1", True)]


def test_bad_expiry_time(tmp_path):
    feature_file(tmp_path, "f", "# +expiry-time=next tuesday\nok=1\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "ok": "1"}
    assert result.errors[0].path == f"{D}/f:1" and "expiry-time" in result.errors[0].message


def test_later_file_wins(tmp_path):
    feature_file(tmp_path, "10-defaults", "zone=a\nkeep=x\n")
    feature_file(tmp_path, "20-override", "zone=b\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "zone": "b", NFD_PREFIX + "keep": "x"}
    assert result.label_origins[NFD_PREFIX + "zone"] == f"{D}/20-override"


def test_hidden_and_directories_skipped(tmp_path):
    feature_file(tmp_path, ".hidden", "secret=1\n")
    (tmp_path / D.lstrip("/") / "subdir").mkdir()
    feature_file(tmp_path, "visible", "shown=1\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "shown": "1"} and result.errors == ()


def test_configmap_style_symlinks_are_followed(tmp_path):
    feature_file(tmp_path, "features", "from-configmap=yes\n", directory=f"{D}/..2025_06_01_12_00_00.1")
    base = tmp_path / D.lstrip("/")
    os.symlink("..2025_06_01_12_00_00.1", base / "..data")
    os.symlink("..data/features", base / "features")
    assert run(tmp_path).labels == {NFD_PREFIX + "from-configmap": "yes"}


def test_missing_directory(tmp_path):
    result = run(tmp_path)
    assert result.labels == {} and result.features == {} and result.errors == ()


def test_custom_directory(tmp_path):
    feature_file(tmp_path, "x", "custom=1\n", directory="/opt/features")
    assert run(tmp_path, local.Config(features_dir="/opt/features")).labels == {NFD_PREFIX + "custom": "1"}


# -- hostile input -------------------------------------------------------------------------------
def test_file_over_64k_is_skipped(tmp_path):
    feature_file(tmp_path, "big", "a=1\n" + "#" * 70000 + "\n")
    feature_file(tmp_path, "small", "b=2\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "b": "2"}
    assert result.errors[0].path == f"{D}/big" and "larger than 65536" in result.errors[0].message


def test_binary_junk_is_skipped(tmp_path):
    feature_file(tmp_path, "core.1234", b"\x7fELF\x02\x01\x01\x00\x00\x00junk=1\n")
    result = run(tmp_path)
    assert result.labels == {} and "binary" in result.errors[0].message


def test_invalid_utf8_is_skipped(tmp_path):
    feature_file(tmp_path, "latin1", "caf\xe9=1\n".encode("latin-1"))
    assert "not UTF-8" in run(tmp_path).errors[0].message


@pytest.mark.parametrize("line, why", [
    ("bad key=1", "key"),
    ("ok=value with spaces", "value"),
    ("ok=" + "v" * 64, "value"),
    ("Example.COM/x/y=1", "key"),
    ("=novalue", "key"),
])
def test_invalid_label_lines_reported_with_line_number(tmp_path, line, why):
    feature_file(tmp_path, "f", f"good=1\n{line}\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "good": "1"}
    assert result.errors[0].path == f"{D}/f:2" and "not a valid label" in result.errors[0].message


def test_no_label_line_may_carry_a_non_label_value(tmp_path):
    feature_file(tmp_path, "f", "# +no-label\ninventory-note=bought in 2023, rack 12\n")
    result = run(tmp_path)
    assert result.errors == () and result.labels == {}
    assert result.features["feature"].attributes["inventory-note"] == "bought in 2023, rack 12"


@pytest.mark.parametrize("text, parsed", [
    ("2025-01-01T00:00:00Z", datetime(2025, 1, 1, tzinfo=UTC)),
    ("2025-01-01t10:00:00.123456789+02:00", datetime(2025, 1, 1, 8, 0, 0, 123456, tzinfo=UTC)),
])
def test_rfc3339(text, parsed):
    assert local.parse_rfc3339(text) == parsed


@pytest.mark.parametrize("text", ["2025-01-01", "2025-01-01 00:00:00Z", "2025-01-01T00:00:00", "2025-13-01T00:00:00Z"])
def test_not_rfc3339(text):
    with pytest.raises(ValueError):
        local.parse_rfc3339(text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(
    st.sampled_from(["# +no-label", "# +no-feature", "# +expiry-time=2020-01-01T00:00:00Z", "# comment", "",
                     "# +expiry-time=2099-01-01T00:00:00Z", "# +bogus"]),
    st.builds(lambda k, v: f"{k}={v}", st.text(max_size=30), st.text(max_size=70)),
    st.text(max_size=80)), max_size=20))
def test_any_feature_file_never_crashes_and_labels_are_valid(tmp_path_factory, lines):
    root = tmp_path_factory.mktemp("local")
    feature_file(root, "f", "\n".join(lines).encode("utf-8", "surrogatepass"))
    result = run_source("local", HostFS(root), DiscoveryConfig())
    assert not [e for e in result.errors if "source failed" in e.message or "dropped" in e.message]
    for key, value in result.labels.items():
        assert not qualified_name_errors(key) and not label_value_errors(value)


# -- NFD's parseFeatureFile, line by line (source/local/local.go) --------------------------------
def test_no_label_deletes_the_earlier_label_of_the_same_file(tmp_path):
    """NFD ``delete(labels, key)``: the key stays a feature (new value), its label goes."""
    feature_file(tmp_path, "f", "foo=bar\n# +no-label\nfoo=baz\n")
    result = run(tmp_path)
    assert result.labels == {} and dict(result.features["feature"].attributes) == {"foo": "baz"}


def test_no_feature_deletes_the_earlier_feature_of_the_same_file(tmp_path):
    feature_file(tmp_path, "f", "foo=bar\n# +no-feature\nfoo=baz\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "foo": "baz"} and "feature" not in result.features


def test_no_label_does_not_reach_into_an_earlier_file(tmp_path):
    """Files are parsed apart and merged by adding: only a later *value* overrides."""
    feature_file(tmp_path, "10-a", "foo=bar\n")
    feature_file(tmp_path, "20-b", "# +no-label\nfoo=baz\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "foo": "bar"}
    assert dict(result.features["feature"].attributes) == {"foo": "baz"}


def test_a_directive_above_an_expired_line_carries_to_the_next_live_line(tmp_path):
    """NFD skips an expired line before resetting the one-line directives."""
    feature_file(tmp_path, "f", "# +expiry-time=2020-01-01T00:00:00Z\n# +no-label\nold=1\n"
                                "# +expiry-time=2099-01-01T00:00:00Z\nnew=1\nlater=1\n")
    result = run(tmp_path)
    assert result.labels == {NFD_PREFIX + "later": "1"}
    assert dict(result.features["feature"].attributes) == {"new": "1", "later": "1"}


def test_a_line_whose_label_would_be_invalid_keeps_its_feature(tmp_path):
    feature_file(tmp_path, "f", "ok=value with spaces\n")
    result = run(tmp_path)
    assert result.labels == {} and dict(result.features["feature"].attributes) == {"ok": "value with spaces"}
    assert [e.path for e in result.errors] == [f"{D}/f:1"]
