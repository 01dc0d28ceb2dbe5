"""The agent's side of ``--device-plugin=on``: one owner per resource, and the hand-off.

A resource the catalogue declares ``devices:`` for belongs to kubelet once its plugin serves
it: kubelet writes its capacity from ``ListAndWatch``. So the agent

1. stops patching it (``hand_to_kubelet`` drops it from the desired extended resources; the
   reconciler then removes the agent's own earlier entry from capacity and allocatable and,
   once a read shows it gone, from the ownership record);
2. serves it only when the Node it last saw no longer lists it in the ownership record, so
   the agent's removal can never delete the value kubelet has just written.

Without a Node read (the API server was never reached since start) nothing is served: the
agent cannot know yet whether an entry of its own is still there.

kubelet restarts: the directory is watched (inotify, the same watchfiles loop as the rules
directories), so a new ``kubelet.sock`` (whatever inode it got) or our wiped socket is handled
at once; a look every ``check_interval`` seconds, comparing the socket's inode and ctime, is
the safety net when inotify is unavailable.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Collection, Mapping
from typing import Any

from agent.desired import DesiredNodeState
from agent.deviceplugin.model import ResourceDevices
from agent.deviceplugin.v1beta1 import KUBELET_SOCKET_NAME
from agent.hostfs import HostFS
from agent.reconcile.ownership import parse_ownership
from agent.runtime.metrics import AgentMetrics
from agent.runtime.rules_watch import RulesWatcher

log = logging.getLogger(__name__)


def hand_to_kubelet(state: DesiredNodeState) -> DesiredNodeState:
    """The desired state without the resources the device plugin serves."""
    if not state.device_claims:
        return state
    kept = {k: v for k, v in state.extended_resources.items() if k not in state.device_claims}
    return dataclasses.replace(state, extended_resources=kept)


class DeviceService:
    def __init__(self, host_root: str, socket_dir: str, metrics: AgentMetrics, node_name: str = "",
                 check_interval: float = 2.0, warn: Callable[[str], None] | None = None) -> None:
        from agent.deviceplugin.plugins import DevicePlugins  # grpcio only in this mode

        def advertised(state: ResourceDevices) -> None:
            healthy = sum(1 for d in state.devices if d.healthy)
            metrics.device_plugin_advertised(state.resource, healthy, len(state.devices) - healthy)

        self.plugins = DevicePlugins(socket_dir, on_registration=metrics.device_plugin_registration,
                                     on_allocation=metrics.device_plugin_allocation, on_devices=advertised,
                                     check_interval=check_interval)
        self.socket_dir = socket_dir
        self.watcher: RulesWatcher | None = None
        self.host = HostFS(host_root)
        self.node_name = node_name
        self._waiting: frozenset[str] = frozenset()
        #: resource -> the devices last handed to its plugin (what a held resource keeps)
        self._published: dict[str, ResourceDevices] = {}
        self.metrics = metrics
        self.unread = UnreadHold("device plugin", "device-plugin-error", metrics, node_name, warn)

    def start(self) -> DeviceService:
        self.plugins.start()  # the directory watch: a watchfiles loop, as for the rules
        self.watcher = RulesWatcher([self.socket_dir], self.plugins.wake, debounce_ms=50, step_ms=250,
                                    on_created=self._created, what="kubelet's device plugin directory",
                                    fallback="its sockets are checked every few seconds instead").start()
        return self

    def _created(self, paths: frozenset[str]) -> None:
        if any(os.path.basename(p) == KUBELET_SOCKET_NAME for p in paths):
            self.plugins.kubelet_started()

    def alive(self) -> bool:
        return self.plugins.alive()

    def stop(self, timeout: float = 1.0) -> None:
        if self.watcher is not None:
            self.watcher.stop(timeout=0.0)  # a daemon thread; it ends within its 250 ms step
        self.plugins.stop(timeout)

    def _note_waiting(self, waiting: frozenset[str]) -> None:
        """Say once which resources wait for the agent's own capacity entry to go (a plugin
        and a patched capacity would count the same devices twice)."""
        if waiting != self._waiting and waiting:
            log.info("device plugin for %s waits until the agent's own capacity entry is removed",
                     ", ".join(sorted(waiting)), extra={"node": self.node_name, "event": "device-plugin-handoff"})
        self._waiting = waiting

    def publish(self, desired: DesiredNodeState, node: Mapping[str, Any] | None) -> None:
        """This pass's devices to the plugins (in memory; never waits on kubelet)."""
        if node is None:
            return
        owned = parse_ownership((node.get("metadata") or {}).get("annotations") or {}).resources
        self._note_waiting(frozenset(n for n in desired.device_claims if n in owned))
        served = self.unread.serve(self.host, desired, owned, self._published)
        if served is not None:
            self._published = served
            self.plugins.publish(served)


