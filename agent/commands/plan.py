"""``plan``: the full desired state of this node (labels, extended resources, taints,
annotations) from discovery plus the rule catalogue; no cluster needed.

Problems (refused items, failed rules, bad rule files) go to stderr; the plan is printed
either way so one bad rule never hides the rest.  Exit status 0, or 2 for bad usage.

``--device-plugin on`` previews ``run --device-plugin=on``: the resources kubelet would own
leave the extended resources, and the devices each one's plugin would advertise (IDs, health,
``/dev`` nodes) are printed under ``devices``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TYPE_CHECKING, NotRequired, TypedDict

from agent.config import (
    add_host_arguments,
    add_policy_arguments,
    discovery_config,
    rule_options,
    rules_dirs,
    selected_sources,
)

if TYPE_CHECKING:  # imported where used: the command line starts without them
    from agent.desired import DesiredNodeState
    from agent.rules import Catalogue, Derivation
    from agent.rules.model import RuleOptions
    from agent.runtime.cluster_objects import ClusterObjects

HELP = "print the desired labels, extended resources, taints and annotations for this host (or a fixture); no cluster needed"


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    add_policy_arguments(parser)
    parser.add_argument("--node-labels", default="", metavar="FILE|k=v,...",
                        help="labels already on the Node (device plugins, dt labeller...): a JSON/Node JSON/k=v-lines file, or k=v,k2=v2. "
                             "Labels the agent owns are never input: from a Node object (kubectl get node -o json) its "
                             "ownership record says which; other forms carry no record, so only labels this host's own "
                             "plan produces are dropped (pass the Node object for an exact preview of apply --dry-run)")
    parser.add_argument("--node-name", default="", help="value for system.name.nodename (default: $NODE_NAME)")
    parser.add_argument("--kubeconfig", default="", metavar="FILE",
                        help="read the cluster's NodeFeatureRule objects and this --node-name's NodeFeature objects "
                             "through this kubeconfig (as run does); without it nothing is read from a cluster")
    parser.add_argument("--rules-from-cluster", choices=("on", "off"), default=None,
                        help="on (the default with --kubeconfig): evaluate the cluster's NFD objects too")
    parser.add_argument("--enable-taints", action="store_true",
                        help="with the cluster's objects: include the taints NodeFeatureRule objects ask for, as "
                             "run --enable-taints (nfd-master's -enable-taints); without it they are left out and "
                             "named on stderr")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_plan_arguments(parser)
    parser.add_argument("--format", choices=("json", "table"), default="json", help="output format")
    parser.add_argument("--device-plugin", choices=("on", "off"), default="off",
                        help="on: show what run --device-plugin=on would serve to kubelet (devices, /dev nodes)")


def node_labels(args: argparse.Namespace) -> dict[str, str]:
    from agent.rules.node_labels import NodeLabelsError, parse_node_labels

    spec = args.node_labels
    if not spec:
        return {}
    try:
        if os.path.isfile(spec):
            with open(spec, encoding="utf-8", errors="replace") as handle:
                text = handle.read(4 * 1024 * 1024)
        else:
            text = spec
        return parse_node_labels(text)
    except (OSError, NodeLabelsError) as exc:
        print(f"error: --node-labels {spec!r}: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc


def compute(args: argparse.Namespace) -> tuple[Derivation, Catalogue]:
    """Discover, load and derive the desired state: -> (rules.Derivation, catalogue)."""
    from agent import rules
    from agent.discovery import discover
    from agent.hostfs import HostFS

    options = rule_options(args)
    labels_on_node = node_labels(args)
    found = discover(HostFS(args.host_root), discovery_config(args), selected_sources(args))
    catalogue = rules.load_catalogue(rules_dirs(args), options)
    for error in found.errors:
        print(f"discovery: {error}", file=sys.stderr)
    features, labels, origins = found.features, found.labels, found.label_origins
    cluster = read_cluster(args, options)
    if cluster is not None:
        catalogue = cluster.catalogue(catalogue)
        features, labels, origins = cluster.join(features, labels, origins)
    for problem in catalogue.problems:
        print(f"rules: {problem}", file=sys.stderr)
    result = rules.derive(features, labels, labels_on_node, catalogue, options, origins)
    # The agent's own output is never its input (the reconciler passes rules only the labels it
    # does not own): drop given labels this host's discovery or plan produces, and plan again,
    # so `plan --node-labels` equals `apply --dry-run`.
    own = set(labels) | set(result.state.labels)
    if own & set(labels_on_node):
        labels_on_node = {k: v for k, v in labels_on_node.items() if k not in own}
        result = rules.derive(features, labels, labels_on_node, catalogue, options, origins)
    return result, catalogue


def read_cluster(args: argparse.Namespace, options: RuleOptions) -> ClusterObjects | None:
    """NFD's objects read once through ``--kubeconfig`` (``--rules-from-cluster``), or None."""
    choice, kubeconfig = getattr(args, "rules_from_cluster", None), getattr(args, "kubeconfig", "")
    wanted = choice == "on" or (choice is None and kubeconfig)
    if not wanted:
        return None
    if not kubeconfig:
        print("error: --rules-from-cluster on needs --kubeconfig", file=sys.stderr)
        raise SystemExit(2)
    from agent.config import node_name_of
    from agent.kube.connect import api_client
    from agent.kube.light_core import LightCoreV1Api
    from agent.runtime.cluster_objects import ClusterObjects

    cluster = ClusterObjects(node_name_of(args), on_change=lambda: None, options=options,
                             taints=getattr(args, "enable_taints", False))
    core = LightCoreV1Api(api_client(kubeconfig))  # an unusable configuration: exit 2 (agent.cli)
    try:
        notes = cluster.read_once(core)
    except Exception as exc:  # any failure to read: say so, plan from files
        print(f"error: reading NFD objects through {kubeconfig}: {exc}", file=sys.stderr)
        raise SystemExit(1) from exc
    for note in notes:
        print(f"cluster: {note}; planned without them", file=sys.stderr)
    for note in cluster.notes:
        print(f"cluster: {note}", file=sys.stderr)
    return cluster


