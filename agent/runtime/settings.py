"""What the agent is told: the ``run`` command's flags as one object (``agent.commands.run``
builds it; the tests build it directly). Defaults are the DaemonSet's."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.desired import Taint
from agent.discovery import DiscoveryConfig
from agent.reconcile import BackoffSettings
from agent.reconcile.contest import ContestSettings
from agent.runtime.node_watch import DEFAULT_READ_TIMEOUT, DEFAULT_WATCH_TIMEOUT
from agent.sources import SOURCE_NAMES
from agent.worker_config import WorkerConfig


@dataclass
class Settings:
    node_name: str
    rules_dirs: Sequence[str]
    host_root: str = "/"
    sources: Sequence[str] = SOURCE_NAMES
    discovery_config: DiscoveryConfig | None = None
    config_path: str = ""  # --config: reloaded on edits (runtime.config_state)
    worker_config: WorkerConfig | None = None  # --config as the command read it (else read at start)
    sources_from_flag: bool = False  # --sources given: the file's core.featureSources never applies
    rule_options: Any = None
    resync_interval: float = 600.0
    resync_jitter: float = 0.1
    startup_jitter: float = 0.0
    debounce: float = 0.04  # quiet gap that ends a burst of device events (queue.py)
    debounce_max: float = 0.25
    udev_mode: str = "kernel"
    poll_interval: float = 5.0
    startup_taints: Sequence[Taint] = ()
    pod_guard: bool = False
    evict_orphans: bool = False
    metrics_port: int | None = 8080  # None: no HTTP server
    metrics_host: str = ""
    watch_node: bool = True
    watch_rules: bool = True
    rules_from_cluster: bool = False  # NodeFeatureRule/NodeFeature objects (agent.runtime.cluster_objects)
    enable_taints: bool = False  # taints from NodeFeatureRule objects (nfd-master's -enable-taints)
    watch_timeout: int = DEFAULT_WATCH_TIMEOUT
    watch_read_timeout: float = DEFAULT_READ_TIMEOUT
    fresh_node_age: float = 150.0
    stuck_after: float = 300.0
    emit_events: bool = True
    retries: int = 1  # tries per request inside a pass; 1: a failure ends the pass, the retry is scheduled
    device_plugin: bool = False  # serve the catalogue's declared devices to kubelet (agent.runtime.device_service)
    device_plugin_dir: str = "/var/lib/kubelet/device-plugins"
    dra: str = ""  # the resource.k8s.io version ResourceSlices are written in ("": no DRA; agent.dra.mode)
    dra_device_taints: bool = False  # the server has device taints (unready devices tainted, not left out)
    dra_plugin_dir: str = "/var/lib/kubelet/plugins/node-feature-agent.io"  # the DRA socket and checkpoint
    dra_registry_dir: str = "/var/lib/kubelet/plugins_registry"  # kubelet's plugin watcher directory
    cdi_dir: str = "/var/run/cdi"  # where prepared claims' CDI specs go (the container runtime reads them)
    backoff: BackoffSettings = field(default_factory=BackoffSettings)
    contest: ContestSettings = field(default_factory=ContestSettings)  # keys another writer changes back