class UnreadHold:
    """The devices a bound or a failed read left unread, held as last published: one rule for
    the device plugin and DRA (``agent.runtime.dra_service``), so both keep the same devices."""

    def __init__(self, what: str, error_event: str, metrics: AgentMetrics, node_name: str,
                 warn: Callable[[str], None] | None = None) -> None:
        self.what = what
        self.error_event = error_event  # the log line's event tag when resolving fails
        self.metrics = metrics
        self.node_name = node_name
        self._warn = warn or (lambda _text: None)
        #: resource -> why its /dev read is incomplete, as last said (one Warning per change)
        self._undetermined: dict[str, str] = {}

    def serve(self, host: HostFS, desired: DesiredNodeState, owned: Collection[str],
              published: Mapping[str, ResourceDevices]) -> dict[str, ResourceDevices] | None:
        """This pass's devices for a serving mode, from the resources it may serve (not ``owned``
        by the agent's count any more); None when resolution failed (the caller keeps its last).

        A resource an undetermined feature decides keeps the devices last published (none yet:
        not served until a read decides), as its label and count are kept (agent.rules.held)."""
        from agent.deviceplugin.resolve import resolve_claims

        held = {n for n in desired.device_claims if n in desired.held_resources}
        claims = {n: c for n, c in desired.device_claims.items() if n not in owned and n not in held}
        try:
            resolved = resolve_claims(host, claims)
        except Exception:  # a bug here must not cost the node its labels: keep the last lists
            log.exception("resolving devices failed; the %s keeps its last devices", self.what,
                          extra={"node": self.node_name, "event": self.error_event})
            return None
        resolved.update({n: published[n] for n in held if n in published and n not in owned})
        return self.hold(resolved, published)

    def hold(self, resolved: Mapping[str, ResourceDevices],
             published: Mapping[str, ResourceDevices]) -> dict[str, ResourceDevices]:
        """``resolved`` with each incomplete list completed from ``published``."""
        return {name: self._hold_unread(name, state, published.get(name)) for name, state in resolved.items()}

    def _hold_unread(self, name: str, state: ResourceDevices, previous: ResourceDevices | None) -> ResourceDevices:
        """A list that a bound or a failed read left incomplete keeps the devices last published
        that it did not read (undetermined, not gone); the metric says so while it lasts and a
        Warning Event each time the reason changes. Refused /dev matches are logged once."""
        why = state.undetermined
        self.metrics.device_plugin_undetermined.labels(resource=name).set(1 if why else 0)
        if why and self._undetermined.get(name) != why:
            self._warn(f"{self.what} {name}: {why}; the devices not read are held as last published "
                       "(deploy/devices.md, \"Bounds\")")
        if why:
            self._undetermined[name] = why
        else:
            self._undetermined.pop(name, None)
        for note in state.notes:
            if previous is None or note not in previous.notes:
                log.warning("%s %s: %s", self.what, name, note, extra={"node": self.node_name, "event": "device-refused"})
        if not why or previous is None:
            return state
        present = state.by_id()
        kept = tuple(d for d in previous.devices if d.id not in present)
        return dataclasses.replace(state, devices=state.devices + kept) if kept else state
