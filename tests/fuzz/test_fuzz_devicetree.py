"""Fuzz the devicetree source: NUL-separated ``compatible`` lists, ``model`` with its trailing
NUL, binary junk, oversized properties, extra-node searches over generated trees."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agent.sources import devicetree
from agent.sources.devicetree import split_string_list
from tests.fuzz.hosttree import JUNK_BYTES, fuzz, host_tree, merge, slot
from tests.fuzz.properties import check_source

BASE = "/sys/firmware/devicetree/base"
COMPATIBLES = ["fsl,imx8mq-phanbell", "fsl,imx8mq", "raspberrypi,4-model-b", "brcm,bcm2711", "nvidia,p3450-0000",
               "nvidia,tegra210", "a", "UPPER,Case", "with space", "-lead", "trail-", "x" * 70, "a/b", "é,x",
               "simple-bus", "gpu", ",", "a,,b"]
STRING = st.one_of(st.sampled_from(COMPATIBLES), st.text(max_size=20))
STRING_LIST = st.one_of(
    st.lists(STRING, max_size=5).map(lambda ss: b"".join(s.encode("utf-8", "surrogatepass") + b"\0" for s in ss)),
    st.lists(STRING, min_size=1, max_size=3).map(lambda ss: b"\0".join(s.encode("utf-8", "surrogatepass") for s in ss)),
    st.lists(st.one_of(st.binary(max_size=10), STRING.map(str.encode)), max_size=4).map(lambda bs: b"\0".join(bs) + b"\0"),
    JUNK_BYTES, st.binary(max_size=50), st.just(b"\0\0\0"), st.just(b"x" * 5000 + b"\0"), st.just(b"a\0" * 2049),
)
MODEL = st.one_of(st.sampled_from([b"Raspberry Pi 4 Model B Rev 1.4\0", b"NVIDIA Jetson Nano Developer Kit\0",
                                   b"Freescale i.MX8MQ Phanbell\0", b"two\0strings\0", b"no nul"]), STRING_LIST)
NODE_NAMES = ["gpu@57000000", "gpu", "pwm-fan", "soc", "soc/gpu@1", "apex@0", "x y"]


@st.composite
def dt_tree(draw) -> dict:
    base = draw(st.sampled_from([BASE, BASE, "/proc/device-tree"]))
    spec = merge(draw(slot(f"{base}/compatible", STRING_LIST, weight_file=10)),
                 draw(slot(f"{base}/model", MODEL)), draw(slot(f"{base}/serial-number", MODEL)))
    for node in draw(st.lists(st.sampled_from(NODE_NAMES), unique=True, max_size=3)):
        spec = merge(spec, draw(slot(f"{base}/{node}/compatible", STRING_LIST)), draw(slot(f"{base}/{node}/status", MODEL)))
        if draw(st.booleans()):
            spec[f"{base}/{node}/loop"] = ("link", "..")          # a node linking back up the tree
    return spec


CONFIGS = st.builds(devicetree.Config, extra_nodes=st.lists(
    st.sampled_from(["gpu", "/soc/gpu@1", "pwm-fan", "/", "//", "missing", "loop", "/x y"]), max_size=3).map(tuple))


@fuzz(350)
@given(spec=dt_tree(), config=CONFIGS)
def test_devicetree_source_survives_any_tree(spec, config):
    with host_tree(spec) as root:
        result = check_source("devicetree", root, config)
    for key, value in result.labels.items():
        assert key.startswith("beta.devicetree.org/") and value == "1"
    compatible = result.features.get("compatible")
    for flag in (compatible.flags if compatible else ()):
        assert flag and flag.isprintable() and not any(c.isspace() for c in flag)


@fuzz(300)
@given(data=st.binary(max_size=200))
def test_split_string_list_total(data):
    """Any bytes split into printable, non-empty strings; every oddity is named as a problem."""
    strings, problems = split_string_list(data)
    assert all(s and s.isprintable() for s in strings)
    if data and not data.endswith(b"\0"):
        assert "not NUL-terminated" in problems
    assert all(isinstance(p, str) and p for p in problems)
