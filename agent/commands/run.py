"""``run``: the agent the DaemonSet starts; reacts to hotplug, rule edits and Node changes.

Discovers, computes the desired state and reconciles once at start, then again whenever a device
event (debounced), a rule file edit, a change to this Node (someone removed our label, a dependency label
appeared) or the jittered resync asks for it. Serves /metrics, /healthz and /readyz on
``--metrics-port``. SIGTERM/SIGINT: stop taking triggers, give an in-flight write what is left of 0.8 s (then
abandon it), stop every thread, exit 0 within a second; labels stay (``clean`` removes).
SIGHUP: re-read the rules and ``--config`` and resync now (a daemon's reload; edits are picked up
without it too). SIGUSR1/SIGUSR2: logged and ignored (their default action would end the agent).

``--udev-mode inject:<socket>`` is a test/debug interface: the agent binds a unix datagram
socket there and takes kernel-format uevents from it exactly as from the netlink monitor.
Exit status: 0 after a clean shutdown, 1 setup failed (no config, port in use), 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, Any

from agent.config import (
    add_host_arguments,
    add_node_arguments,
    add_policy_arguments,
    discovery_config,
    non_negative_float,
    parse_startup_taints,
    positive_float,
    positive_int,
    require_node_name,
    rule_options,
    rules_dirs,
    selected_sources,
    worker_config,
)

if TYPE_CHECKING:
    from agent.runtime.settings import Settings

HELP = "run the agent: keep this node's labels, extended resources and taints in step (the DaemonSet's command)"

log = logging.getLogger(__name__)


def _port(text: str) -> int | None:
    if text.lower() in ("off", "none", "-1"):
        return None
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("port must be 0-65535, or off")
    return value


def _udev_mode(text: str) -> str:
    from agent.runtime.event_sources import parse_mode

    try:
        parse_mode(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    add_policy_arguments(parser)
    add_node_arguments(parser)
    parser.add_argument("--metrics-port", type=_port, default=8080, metavar="PORT",
                        help="port for /metrics, /healthz, /readyz (0: any free port, off: no server)")
    parser.add_argument("--metrics-address", default=os.environ.get("POD_IP", ""), metavar="ADDR",
                        help="address to bind the metrics port to (default: $POD_IP, the pod's IP the DaemonSet "
                        "sets, which probes and Prometheus use; without it every address, dual-stack IPv6+IPv4 "
                        "where available; '::' on IPv6-only nodes)")
    parser.add_argument("--resync-interval", type=positive_float, default=600.0, metavar="SECONDS",
                        help="full rediscovery and reconcile at least this often (jittered +/-10%%)")
    parser.add_argument("--startup-jitter", type=non_negative_float, default=2.0, metavar="SECONDS",
                        help="wait a random 0..SECONDS before the first API request, so a rollout's agents do not all "
                             "start at once (0: no wait)")
    parser.add_argument("--udev-mode", type=_udev_mode, default="kernel", metavar="MODE",
                        help="device events: kernel (netlink uevents, no hostNetwork needed), udev (udevd's events; "
                             "needs hostNetwork and /run/udev), poll (list devices every --poll-interval), off "
                             "(resync only); inject:<socket> is a test/debug interface")
    parser.add_argument("--poll-interval", type=positive_float, default=5.0, metavar="SECONDS",
                        help="device polling period in poll mode or when no event monitor can be opened")
    parser.add_argument("--debounce", type=non_negative_float, default=0.04, metavar="SECONDS",
                        help="after a device event, rediscover once no further event came for this long (the quiet "
                             "gap that ends a burst)")
    parser.add_argument("--debounce-max", type=non_negative_float, default=0.25, metavar="SECONDS",
                        help="rediscover at the latest this long after the first event of a burst")
    parser.add_argument("--startup-taint", action="append", default=[], metavar="KEY[=VALUE]:EFFECT",
                        help="a taint the node registers with that the agent removes after its first successful "
                             "reconcile (labels before workloads); repeatable")
    parser.add_argument("--pod-guard", action="store_true",
                        help="when hardware leaves, record an Event on pods whose required node affinity/selector "
                             "no longer matches (needs deploy/pod-guard-rbac.yaml)")
    parser.add_argument("--evict-orphans", action="store_true",
                        help="with --pod-guard: also evict those pods through the Eviction API")
    parser.add_argument("--no-events", action="store_true", help="do not record Kubernetes Events")
    parser.add_argument("--device-plugin", choices=("on", "off"), default="off",
                        help="on: serve the devices the catalogue declares (devices:) to kubelet as a device plugin; "
                             "kubelet then owns those resources' capacity and the agent stops patching them")
    parser.add_argument("--device-plugin-dir", default="/var/lib/kubelet/device-plugins", metavar="DIR",
                        help="kubelet's device plugin directory (kubelet.sock and the plugins' sockets)")
    parser.add_argument("--dra", choices=("auto", "on", "off"), default="off",
                        help="serve the devices the catalogue declares through Dynamic Resource Allocation: publish "
                             "this node's ResourceSlices (resource.k8s.io v1, else v1beta1) instead of the device "
                             "plugin and the patched counts; auto: when the cluster serves the API, else as "
                             "--device-plugin says; on: refuse to start without it (deploy/dra.md)")
    parser.add_argument("--dra-plugin-dir", default="/var/lib/kubelet/plugins/node-feature-agent.io", metavar="DIR",
                        help="with --dra: the DRA plugin's directory (its dra.sock, which kubelet calls, and the "
                             "checkpoint of prepared claims); created if missing")
    parser.add_argument("--dra-registry-dir", default="/var/lib/kubelet/plugins_registry", metavar="DIR",
                        help="with --dra: kubelet's plugin registration directory, watched by kubelet")
    parser.add_argument("--cdi-dir", default="/var/run/cdi", metavar="DIR",
                        help="with --dra: where the CDI specs of prepared claims are written (read by the container "
                             "runtime)")
    parser.add_argument("--rules-from-cluster", choices=("on", "off"), default="on",
                        help="on: also evaluate the cluster's NodeFeatureRule objects (beside --rules) and join this "
                             "node's NodeFeature objects to discovery, as NFD's master does; the agent runs without them "
                             "when NFD's CRDs are not installed")
    parser.add_argument("--enable-taints", action="store_true",
                        help="apply the taints NodeFeatureRule objects in the cluster ask for (NoExecute included), as "
                             "nfd-master's -enable-taints; without it they are not applied and each such object is "
                             "logged once. Taints from --rules files always apply (those files are the admin's)")
    parser.add_argument("--watch-timeout", type=positive_int, default=900, help=argparse.SUPPRESS)
    parser.add_argument("--retries", type=positive_int, default=1, help=argparse.SUPPRESS)


def settings_from_args(args: argparse.Namespace) -> Settings:
    from agent.runtime.agent import Settings

    if args.evict_orphans and not args.pod_guard:
        print("error: --evict-orphans needs --pod-guard", file=sys.stderr)
        raise SystemExit(2)
    if getattr(args, "dra", "off") != "off":
        for flag, path in (("--dra-plugin-dir", args.dra_plugin_dir), ("--dra-registry-dir", args.dra_registry_dir),
                           ("--cdi-dir", args.cdi_dir)):
            problem = unusable_directory(path)
            if problem:
                print(f"error: {flag} {path!r}: {problem}", file=sys.stderr)
                raise SystemExit(2)
    return Settings(
        node_name=args.node_name, rules_dirs=rules_dirs(args), host_root=args.host_root,
        sources=selected_sources(args), discovery_config=discovery_config(args), rule_options=rule_options(args),
        config_path=args.config or "", worker_config=worker_config(args), sources_from_flag=args.sources is not None,
        resync_interval=args.resync_interval, startup_jitter=args.startup_jitter, debounce=max(0.0, args.debounce),
        debounce_max=max(args.debounce, args.debounce_max), udev_mode=args.udev_mode, poll_interval=args.poll_interval,
        startup_taints=tuple(parse_startup_taints(args.startup_taint)), pod_guard=args.pod_guard,
        evict_orphans=args.evict_orphans, metrics_port=args.metrics_port, metrics_host=args.metrics_address,
        watch_timeout=args.watch_timeout, emit_events=not args.no_events, retries=max(1, args.retries),
        device_plugin=args.device_plugin == "on", device_plugin_dir=args.device_plugin_dir,
        rules_from_cluster=args.rules_from_cluster == "on", enable_taints=args.enable_taints,
        dra_plugin_dir=args.dra_plugin_dir, dra_registry_dir=args.dra_registry_dir, cdi_dir=args.cdi_dir)


def unusable_directory(path: str) -> str:
    """Why ``path`` cannot be a directory the DRA plugin creates or writes in ("" if it can):
    empty, or it (or a parent) exists and is not a directory. A missing one is created at start."""
    if not path:
        return "empty"
    probe = os.path.abspath(path)
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return "not a directory" if probe == os.path.abspath(path) else f"{probe} is not a directory"
    return ""


def with_dra_mode(settings: Settings, wanted: str, client: Any, stop: threading.Event,
                  attempts: int = 5) -> Settings:
    """``settings`` with the DRA mode ``--dra`` and the server's discovery give (``agent.dra.mode``).
    A discovery read that fails is retried (1 s, 2 s, 4 s, 8 s); still undetermined, it is a
    ``ValueError`` for ``auto`` too: the pod exits and kubelet restarts it, rather than the agent
    serving devices in a mode it did not decide. In DRA mode the device plugin is off."""
    import dataclasses

    from agent.dra import mode

    if wanted == "off":
        return settings
    chosen = mode.DraApi("")
    for attempt in range(attempts):
        try:
            chosen = mode.decide(wanted, mode.discover(client))
            break
        except mode.Undetermined as exc:
            log.warning("DRA mode undetermined (%s)", exc, extra={"node": settings.node_name, "event": "dra-mode"})
            if attempt == attempts - 1 or stop.wait(2.0 ** attempt):
                raise ValueError(f"--dra={wanted}: cannot tell which DRA API the cluster serves ({exc})") from exc
    log.info("DRA mode: %s", f"resource.k8s.io/{chosen.version}" if chosen.version else "off (not served)",
             extra={"node": settings.node_name, "event": "dra-mode"})
    if not chosen.version:
        return settings
    return dataclasses.replace(settings, dra=chosen.version, dra_device_taints=chosen.device_taints,
                               device_plugin=False)


def run(args: argparse.Namespace) -> int:
    from agent.kube.connect import api_client
    from agent.kube.light_core import LightCoreV1Api
    from agent.reconcile.node_api import NodeApi
    from agent.runtime.agent import Agent
    from agent.runtime.heap import limit_malloc_arenas

    limit_malloc_arenas()  # before any thread starts (agent.runtime.heap)
    settings = settings_from_args(args)
    require_node_name(args)
    api = NodeApi(LightCoreV1Api(api_client(args.kubeconfig or None)))
    stop = threading.Event()
    try:
        settings = with_dra_mode(settings, getattr(args, "dra", "off"), api.core.api_client, stop)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s, shutting down", signal.Signals(signum).name, extra={"event": "signal"})
        stop.set()

    agent: Agent | None = None

    def on_reload(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: re-reading rules and configuration, resyncing", signal.Signals(signum).name,
                 extra={"event": "signal"})
        if agent is not None:
            agent.resync()

    def on_ignored(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s: ignored (SIGHUP reloads, SIGTERM stops)", signal.Signals(signum).name,
                 extra={"event": "signal"})

    handlers = {signal.SIGTERM: on_signal, signal.SIGINT: on_signal, signal.SIGHUP: on_reload,
                signal.SIGUSR1: on_ignored, signal.SIGUSR2: on_ignored}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        try:
            agent = Agent(settings, api)
            agent.start()
        except OSError as exc:  # metrics port in use, inject socket path unusable
            print(f"error: cannot start the agent: {exc}", file=sys.stderr)
            return 1
        if agent.http is not None:
            log.info("serving /metrics, /healthz, /readyz on port %d", agent.http.port,
                     extra={"node": settings.node_name, "event": "listening"})
        stop.wait()
        # within 1 s in every phase, so no rollout or drain waits out the termination grace period:
        # an in-flight write gets what is left of it, then is abandoned; writes are idempotent and
        # the next start reconciles from the Node
        agent.stop(timeout=0.8)
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
