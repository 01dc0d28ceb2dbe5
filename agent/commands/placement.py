"""``placement``: the architecture-aware placement controller (the Deployment's command).

Watches pods carrying the ``node-feature-agent.io/arch`` scheduling gate (added at admission),
asks each image's registry which platforms it has, requires matching nodes and removes the
gate; see ``agent/placement/controller.py``. Leader election on a Lease lets two replicas run
(one acts). Optionally serves the mutating admission webhook for clusters without
MutatingAdmissionPolicy (``--webhook-port`` with a TLS certificate). Serves /metrics,
/healthz and /readyz on ``--metrics-port``. SIGTERM/SIGINT: hand the Lease back, stop, exit 0.
SIGHUP, SIGUSR1, SIGUSR2: logged and ignored (nothing to re-read: the webhook's certificate is
reloaded when it changes; their default action would end the controller).
Exit status: 1 setup failed (port in use, unreadable certificate, no cluster), 2 bad usage.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
from typing import TYPE_CHECKING, Any

from agent.config import non_negative_float, positive_float, positive_int

if TYPE_CHECKING:
    from agent.placement.controller import Controller, ControllerConfig
    from agent.placement.lease import LeaderElector
    from agent.placement.metrics import PlacementMetrics

HELP = "run the architecture-aware placement controller (removes the arch scheduling gate from pods)"

log = logging.getLogger(__name__)


def _port(text: str) -> int | None:
    if text.lower() in ("off", "none"):
        return None
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError("port must be 0-65535, or off")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--kubeconfig", default=env("KUBECONFIG", ""),
                        help="kubeconfig file (default: $KUBECONFIG, else in-cluster config)")
    parser.add_argument("--namespace", default=env("POD_NAMESPACE", "node-feature-agent"),
                        help="the controller's own namespace: its Lease lives there and its pods are never gated")
    parser.add_argument("--identity", default=env("POD_NAME", socket.gethostname()),
                        help="leader-election identity (the pod name)")
    parser.add_argument("--leader-elect", choices=("on", "off"), default="on",
                        help="take the Lease before acting (off: this replica always acts; run one replica only)")
    parser.add_argument("--lease-name", default="node-feature-agent-placement",
                        help="the leader-election Lease, in --namespace")
    parser.add_argument("--lease-duration", type=positive_float, default=15.0, metavar="SECONDS",
                        help="how long a Lease holds without renewal; the leader stops acting after 2/3 of it unrenewed")
    parser.add_argument("--workers", type=positive_int, default=8, help="pods resolved at once")
    parser.add_argument("--taint-mode", action="store_true",
                        help="also tolerate node-feature-agent.io/arch=<arch>:NoSchedule for each allowed architecture")
    parser.add_argument("--retry-window", type=positive_float, default=30.0, metavar="SECONDS",
                        help="how long transient registry failures are retried before on-error applies")
    parser.add_argument("--gate-deadline", type=positive_float, default=600.0, metavar="SECONDS",
                        help="hard bound on a pod's time gated, counted from its creation")
    parser.add_argument("--watchdog-interval", type=positive_float, default=30.0, metavar="SECONDS",
                        help="how often every gated pod is checked against --gate-deadline")
    parser.add_argument("--insecure-registry", action="append", default=[], metavar="HOST[:PORT]",
                        help="reach this registry over plain HTTP; matched whole against the image's registry as "
                             "Docker's insecure-registries are, so a registry on a port needs HOST:PORT (repeatable)")
    parser.add_argument("--registry-ca-file", default="", help="PEM bundle trusted for registries instead of the system's")
    parser.add_argument("--tag-ttl", type=non_negative_float, default=60.0, metavar="SECONDS",
                        help="how long a tag's digest is reused before the registry is asked again (0: ask every "
                             "time; pods with imagePullPolicy: Always are asked every time whatever this is)")
    parser.add_argument("--registry-qps", type=positive_float, default=10.0, help="requests per second per registry")
    parser.add_argument("--metrics-port", type=_port, default=8080, metavar="PORT",
                        help="port for /metrics, /healthz, /readyz (0: any free port, off: no server)")
    parser.add_argument("--webhook-port", type=_port, default=None, metavar="PORT",
                        help="serve the mutating admission webhook on this port (needs --tls-cert-file/--tls-key-file)")
    parser.add_argument("--tls-cert-file", default="", metavar="FILE",
                        help="the webhook's PEM certificate (re-read when it changes)")
    parser.add_argument("--tls-key-file", default="", metavar="FILE", help="the webhook's PEM private key")


def _resolver(args: argparse.Namespace) -> Any:
    from agent.images import Resolver, ResolverConfig

    return Resolver(ResolverConfig(insecure_registries=frozenset(args.insecure_registry),
                                   ca_file=args.registry_ca_file or None, tag_ttl=args.tag_ttl,
                                   requests_per_second=args.registry_qps))


def run(args: argparse.Namespace) -> int:
    from agent.kube.connect import api_client
    from agent.placement.controller import Controller
    from agent.placement.kube import PlacementApi
    from agent.placement.metrics import PlacementMetrics

    if args.webhook_port is not None and not (args.tls_cert_file and args.tls_key_file):
        log.error("--webhook-port needs --tls-cert-file and --tls-key-file")
        return 2
    api = PlacementApi(api_client(args.kubeconfig or None))
    resolver = _resolver(args)
    metrics = PlacementMetrics(resolver.counters)
    elector = _elector(api, args)
    controller = Controller(api, resolver, _controller_config(args), metrics,
                            leading=elector.is_leader if elector else lambda: True)
    servers = _serve(args, controller, metrics)
    if servers is None:
        return 1
    _run_until_signalled(args, controller, elector, servers)
    log.info("placement controller stopped", extra={"event": "stopped"})
    return 0


def _elector(api: Any, args: argparse.Namespace) -> LeaderElector | None:
    """The Lease election (--leader-elect=on) in the proportions of kube-controller-manager's
    defaults (lease 15 s, renew deadline 10 s, retry period 2 s): renew within 2/3 of the lease,
    retry every lease/7.5 (at least 0.2 s)."""
    from agent.placement.lease import LeaderElector

    if args.leader_elect != "on":
        return None
    return LeaderElector(api, args.namespace, args.lease_name, args.identity, lease_duration=args.lease_duration,
                         renew_deadline=args.lease_duration * 2 / 3, retry_period=max(0.2, args.lease_duration / 7.5))


def _controller_config(args: argparse.Namespace) -> ControllerConfig:
    from agent.placement.controller import ControllerConfig
    from agent.placement.policy import Bounds

    return ControllerConfig(identity=args.identity, workers=args.workers, taint_mode=args.taint_mode,
                            bounds=Bounds(retry_window=args.retry_window, deadline=args.gate_deadline),
                            watchdog_interval=args.watchdog_interval)


def _serve(args: argparse.Namespace, controller: Controller, metrics: PlacementMetrics) -> list[Any] | None:
    """Start the metrics/health server and the webhook asked for; None (and nothing left serving)
    when one cannot listen."""
    from agent.placement.webhook import WebhookServer
    from agent.runtime.health import HealthServer

    servers: list[Any] = []
    try:
        if args.metrics_port is not None:
            servers.append(HealthServer(args.metrics_port, metrics.render, lambda: (True, ""),
                                        lambda: (controller.informer.synced.is_set(), "gated pods not listed yet")).start())
        if args.webhook_port is not None:
            servers.append(WebhookServer(args.webhook_port, args.tls_cert_file, args.tls_key_file, args.namespace).start())
    except OSError as exc:
        log.error("cannot serve: %s", exc)
        for server in servers:
            server.stop()
        return None
    return servers


def _run_until_signalled(args: argparse.Namespace, controller: Controller, elector: LeaderElector | None,
                         servers: list[Any]) -> None:
    """Run (leading at once without an election) until SIGTERM or SIGINT, then stop everything,
    releasing the Lease, and restore the signal handlers."""
    stop = threading.Event()
    def ignored(signum: int, _frame: object) -> None:
        log.info("received %s: ignored (SIGTERM stops)", signal.Signals(signum).name, extra={"event": "signal"})

    handlers: dict[signal.Signals, Any] = {signal.SIGTERM: lambda *_: stop.set(), signal.SIGINT: lambda *_: stop.set(),
                                           signal.SIGHUP: ignored, signal.SIGUSR1: ignored, signal.SIGUSR2: ignored}
    previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    controller.start()
    if elector is not None:
        elector.start(controller.leadership)
    else:
        controller.leadership(True)
    log.info("placement controller started", extra={"event": "started", "identity": args.identity})
    try:
        stop.wait()
    finally:
        if elector is not None:
            elector.stop(release=True)
        controller.stop()
        for server in servers:
            server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
