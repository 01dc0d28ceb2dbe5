"""``clean``: remove everything the agent put on a Node, and nothing else.

Reads the ownership record on the Node (``node-feature-agent.io/owned-*``) and removes those
labels, annotations, extended resources (capacity and allocatable) and taints, then the record
itself. Exit status 0 when the node is clean, 1 otherwise (API unreachable, forbidden, node
missing, or an item the server refused to remove).

``clean --pods`` instead removes the placement controller's scheduling gate
(``node-feature-agent.io/arch``) from every pod carrying it, cluster-wide: only that gate and
its label, never another gate, never a pod (``agent/placement/clean.py``). Exit status 0 when
no pod keeps our gate.
"""

from __future__ import annotations

import argparse
import json
import sys

from agent.config import add_node_arguments, add_reconcile_arguments, require_node_name

HELP = "remove every label, annotation, extended resource and taint this agent owns from a Node (uninstall)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    add_reconcile_arguments(parser)
    parser.add_argument("--pods", action="store_true",
                        help="instead: remove the architecture scheduling gate from every pod (placement uninstall); "
                             "deletes nothing")


def clean_pods(args: argparse.Namespace) -> int:
    from agent.kube.connect import api_client
    from agent.placement.clean import clean_pods as release_all
    from agent.placement.kube import PlacementApi

    result = release_all(PlacementApi(api_client(args.kubeconfig or None)))
    if args.format == "json":
        json.dump({"released": result.released, "failed": result.failed}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        for key in result.released:
            print(f"pod {key}: gate removed")
        for key in result.failed:
            print(f"pod {key}: gate NOT removed")
        print(f"{len(result.released)} pod(s) released, {len(result.failed)} failed")
    return 0 if not result.failed else 1


def run(args: argparse.Namespace) -> int:
    from agent.kube.connect import api_client
    from agent.kube.light_core import LightCoreV1Api
    from agent.reconcile import Reconciler
    from agent.reconcile.node_api import NodeApi

    if args.pods:
        return clean_pods(args)
    require_node_name(args)
    api = NodeApi(LightCoreV1Api(api_client(args.kubeconfig or None)))
    reconciler = Reconciler(api, args.node_name, emit_events=not args.no_events, max_attempts=max(1, args.retries))
    outcome = reconciler.clean()
    slices = clean_slices(api.core.api_client, args.node_name)
    if args.format == "json":
        json.dump({"node": args.node_name, **outcome.to_json()}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        if outcome.error:
            print(f"node {args.node_name}: ERROR: {outcome.error}")
        state = "clean" if outcome.clean else "NOT clean"
        print(f"node {args.node_name}: {state} ({outcome.writes} write(s))")
        for line in outcome.removed:
            print(f"  {line}")
        for problem in outcome.problems:
            print(f"  problem: {problem}")
    if slices:
        print(f"node {args.node_name}: ResourceSlices: {slices}", file=sys.stderr if args.format == "json" else sys.stdout)
    return 0 if outcome.clean and not slices.startswith("NOT") else 1


def clean_slices(client: object, node_name: str) -> str:
    """Delete this node's ResourceSlices of the agent's driver (DRA mode); "" when the cluster
    serves no DRA API. A read that fails deletes nothing and says so."""
    from agent.dra import mode
    from agent.dra.slices import Node, ReadFailed, SliceWriter

    try:
        served = mode.discover(client)
    except mode.Undetermined as exc:
        return f"NOT clean: {exc}"
    if not served.version:
        return ""
    try:
        deleted = SliceWriter(client, Node(node_name, ""), served.version).delete_all()
    except ReadFailed as exc:
        return f"NOT clean: {exc}; nothing deleted"
    except Exception as exc:  # noqa: BLE001 - a refused delete: say so, exit non-zero
        return f"NOT clean: deleting failed: {exc}"
    return f"{deleted} deleted"
