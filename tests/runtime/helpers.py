"""Shared pieces for the run-loop tests: a writable copy of a fixture host where the Coral USB
Accelerator can be unplugged and plugged back, and a bounded wait."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from tests.conftest import FIXTURES

T = TypeVar("T")

CORAL_DEVPATH = "/devices/pci0000:00/0000:00:14.0/usb2/2-2"
#: what the kernel removes from sysfs when the Accelerator (usb 2-2) leaves: the device directory
#: (with its interface 2-2:1.0 inside) and the bus links to both
CORAL_ENTRIES = ("sys/bus/usb/devices/2-2", "sys/bus/usb/devices/2-2:1.0", "sys" + CORAL_DEVPATH)
EDGETPU_LABEL = "accelerators/edgetpu"
EDGETPU_RESOURCE = "node-feature-agent.io/edgetpu"


class CoralHost:
    """A copy of fixtures/sysfs/coral-usb under ``tmp`` (symlinks kept as links)."""

    def __init__(self, tmp: Path, case: str = "coral-usb") -> None:
        self.root = Path(shutil.copytree(FIXTURES / case, tmp / "host", symlinks=True))
        self.stash = tmp / "unplugged"
        self.stash.mkdir()

    def unplug(self) -> None:
        for index, entry in enumerate(CORAL_ENTRIES):
            shutil.move(str(self.root / entry), str(self.stash / str(index)))

    def plug(self) -> None:
        for index, entry in enumerate(CORAL_ENTRIES):
            shutil.move(str(self.stash / str(index)), str(self.root / entry))

    @property
    def plugged(self) -> bool:
        return (self.root / CORAL_ENTRIES[0]).is_symlink()


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, interval: float = 0.02, what: str = "condition") -> T:
    """Poll ``predicate`` until truthy; AssertionError after ``timeout`` (generous: shared CPUs)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(interval)


def has_edgetpu(node: dict) -> tuple[bool, bool]:
    """(label present, extended resource present) on a Node dict."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    return EDGETPU_LABEL in labels, EDGETPU_RESOURCE in capacity