def render_table(state: DesiredNodeState) -> str:
    lines = [f"LABELS ({len(state.labels)})"]
    width = max((len(k) for k in state.labels), default=0)
    lines += [f"  {k.ljust(width)}  {v}   <- {state.provenance[k].origin}" for k, v in sorted(state.labels.items())]
    lines.append(f"EXTENDED RESOURCES ({len(state.extended_resources)})")
    lines += [f"  {k}  {v}   <- {state.provenance[k].origin}" for k, v in sorted(state.extended_resources.items())]
    lines.append(f"TAINTS ({len(state.taints)})")
    lines += [f"  {t.to_string()}   <- {state.provenance[f'taint:{t.key}:{t.effect}'].origin}" for t in state.taints]
    lines.append(f"ANNOTATIONS ({len(state.annotations)})")
    lines += [f"  {k}  {v}" for k, v in sorted(state.annotations.items())]
    return "\n".join(lines)


class DeviceEntry(TypedDict):
    """One device a plugin would advertise, as printed."""

    id: str
    health: str  # Healthy or Unhealthy
    nodes: list[str]  # host paths of its /dev nodes ("host:container" where the two differ)
    basis: str  # which stable host name the ID is built from
    shares: NotRequired[int]  # IDs advertised for it when it is shared
    why: NotRequired[str]  # why it is unhealthy


def plugin_devices(args: argparse.Namespace, state: DesiredNodeState) -> dict[str, list[DeviceEntry]]:
    """What each resource's device plugin would advertise on this host, as ``run`` resolves it."""
    from agent.deviceplugin.resolve import resolve_claims
    from agent.hostfs import HostFS

    out: dict[str, list[DeviceEntry]] = {}
    for name, resolved in sorted(resolve_claims(HostFS(args.host_root), state.device_claims).items()):
        out[name] = []
        for device in resolved.devices:
            entry: DeviceEntry = {"id": device.id, "health": "Healthy" if device.healthy else "Unhealthy",
                                  "nodes": [n.host_path if n.container_path == n.host_path
                                            else f"{n.host_path}:{n.container_path}" for n in device.nodes],
                                  "basis": device.id_basis}
            if resolved.shares > 1:
                entry["shares"] = resolved.shares
            if device.why:
                entry["why"] = device.why
            out[name].append(entry)
        for note in resolved.notes:
            print(f"plan: {name}: {note}", file=sys.stderr)
        if resolved.undetermined:
            print(f"plan: {name}: undetermined, held: {resolved.undetermined}", file=sys.stderr)
    return out


def render_devices(devices: dict[str, list[DeviceEntry]]) -> str:
    lines = [f"DEVICE PLUGIN ({len(devices)} resource(s), kubelet owns their capacity)"]
    for name, items in devices.items():
        lines.append(f"  {name}: {len(items)} device(s)")
        for item in items:
            why = f"   ({item['why']})" if "why" in item else ""
            shared = f" x{item['shares']}" if "shares" in item else ""
            lines.append(f"    {item['id']}{shared}  {item['health']}  {' '.join(item['nodes']) or '-'}{why}")
            lines.append(f"      ID from {item['basis']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    result, _ = compute(args)
    state = result.state
    for problem in state.problems:
        print(f"plan: {problem}", file=sys.stderr)
    devices = None
    if getattr(args, "device_plugin", "off") == "on":
        from agent.runtime.device_service import hand_to_kubelet

        devices = plugin_devices(args, state)
        state = hand_to_kubelet(state)
    if args.format == "json":
        body = state.to_json()
        if devices is not None:
            body["devices"] = devices
        json.dump(body, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(render_table(state))
        if devices is not None:
            print(render_devices(devices))
    return 0
