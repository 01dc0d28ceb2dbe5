"""``clean``: remove everything the agent put on a Node, and nothing else.

Reads the ownership record on the Node (``node-feature-agent.io/owned-*``) and removes those
labels, annotations, extended resources (capacity and allocatable) and taints, then the record
itself. Exit status 0 when the node is clean, 1 otherwise (API unreachable, forbidden, node
missing, or an item the server refused to remove).
"""

from __future__ import annotations

import argparse
import json
import sys

from agent.commands.apply import add_reconcile_arguments, connect
from agent.config import add_node_arguments

HELP = "remove every label, annotation, extended resource and taint this agent owns from a Node (uninstall)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_node_arguments(parser)
    add_reconcile_arguments(parser)


def run(args: argparse.Namespace) -> int:
    from agent.reconcile import Reconciler

    api = connect(args)
    reconciler = Reconciler(api, args.node_name, emit_events=not args.no_events, max_attempts=max(1, args.retries))
    outcome = reconciler.clean()
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
    return 0 if outcome.clean else 1
