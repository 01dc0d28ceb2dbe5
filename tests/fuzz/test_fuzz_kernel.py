"""Fuzz the kernel source: osrelease, kernel config (plain and /proc/config.gz), module lists,
SELinux and KVM."""

from __future__ import annotations

import gzip
import re

from hypothesis import given
from hypothesis import strategies as st

from agent.sources import kernel
from agent.sources.kernel import parse_builtin, parse_kconfig, parse_modules, version_attributes
from tests.fuzz.hosttree import JUNK_BYTES, ODD_DIGITS, fuzz, host_tree, merge, slot, value_bytes
from tests.fuzz.properties import check_source

RELEASES = ["6.8.0-45-generic", "5.10.104-tegra", "4.9", "6", "6.1.0+", "6.1.0-rpi7-rpi-v8", "-", "..",
            "../../../etc", "a" * 300, "6.1 0", "\u0661.\u0662", "5.15.0_custom~1", "x" * 200] + ODD_DIGITS
RELEASE = st.one_of(st.sampled_from(RELEASES), st.text(max_size=30))

OPTION = st.sampled_from(["NO_HZ", "NO_HZ_IDLE", "NO_HZ_FULL", "PREEMPT", "PREEMPT_RT", "X86", "GCC_VERSION"])
OPT_VALUE = st.one_of(st.sampled_from(["y", "m", "n", '"4.9"', '""', '"a b"', "120200", '"\u00e9"', "y y"]),
                      st.text(max_size=12).filter(lambda s: "\n" not in s and "\r" not in s))
KCONFIG_LINE = st.one_of(
    st.tuples(OPTION, OPT_VALUE).map(lambda t: f"CONFIG_{t[0]}={t[1]}"),
    OPTION.map(lambda o: f"# CONFIG_{o} is not set"),
    st.just("CONFIG_="), st.just("CONFIG_X"), st.text(max_size=30),
)
KCONFIG_TEXT = st.lists(KCONFIG_LINE, max_size=15).map("\n".join)
KCONFIG = st.one_of(KCONFIG_TEXT.map(str.encode), JUNK_BYTES, st.binary(max_size=60),
                    KCONFIG_TEXT.map(lambda t: t.encode() + b"\x00"))
CONFIG_GZ = st.one_of(
    KCONFIG_TEXT.map(lambda t: gzip.compress(t.encode(), mtime=0)),
    KCONFIG_TEXT.map(lambda t: gzip.compress(t.encode(), mtime=0)[:-5]),          # truncated
    st.binary(max_size=60).map(lambda b: b"\x1f\x8b\x08\x00" + b),                  # corrupt
    KCONFIG_TEXT.map(str.encode),                                                  # not gzip at all
    st.just(gzip.compress(b"CONFIG_A=y\n" * 900000, mtime=0)),                     # inflates past the limit
    st.just(gzip.compress(b"\xff\xfe", mtime=0)),
)
MODULE_LINE = st.one_of(
    st.sampled_from(["nvidia 56807424 0 - Live 0x0", "apex 28672 0 - Live 0x0", "gasket 110592 1 apex, Live 0x0",
                     "   ", "bad$name 1 0", "\u00e9t\u00e9 1 0", "x"]),
    st.text(max_size=30).filter(lambda s: "\n" not in s),
)
MODULES = st.one_of(st.lists(MODULE_LINE, max_size=10).map(lambda ls: "\n".join(ls).encode()), JUNK_BYTES, st.binary(max_size=40))
BUILTIN = st.one_of(
    st.lists(st.sampled_from(["kernel/fs/ext4/ext4.ko", "kernel/drivers/nvme/host/nvme.ko", "x.ko", ".ko", "/", "a b.ko",
                              "kernel/\u00e9.ko"]), max_size=6).map(lambda ls: "\n".join(ls).encode()),
    JUNK_BYTES, st.binary(max_size=40))


