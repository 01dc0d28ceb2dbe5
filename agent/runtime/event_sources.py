"""Where device events come from, behind one small interface (``fileno``/``receive``/``close``).

``--udev-mode``:

* ``kernel`` (the DaemonSet's default): raw kernel uevents, netlink group 1, via
  ``pyudev.Monitor.from_netlink(ctx, source="kernel")``. Works in the pod's own network
  namespace without hostNetwork or ``/run/udev`` (Linux >= 4.18 broadcasts device uevents
  into every netns of the initial user namespace). No udev ``ID_*`` properties, and an event
  can precede udevd's ``/dev`` nodes: harmless here, discovery reads sysfs, which the kernel
  has populated before it sends the event, and the loop debounces anyway.
* ``udev``: udevd's processed events (group 2). Needs ``hostNetwork: true`` (udevd sends only
  into the host netns) and ``/run/udev`` mounted (libudev silently disables the monitor
  without it). Later than ``kernel`` by udev's rule processing; gains nothing for sysfs reads.
* ``inject:<path>``: a unix datagram socket at ``<path>`` that accepts kernel wire-format
  datagrams (``agent.runtime.uevent.encode_kernel_uevent``). A test and debugging interface:
  end-to-end tests and ``bench/latency.py`` drive a real agent process through it, and the
  events take exactly the path pyudev's do. Not for production.
* ``poll`` / ``off``: no event source (see ``hotplug.Poller``; ``off`` relies on resync).

Each ``receive`` returns parsed ``UEvent``s for monitored subsystems and drops the rest;
undecodable datagrams are counted and logged (rate-limited), never raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterable
from typing import Protocol

from agent.runtime.subsystems import MONITORED_SUBSYSTEMS
from agent.runtime.uevent import MAX_DATAGRAM, UEvent, UEventError, from_pyudev, parse_kernel_uevent

log = logging.getLogger(__name__)

MODES = ("kernel", "udev", "poll", "off")
INJECT_PREFIX = "inject:"


class EventSourceError(OSError):
    """The event source could not be opened (no netlink, permission, bad path)."""


class EventSource(Protocol):
    def fileno(self) -> int: ...

    def receive(self) -> list[UEvent]: ...

    def close(self) -> None: ...


def parse_mode(text: str) -> tuple[str, str]:
    """``kernel`` -> (kernel, ""); ``inject:/run/x.sock`` -> (inject, /run/x.sock)."""
    if text.startswith(INJECT_PREFIX) and len(text) > len(INJECT_PREFIX):
        return "inject", text[len(INJECT_PREFIX):]
    if text in MODES:
        return text, ""
    raise ValueError(f"--udev-mode must be one of {', '.join(MODES)} (or inject:<socket path>), not {text!r}")


class _Junk:
    """Rate-limited complaints about undecodable datagrams: the 1st, 10th, 100th ..."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0

    def note(self, err: Exception) -> None:
        self.count += 1
        if self.count in (1, 10) or self.count % 100 == 0:
            log.warning("%s: dropped an undecodable event (%s); %d so far", self.what, err, self.count,
                        extra={"event": "uevent-dropped"})


class SocketSource:
    """Kernel-format datagrams from a unix socket (``inject:`` mode, or a socketpair in tests)."""

    def __init__(self, sock: socket.socket, subsystems: Iterable[str] = MONITORED_SUBSYSTEMS, *,
                 path: str = "") -> None:
        self.sock = sock
        self.sock.setblocking(False)
        self.subsystems = frozenset(subsystems)
        self.path = path
        self.junk = _Junk(f"event socket {path or 'pair'}")

    @classmethod
    def bind(cls, path: str, subsystems: Iterable[str] = MONITORED_SUBSYSTEMS) -> SocketSource:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            if os.path.exists(path) and not os.path.isdir(path):
                os.unlink(path)  # a stale socket from a previous run
            sock.bind(path)
            os.chmod(path, 0o600)  # whatever the umask: only the owner may inject events
        except OSError as exc:
            sock.close()
            raise EventSourceError(f"cannot bind event socket {path}: {exc}") from exc
        return cls(sock, subsystems, path=path)

    def fileno(self) -> int:
        return self.sock.fileno()

    def receive(self) -> list[UEvent]:
        events: list[UEvent] = []
        while True:
            try:
                data = self.sock.recv(MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return events
            except OSError as exc:
                self.junk.note(exc)
                return events
            try:
                event = parse_kernel_uevent(data)
            except UEventError as err:
                self.junk.note(err)
                continue
            if event.subsystem in self.subsystems:
                events.append(event)

    def close(self) -> None:
        self.sock.close()
        if self.path:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class PyudevSource:
    """pyudev netlink monitor (``source`` kernel or udev), filtered to our subsystems."""

    def __init__(self, source: str, subsystems: Iterable[str] = MONITORED_SUBSYSTEMS) -> None:
        self.kind = source  # "kernel" or "udev": which netlink group this monitor listens to
        try:
            import pyudev

            self.context = pyudev.Context()
            self.monitor = pyudev.Monitor.from_netlink(self.context, source=source)
            self.subsystems = frozenset(subsystems)
            for subsystem in sorted(self.subsystems):
                self.monitor.filter_by(subsystem)
            self.monitor.start()
        except Exception as exc:  # ImportError, OSError (EPERM/EPROTONOSUPPORT), pyudev errors
            raise EventSourceError(f"cannot open the {source} uevent monitor: {exc}") from exc
        self.junk = _Junk(f"{source} uevent monitor")

    def fileno(self) -> int:
        return int(self.monitor.fileno())

    def receive(self) -> list[UEvent]:
        events: list[UEvent] = []
        while True:
            try:
                device = self.monitor.poll(timeout=0)
            except Exception as exc:  # noqa: BLE001 - ENOBUFS after an overrun, decoding trouble: noted
                self.junk.note(exc)
                return events
            if device is None:
                return events
            try:
                event = from_pyudev(device)
            except Exception as exc:  # noqa: BLE001 - a device pyudev cannot describe: noted, skipped
                self.junk.note(exc)
                continue
            if event.subsystem in self.subsystems:
                events.append(event)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # best effort on shutdown
            self.monitor.stop()


#: udevd's control socket; where it is missing a "udev" monitor silently receives nothing
UDEV_CONTROL = "/run/udev/control"


def open_source(mode: str, subsystems: Iterable[str] = MONITORED_SUBSYSTEMS) -> EventSource | None:
    """The source for ``--udev-mode`` (None for poll/off); ``EventSourceError`` if it cannot open."""
    kind, path = parse_mode(mode)
    if kind == "udev" and not os.path.exists(UDEV_CONTROL):
        # libudev subscribes to no group without udevd's control socket (systemd
        # src/libsystemd/sd-device/device-monitor.c, device_monitor_new_full: "The udev service
        # seems not to be active, disabling the monitor"): it would open and never deliver
        raise EventSourceError(f"udev mode needs {UDEV_CONTROL} (mount the host's /run/udev and use "
                               "hostNetwork); udevd's events would never arrive")
    if kind in ("kernel", "udev"):
        return PyudevSource(kind, subsystems)
    if kind == "inject":
        return SocketSource.bind(path, subsystems)
    return None
