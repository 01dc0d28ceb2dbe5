"""kernel source: version sanitising, kconfig search order, modules, SELinux, KVM."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.discovery import DiscoveryConfig, run_source
from agent.features import NFD_PREFIX
from agent.hostfs import HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources import kernel
from tests.support.hostfiles import put

P = NFD_PREFIX + "kernel-"
RELEASE = "5.15.0-91-generic"

# Excerpt of Ubuntu 22.04's /boot/config-5.15.0-91-generic
UBUNTU_CONFIG = """#
# Automatically generated file; DO NOT EDIT.
# Linux/x86 5.15.0-91-generic Kernel Configuration
#
CONFIG_CC_VERSION_TEXT="x86_64-linux-gnu-gcc-11 (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0"
CONFIG_TICK_ONESHOT=y
CONFIG_NO_HZ_COMMON=y
# CONFIG_HZ_PERIODIC is not set
# CONFIG_NO_HZ_IDLE is not set
CONFIG_NO_HZ_FULL=y
CONFIG_NO_HZ=y
# CONFIG_PREEMPT_NONE is not set
CONFIG_PREEMPT_VOLUNTARY=y
# CONFIG_PREEMPT is not set
CONFIG_HZ=250
CONFIG_KVM=m
CONFIG_LOCALVERSION=""
"""

# Excerpt of a real /proc/modules (name size refcount deps state offset)
PROC_MODULES = """apex 24576 0 - Live 0x0000000000000000
gasket 110592 1 apex, Live 0x0000000000000000
kvm_intel 372736 0 - Live 0x0000000000000000
kvm 1032192 1 kvm_intel, Live 0x0000000000000000
nvme 49152 2 - Live 0x0000000000000000
"""

MODULES_BUILTIN = """kernel/drivers/usb/host/xhci-pci.ko
kernel/drivers/ata/ahci.ko
kernel/fs/ext4/ext4.ko
"""


def host_with(tmp_path: Path, release: str = RELEASE) -> Path:
    put(tmp_path, "/proc/sys/kernel/osrelease", release + "\n")
    return tmp_path


def run(root: Path, config: kernel.Config | None = None):
    return kernel.discover(HostFS(root), config or kernel.Config())


@pytest.mark.parametrize("release, expected", [
    ("5.15.0-91-generic", {"full": "5.15.0-91-generic", "major": "5", "minor": "15", "revision": "0"}),
    ("6.0.10-100+123.x86_64~", {"full": "6.0.10-100_123.x86_64", "major": "6", "minor": "0", "revision": "10"}),
    ("6.8", {"full": "6.8", "major": "6", "minor": "8", "revision": ""}),
    ("6.6.31+rpt-rpi-v8", {"full": "6.6.31_rpt-rpi-v8"}),  # `_` after the revision: regex does not match
    ("4.14.98-imx", {"full": "4.14.98-imx", "major": "4", "minor": "14", "revision": "98"}),
])
def test_version_like_nfd(tmp_path, release, expected):
    result = run(host_with(tmp_path, release))
    assert dict(result.features["version"].attributes) == expected
    assert {k: v for k, v in result.labels.items() if "version" in k} == {P + f"version.{k}": v for k, v in expected.items()}


def test_ubuntu_host(tmp_path):
    root = host_with(tmp_path)
    put(root, f"/boot/config-{RELEASE}", UBUNTU_CONFIG)
    put(root, "/proc/modules", PROC_MODULES)
    put(root, f"/lib/modules/{RELEASE}/modules.builtin", MODULES_BUILTIN)
    put(root, "/sys/devices/virtual/misc/kvm/dev", "10:232\n")

    result = run(root)

    assert result.errors == ()
    assert result.labels == {
        P + "version.full": RELEASE, P + "version.major": "5", P + "version.minor": "15", P + "version.revision": "0",
        P + "config.NO_HZ": "true", P + "config.NO_HZ_FULL": "true",
    }
    config = result.features["config"].attributes
    assert config["HZ"] == "250" and config["KVM"] == "m" and config["LOCALVERSION"] == ""
    assert config["CC_VERSION_TEXT"].startswith("x86_64-linux-gnu-gcc-11 (")
    assert "PREEMPT" not in config and "NO_HZ_IDLE" not in config
    assert result.features["config"].origin == f"/boot/config-{RELEASE}"
    assert result.features["loadedmodule"].flags == {"apex", "gasket", "kvm_intel", "kvm", "nvme"}
    assert result.features["enabledmodule"].flags == {"apex", "gasket", "kvm_intel", "kvm", "nvme",
                                                      "xhci-pci", "ahci", "ext4"}
    assert dict(result.features["kvm"].attributes) == {"enabled": "true"}
    assert dict(result.features["selinux"].attributes) == {"enabled": "false"}


def test_config_opts_raw_value_and_m(tmp_path):
    root = host_with(tmp_path)
    put(root, f"/boot/config-{RELEASE}", UBUNTU_CONFIG)
    result = run(root, kernel.Config(config_opts=("HZ", "KVM", "PREEMPT")))
    assert {k: v for k, v in result.labels.items() if "config" in k} == {P + "config.HZ": "250", P + "config.KVM": "true"}


def test_proc_config_gz_wins_over_boot(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/config.gz", gzip.compress(b"CONFIG_PREEMPT=y\nCONFIG_NO_HZ_IDLE=y\n"))
    put(root, f"/boot/config-{RELEASE}", UBUNTU_CONFIG)
    result = run(root)
    assert result.features["config"].origin == "/proc/config.gz"
    assert {k: v for k, v in result.labels.items() if "config" in k} == {
        P + "config.PREEMPT": "true", P + "config.NO_HZ_IDLE": "true"}


def test_configured_file_comes_first(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/config.gz", gzip.compress(b"CONFIG_PREEMPT=y\n"))
    put(root, "/etc/my-kconfig", "CONFIG_NO_HZ=y\n")
    result = run(root, kernel.Config(kconfig_file="/etc/my-kconfig"))
    assert result.features["config"].origin == "/etc/my-kconfig"


def test_search_order_lib_modules_before_boot(tmp_path):
    root = host_with(tmp_path)
    put(root, f"/usr/lib/modules/{RELEASE}/config", "CONFIG_PREEMPT=y\n")
    put(root, f"/boot/config-{RELEASE}", UBUNTU_CONFIG)
    assert run(root).features["config"].origin == f"/usr/lib/modules/{RELEASE}/config"
    assert kernel.kconfig_candidates("6.1", "")[:3] == ["/proc/config.gz", "/usr/src/linux-6.1/.config",
                                                        "/usr/src/linux-rt-6.1/.config"]


def test_corrupt_config_gz_falls_through_with_error(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/config.gz", gzip.compress(b"CONFIG_PREEMPT=y\n" * 200)[:40])
    put(root, f"/boot/config-{RELEASE}", UBUNTU_CONFIG)
    result = run(root)
    assert result.features["config"].origin == f"/boot/config-{RELEASE}"
    assert [e.path for e in result.errors] == ["/proc/config.gz"]
    assert "gzip" in result.errors[0].message


def test_not_gzip_at_all(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/config.gz", b"CONFIG_PREEMPT=y\n")
    result = run(root)
    assert "config" not in result.features and "corrupt gzip" in result.errors[0].message


def test_gzip_bomb_is_refused(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/config.gz", gzip.compress(b"#" * (kernel.MAX_TEXT_BYTES + 10)))
    result = run(root)
    assert "config" not in result.features and "larger than" in result.errors[0].message


def test_huge_plain_config_is_refused(tmp_path):
    root = host_with(tmp_path)
    put(root, f"/boot/config-{RELEASE}", "CONFIG_X=y\n" * (kernel.MAX_TEXT_BYTES // 10))
    result = run(root)
    assert "config" not in result.features and "larger than" in result.errors[0].message


def test_binary_config(tmp_path):
    root = host_with(tmp_path)
    put(root, f"/boot/config-{RELEASE}", b"CONFIG_NO_HZ=y\n\x00\x01")
    result = run(root)
    assert "config" not in result.features and "NUL" in result.errors[0].message


def test_config_without_config_lines(tmp_path):
    root = host_with(tmp_path)
    put(root, f"/boot/config-{RELEASE}", "hello\n")
    assert "no CONFIG_ lines" in run(root).errors[0].message


def test_missing_osrelease(tmp_path):
    put(tmp_path, "/proc/modules", PROC_MODULES)
    result = run(tmp_path)
    assert "version" not in result.features and not result.labels
    assert result.errors[0].path == "/proc/sys/kernel/osrelease"
    assert "kvm_intel" in result.features["loadedmodule"].flags


def test_binary_osrelease(tmp_path):
    put(tmp_path, "/proc/sys/kernel/osrelease", b"\x00\x01junk")
    result = run(tmp_path)
    assert "version" not in result.features and "unreadable" in result.errors[0].message


def test_absurd_osrelease(tmp_path):
    put(tmp_path, "/proc/sys/kernel/osrelease", "5.15 with spaces\n")
    result = run(tmp_path)
    assert "version" not in result.features and "not a kernel release" in result.errors[0].message


def test_binary_proc_modules(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/modules", b"apex 24576 0\x00\xff")
    result = run(root)
    assert "loadedmodule" not in result.features and result.errors[0].path == "/proc/modules"


def test_garbage_lines_in_proc_modules(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/modules", PROC_MODULES + "../../etc 1 0 - Live\n")
    result = run(root)
    assert "../../etc" not in result.features["loadedmodule"].flags and "nvme" in result.features["loadedmodule"].flags
    assert "without a module name" in result.errors[0].message


def test_builtin_unreadable(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/modules", PROC_MODULES)
    (root / f"lib/modules/{RELEASE}/modules.builtin").mkdir(parents=True)
    result = run(root)
    assert result.features["enabledmodule"].flags == result.features["loadedmodule"].flags
    assert result.errors[0].path.endswith("modules.builtin")


@pytest.mark.parametrize("content, enabled", [(b"1", True), (b"1\n", True), (b"0", False), (b"", False)])
def test_selinux(tmp_path, content, enabled):
    root = host_with(tmp_path)
    put(root, "/sys/fs/selinux/enforce", content)
    result = run(root)
    assert result.features["selinux"].attributes["enabled"] == str(enabled).lower()
    assert (P + "selinux.enabled" in result.labels) is enabled


def test_kvm_absent(tmp_path):
    result = run(host_with(tmp_path))
    assert dict(result.features["kvm"].attributes) == {"enabled": "false"}
    assert not [k for k in result.labels if "kvm" in k]


# -- properties ----------------------------------------------------------------------------------
text_lines = st.lists(st.one_of(
    st.builds(lambda k, v: f"CONFIG_{k}={v}", st.sampled_from(["NO_HZ", "PREEMPT", "NO_HZ_FULL", "X"]),
              st.text(max_size=70)),
    st.builds(lambda n, rest: f"{n} {rest}", st.text(max_size=20), st.text(max_size=40)),
    st.text(max_size=80),
), max_size=15)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(config_lines=text_lines, module_lines=text_lines, release=st.text(max_size=40))
def test_any_kernel_files_never_crash_and_labels_are_valid(tmp_path_factory, config_lines, module_lines, release):
    root = tmp_path_factory.mktemp("kernel")
    put(root, "/proc/sys/kernel/osrelease", release.encode("utf-8", "surrogatepass"))
    put(root, "/proc/config.gz", gzip.compress("\n".join(config_lines).encode("utf-8", "surrogatepass")))
    put(root, "/proc/modules", "\n".join(module_lines).encode("utf-8", "surrogatepass"))
    result = run_source("kernel", HostFS(root), DiscoveryConfig())
    assert not [e for e in result.errors if "source failed" in e.message]
    # a kconfig value no label may carry is dropped with an error, as NFD drops it
    for key, value in result.labels.items():
        assert not qualified_name_errors(key) and not label_value_errors(value)


def _usr_src_layouts(root: Path) -> dict[str, object]:
    """Ways /usr/src can hold (or not) the kconfig candidates below it; each a callable
    that builds the layout under a fresh host root."""
    import os

    def make_dir(path):
        (root / path.lstrip("/")).mkdir(parents=True, exist_ok=True)

    return {
        "absent": lambda: None,
        "empty": lambda: make_dir("/usr/src"),
        "first candidate": lambda: put(root, f"/usr/src/linux-{RELEASE}/.config", "CONFIG_PREEMPT=y\n"),
        "headers only": lambda: (make_dir(f"/usr/src/linux-{RELEASE}"),
                                 put(root, f"/usr/src/linux-headers-{RELEASE}/.config", "CONFIG_NO_HZ=y\n")),
        "a file": lambda: put(root, "/usr/src", "not a directory\n"),
        "config is a directory": lambda: make_dir(f"/usr/src/linux-rt-{RELEASE}/.config"),
        "linked inside": lambda: (put(root, f"/usr/src/linux-headers-{RELEASE}/.config", "CONFIG_HZ=250\n"),
                                  os.symlink(f"linux-headers-{RELEASE}", root / "usr/src/linux")),
        "root linked elsewhere": lambda: (put(root, f"/opt/src/linux-{RELEASE}/.config", "CONFIG_HZ=100\n"),
                                          make_dir("/usr"), os.symlink("/opt/src", root / "usr/src")),
        "dangling entry": lambda: (make_dir("/usr/src"), os.symlink("gone", root / f"usr/src/linux-{RELEASE}")),
    }


#: layout -> the kconfig NFD's search order finds (the first candidate there and readable)
_FOUND = {"absent": f"/boot/config-{RELEASE}", "empty": f"/boot/config-{RELEASE}",
          "first candidate": f"/usr/src/linux-{RELEASE}/.config",
          "headers only": f"/usr/src/linux-headers-{RELEASE}/.config", "a file": f"/boot/config-{RELEASE}",
          "config is a directory": f"/boot/config-{RELEASE}", "linked inside": "/usr/src/linux/.config",
          "root linked elsewhere": f"/usr/src/linux-{RELEASE}/.config", "dangling entry": f"/boot/config-{RELEASE}"}


@pytest.mark.parametrize("layout", list(_usr_src_layouts(Path("/")).keys()))
def test_usr_src_candidates_are_read_in_nfds_order(tmp_path, layout):
    """The kconfig candidates below /usr/src, in every layout, then /boot: the first one there
    and readable is the config; one that is there and cannot be read (a directory) is reported
    and leaves ``kernel.config`` undetermined (it might have been the answer)."""
    root = host_with(tmp_path / "root", RELEASE)
    put(root, f"/boot/config-{RELEASE}", UBUNTU_CONFIG)
    _usr_src_layouts(root)[layout]()
    result = kernel.discover(HostFS(root), kernel.Config())
    assert result.features["config"].origin == _FOUND[layout]
    unreadable = layout == "config is a directory"
    assert [e.path for e in result.errors] == ([f"/usr/src/linux-rt-{RELEASE}/.config"] if unreadable else [])
    assert dict(result.undetermined) == ({"config": ("feature.node.kubernetes.io/kernel-config.*",)} if unreadable else {})


# -- read, but not whole: undetermined, as an unreadable file -----------------------------------
@pytest.mark.parametrize(("content", "why"), [("", "empty"), ("\n", "empty"), (RELEASE, "cut mid-line (no final newline)")])
def test_an_osrelease_not_whole_leaves_the_version_and_what_it_names_undetermined(tmp_path, content, why):
    """proc_dostring writes the release and a newline: without them the release is unknown,
    and so are the kernel config and built-in modules found by it (not looked for)."""
    put(tmp_path, "/proc/sys/kernel/osrelease", content)
    put(tmp_path, f"/boot/config-{RELEASE}", UBUNTU_CONFIG)
    put(tmp_path, "/proc/modules", PROC_MODULES)
    result = run(tmp_path)
    assert [(e.path, e.message) for e in result.errors] == [("/proc/sys/kernel/osrelease", f"incomplete: {why}")]
    assert "version" not in result.features
    assert dict(result.undetermined) == {"version": (NFD_PREFIX + "kernel-version.*",),
                                         "config": (NFD_PREFIX + "kernel-config.*",), "enabledmodule": ()}
    assert "loadedmodule" in result.features  # /proc/modules does not depend on the release


@pytest.mark.parametrize(("path", "content", "why", "undetermined"), [
    (f"/boot/config-{RELEASE}", "", "empty", "config"),
    (f"/boot/config-{RELEASE}", UBUNTU_CONFIG[:-5], "cut mid-line (no final newline)", "config"),
    ("/proc/config.gz", gzip.compress(UBUNTU_CONFIG.encode())[:-12], "truncated gzip stream", "config"),
    ("/proc/config.gz", gzip.compress(b""), "empty", "config"),
    ("/proc/modules", PROC_MODULES[:-3], "cut mid-line (no final newline)", "loadedmodule"),
    (f"/lib/modules/{RELEASE}/modules.builtin", "kernel/drivers/usb/host/xhci-h",
     "cut mid-line (no final newline)", "enabledmodule"),
])
def test_a_kernel_file_not_whole_is_undetermined(tmp_path, path, content, why, undetermined):
    root = host_with(tmp_path)
    put(root, path, content)
    result = run(root)
    assert [e.path for e in result.errors] == [path] and result.errors[0].message.endswith(f"incomplete: {why}")
    assert undetermined in result.undetermined and undetermined not in result.features


def test_an_empty_module_list_is_no_module_loaded(tmp_path):
    root = host_with(tmp_path)
    put(root, "/proc/modules", "")
    result = run(root)
    assert not result.errors and not result.undetermined and "loadedmodule" not in result.features


def test_an_empty_selinux_enforce_is_undetermined(tmp_path):
    root = host_with(tmp_path)
    put(root, "/sys/fs/selinux/enforce", "")
    result = run(root)
    assert [(e.path, e.message) for e in result.errors] == [("/sys/fs/selinux/enforce", "incomplete: empty")]
    assert dict(result.undetermined) == {"selinux": (P + "selinux.enabled",)}