@st.composite
def kernel_tree(draw) -> dict:
    release = draw(RELEASE)
    spec = draw(slot("/proc/sys/kernel/osrelease", value_bytes(st.just(release)), weight_file=10))
    safe = release if release and "/" not in release and "\x00" not in release and len(release.encode()) < 200 else "r"
    parts = [
        slot("/proc/config.gz", CONFIG_GZ, weight_file=3),
        slot(f"/boot/config-{safe}", KCONFIG),
        slot(f"/lib/modules/{safe}/modules.builtin", BUILTIN),
        slot("/proc/modules", MODULES),
        slot("/sys/fs/selinux/enforce", value_bytes(["1", "0", "10"])),
        slot("/sys/devices/virtual/misc/kvm", st.just(b"")),
    ]
    for part in parts:
        if draw(st.booleans()):
            spec = merge(spec, draw(part))
    return spec


CONFIGS = st.builds(kernel.Config,
                    config_opts=st.sampled_from([("NO_HZ", "NO_HZ_IDLE", "NO_HZ_FULL", "PREEMPT"), ("GCC_VERSION", "X86")]),
                    kconfig_file=st.sampled_from(["", "/boot/config-custom", "/proc/modules", "/etc/../../x", "/"]))


@fuzz(350)
@given(spec=kernel_tree(), config=CONFIGS)
def test_kernel_source_survives_any_tree(spec, config):
    with host_tree(spec) as root:
        # config option values and the release are host text: invalid ones are dropped by discovery
        result = check_source("kernel", root, config, strict=False)
    for key, value in result.labels.items():
        if key.endswith(("version.major", "version.minor", "version.revision")):
            assert value == "" or (value.isascii() and value.isdigit()), (key, value)


#: a Kconfig symbol as the kernel's .config writes it (scripts/kconfig: ``CONFIG_<symbol>=<value>``)
SYMBOL = re.compile(r"[A-Za-z0-9_]+")
#: config text whose lines do start with CONFIG_, well-formed or hostile, besides free text
HOSTILE_KCONFIG = st.lists(st.one_of(
    KCONFIG_LINE,
    st.sampled_from(["CONFIG_\u00e9=y", "CONFIG_\u0661=1", "CONFIG_A B=y", "CONFIG_A-B=y", "CONFIG_CONFIG_X=y",
                     "CONFIG_X==y", 'CONFIG_Q=""', "CONFIG_X=1", "CONFIG_X=2", "CONFIG_X=", " CONFIG_X=y"]),
), max_size=15).map("\n".join)


@fuzz(200)
@given(text=st.one_of(st.text(max_size=300), HOSTILE_KCONFIG))
def test_kernel_parsers_total(text):
    """The pure parsers accept any text and return only well-formed names."""
    options = parse_kconfig(text)
    lines = text.splitlines()
    for name, value in options.items():
        assert SYMBOL.fullmatch(name), name  # a symbol, not the text around one
        # the CONFIG_ prefix taken off once; the last line setting a symbol (to a non-empty
        # value) wins, quotes trimmed as NFD's parseKconfig trims them (source/kernel/kconfig.go:
        # strings.Trim(value, `"`))
        setting = [line for line in lines if line.startswith(f"CONFIG_{name}=") and line != f"CONFIG_{name}="][-1]
        assert value == setting.split("=", 1)[1].strip('"'), (name, value, setting)
    for line in lines:  # and no line that sets a symbol is lost
        symbol, eq, value = line.removeprefix("CONFIG_").partition("=")
        if line.startswith("CONFIG_") and eq and value and SYMBOL.fullmatch(symbol):
            assert symbol in options, line
    names, _rejected = parse_modules(text)
    assert all(n.isascii() and " " not in n for n in names)
    assert all(n.isascii() for n in parse_builtin(text))
    full = version_attributes(text)["full"]
    assert full == "" or full.isascii()


def test_hostile_lines_are_parsed_in_one_scan():
    """A module list or modules.builtin is host input of up to 8 MiB: a line of a million blanks
    before junk, or of 100,000 "/a" steps, is one line like any other (a pattern that backtracks
    into leading blanks would take hours here, and the suite's timeout would say so)."""
    for text in (" " * 1_000_000 + "x!", " " * 1_000_000 + "/x!", "x" + " " * 1_000_000 + "!", "/a" * 100_000 + "!",
                 "a" * 200_000 + "!", " \t" * 100_000 + "x"):
        assert parse_builtin(text) <= {"x", "a"}
        names, rejected = parse_modules(text)
        assert len(names) + len(rejected) == 1
        assert parse_kconfig(text) == {}
