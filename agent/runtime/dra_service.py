"""The agent's side of DRA mode (``run --dra``): this pass's devices to the ResourceSlice
publisher, with the same one-owner-per-resource care as the device plugin
(``agent.runtime.device_service``).

In DRA mode every resource the catalogue declares ``devices:`` for is served through DRA and
through nothing else: the device plugin is not started, and the agent stops patching those
resources' counts (``hand_to_kubelet`` drops them from the desired extended resources). A
resource whose count the agent's ownership record still lists is not published until a Node
read shows it gone: a DeviceClass with ``extendedResourceName`` and a patched count of the same
name would count the same devices twice on this node. Without a Node read nothing is published.

A resource an undetermined feature decides keeps the devices last published (none before a
read decides), as its label and count are held (``agent.rules.held``). A /dev read that a bound
or a failure left incomplete keeps the devices it did not read as last published, with the
``nfa_device_plugin_undetermined`` metric and a Warning (``agent.runtime.device_service.UnreadHold``).

``DraPluginService`` runs the kubelet DRA plugin (``agent.dra.plugin``) with its two directories
watched, as ``DeviceService`` runs the device plugin's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from agent.desired import DesiredNodeState
from agent.deviceplugin.model import ResourceDevices
from agent.dra.publisher import SlicePublisher
from agent.dra.slices import Node, dropped_text
from agent.hostfs import HostFS
from agent.reconcile.ownership import parse_ownership
from agent.runtime.device_service import UnreadHold
from agent.runtime.metrics import AgentMetrics
from agent.runtime.rules_watch import RulesWatcher

if TYPE_CHECKING:
    from agent.dra.plugin import KubeletPlugin  # grpcio: imported by the caller in DRA mode only

log = logging.getLogger(__name__)

REASON_CONTESTED = "ResourceSlicesContested"
REASON_DROPPED = "ResourceSliceAttributesDropped"
REASON_BOUNDED = "ResourceSlicesBounded"


class DraService:
    def __init__(self, api_client: Any, host_root: str, node_name: str, version: str, *, taints: bool,
                 metrics: AgentMetrics, on_problem: Callable[[str], None] = lambda _text: None,
                 warn: Callable[[str], None] | None = None,
                 on_warning: Callable[[str, str], None] = lambda _reason, _text: None) -> None:
        self.api_client = api_client
        self.host = HostFS(host_root)
        self.node_name = node_name
        self.version = version
        self.taints = taints
        self.metrics = metrics
        self.publisher: SlicePublisher | None = None
        #: what else takes each pass's devices, e.g. the kubelet DRA plugin's ``publish``:
        #: the same mapping the slices are built from, so both name the same devices
        self.consumers: list[Callable[[Mapping[str, ResourceDevices]], None]] = []
        self.on_problem = on_problem
        self.on_warning = on_warning  # (reason, text): a Warning Event of its own reason
        self._failing = ""
        self._stopped = False
        self._published: dict[str, ResourceDevices] = {}
        self.unread = UnreadHold("DRA", "dra-error", metrics, node_name, warn)

    def start(self) -> DraService:
        return self

    def alive(self) -> bool:
        return self.publisher is None or self.publisher.alive() or self._stopped

    def stop(self, timeout: float = 1.0) -> None:
        self._stopped = True
        if self.publisher is not None:
            self.publisher.stop(timeout)

    def _publisher(self, uid: str) -> SlicePublisher:
        if self.publisher is None or self.publisher.writer.node.uid != uid:
            if self.publisher is not None:  # the Node was recreated: its slices went with it
                self.publisher.stop(0.5)
            self.publisher = SlicePublisher(self.api_client, Node(self.node_name, uid), self.version,
                                            taints=self.taints, on_write=self.metrics.dra_slice_write,
                                            on_sync=self._synced, on_contested=self._contested,
                                            on_dropped=self._dropped, on_bounded=self._bounded,
                                            on_ignored=self.metrics.watch_item_ignored).start()
        return self.publisher

    def _synced(self, result: str) -> None:
        """Metric for every sync; a Warning when syncs start failing (once until one succeeds)."""
        self.metrics.dra_sync(result)
        failing = result if result in ("held", "error") else ""
        if failing and not self._failing:
            self.on_problem("the node's ResourceSlices could not be read; they are held as they are" if failing == "held"
                            else "writing the node's ResourceSlices failed; retrying")
        self._failing = failing

    def _contested(self, why: str | None) -> None:
        """Another writer fights over the slices (``why``), or stopped: the gauge, one Warning."""
        self.metrics.dra_slices_contested.set(1 if why else 0)
        if why:
            self.on_warning(REASON_CONTESTED, why)

    def _bounded(self, why: str | None) -> None:
        """The slice watch passed a bound (``why``: writes held) or fits again: the gauge, one Warning."""
        self.metrics.dra_slices_bounded.set(1 if why else 0)
        if why:
            self.on_warning(REASON_BOUNDED, f"the node's ResourceSlices are not written or deleted: {why}")

    def _dropped(self, device: str, lost: Mapping[str, str]) -> None:
        """Attributes a device could not carry (once per device change): the metric, one Warning."""
        self.metrics.dra_dropped(lost)
        self.on_warning(REASON_DROPPED, f"device {device} is published without attribute(s) {dropped_text(lost)}")

    def publish(self, desired: DesiredNodeState, node: Mapping[str, Any] | None) -> None:
        """This pass's devices to the slice publisher (never waits on the API server)."""
        meta = (node or {}).get("metadata") or {}
        if not meta.get("uid") or self._stopped:
            return
        owned = parse_ownership(meta.get("annotations") or {}).resources
        served = self.unread.serve(self.host, desired, owned, self._published)
        if served is None:
            return
        self._published = served
        self._publisher(str(meta["uid"])).publish(self._published)
        for consumer in self.consumers:
            consumer(self._published)


class DraPluginService:
    """The kubelet DRA plugin and the watch of its plugin and registry directories: a socket of
    ours removed or replaced there (a kubelet that comes back on an emptied registry directory,
    a wiped plugin directory) wakes the plugin at once, which serves it again (the same
    watchfiles loop as the rules directories and the device plugin's directory). The plugin's
    own look every ``check_interval`` seconds stays the safety net when inotify is unavailable
    (the watch failing is logged) and for a watched directory that is itself removed (its
    watch goes with it). Only the directories' own entries are watched: the sockets are there."""

    def __init__(self, plugin: KubeletPlugin) -> None:
        self.plugin = plugin
        self.watcher: RulesWatcher | None = None

    def start(self) -> DraPluginService:
        self.plugin.start()  # creates both directories: the watch is on them, not on a parent
        self.watcher = RulesWatcher([self.plugin.plugin_dir, self.plugin.registry_dir], self.plugin.wake,
                                    debounce_ms=50, step_ms=250, recursive=False,
                                    what="the DRA plugin's directories",
                                    fallback="its sockets are checked every few seconds instead").start()
        return self

    def alive(self) -> bool:
        return self.plugin.alive()

    def stop(self, timeout: float = 1.0) -> None:
        if self.watcher is not None:
            self.watcher.stop(timeout=0.0)  # a daemon thread; it ends within its 250 ms step
        self.plugin.stop(timeout)
