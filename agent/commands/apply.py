"""``apply``: discover, compute the desired state and apply this node's labels, resources and
taints once.

The continuous agent is ``run``; ``apply --once`` is the same pipeline for one pass (a Job, a
debugging session, CI). ``--dry-run`` reads the Node and prints what would change.
Exit status: 0 applied (or nothing to do), 1 the API could not be reached or refused us
after retries, 2 bad usage or configuration (nothing written; see ``agent.preflight``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from typing import TYPE_CHECKING

from agent.config import (
    add_host_arguments,
    add_node_arguments,
    add_policy_arguments,
    add_reconcile_arguments,
    claim_policy,
    discovery_config,
    parse_startup_taints,
    require_node_name,
    rule_options,
    rules_dirs,
    selected_sources,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agent.desired import DesiredNodeState
    from agent.discovery import Discovery
    from agent.reconcile.outcome import ReconcileOutcome
    from agent.rules import Catalogue, RuleOptions

HELP = "discover, plan and apply this node's labels, extended resources and taints once (the agent loop is `run`)"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="one pass and exit (apply always does one pass; the flag states it)")
    add_host_arguments(parser)
    add_policy_arguments(parser)
    add_node_arguments(parser)
    add_reconcile_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="read the Node and print what would change; write nothing")
    parser.add_argument("--rules-from-cluster", choices=("on", "off"), default="on",
                        help="on (as run): also evaluate the cluster's NodeFeatureRule objects and join this node's "
                             "NodeFeature objects to discovery; without NFD's CRDs (or the right to list them) the pass "
                             "runs without them; any other failure to read them ends apply with nothing written")
    parser.add_argument("--startup-taint", action="append", default=[], metavar="KEY:EFFECT",
                        help="a taint the node registers with (--register-with-taints) that the agent removes once the node "
                             "is labelled; the only foreign item the agent ever removes; repeatable")


def print_outcome(node: str, outcome: ReconcileOutcome, *, fmt: str, dry_run: bool,
                  extra: dict[str, object] | None = None) -> None:
    if fmt == "json":
        body = {"node": node, "dry_run": dry_run, **outcome.to_json(), **(extra or {})}
        json.dump(body, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return
    if outcome.error:
        print(f"node {node}: ERROR: {outcome.error}")
    if dry_run:
        head = f"would apply {len(outcome.applied)} change(s) (dry run, nothing written)" if outcome.applied else "up to date (dry run)"
    elif outcome.writes:
        head = f"{len(outcome.applied)} change(s) applied in {outcome.writes} write(s)"
    else:
        head = "up to date, nothing written" if not outcome.error else "nothing written"
    print(f"node {node}: {head}")
    for line in outcome.applied:
        print(f"  {line}")
    if outcome.problems:
        print("problems:")
        for problem in outcome.problems:
            print(f"  {problem}")


def _undetermined_hold(found: Discovery, catalogue: Catalogue, options: RuleOptions,
                       ) -> tuple[frozenset[str] | None, frozenset[str], str] | None:
    """What a feature this pass could not determine decides stays on the Node as it is (one pass
    has no earlier answer): the held label keys (None: every owned label), the held extended
    resources and the warning that says so. None when every feature was determined."""
    from agent.rules.held import held_label_keys, held_resource_names

    undetermined = {f"{r.source}.{f}": keys for r in found.results.values() for f, keys in r.undetermined.items()}
    if not undetermined:
        return None
    held = held_label_keys(catalogue, options, undetermined)
    held_resources = held_resource_names(catalogue, options, undetermined)
    first = next((str(e) for e in found.errors), "a read failed")
    why = (f"could not determine {', '.join(sorted(undetermined))} ({first}): the labels and "
           f"extended resources it decides stay on the Node as they are "
           f"({'all owned labels' if held is None else ', '.join(sorted(held))}"
           f"{'; ' + ', '.join(sorted(held_resources)) if held_resources else ''})")
    log.warning("%s", why)
    return held, held_resources, why


def run(args: argparse.Namespace) -> int:
    from agent import rules
    from agent.discovery import discover
    from agent.hostfs import HostFS
    from agent.kube.connect import api_client
    from agent.kube.light_core import LightCoreV1Api
    from agent.reconcile import Reconciler
    from agent.reconcile.node_api import NodeApi

    startup = parse_startup_taints(args.startup_taint)
    require_node_name(args)
    api = NodeApi(LightCoreV1Api(api_client(args.kubeconfig or None)))
    found = discover(HostFS(args.host_root), discovery_config(args), selected_sources(args))
    options = rule_options(args)
    catalogue = rules.load_catalogue(rules_dirs(args), options)
    features, labels, origins = found.features, found.labels, found.label_origins
    if args.rules_from_cluster == "on":  # the objects run evaluates, read once
        from agent.runtime.cluster_objects import ClusterObjects

        cluster = ClusterObjects(args.node_name, on_change=lambda: None, options=options)
        try:
            notes = cluster.read_once(api.core)
        except Exception as exc:  # noqa: BLE001 - undetermined: writing without them would remove what they gave
            from agent.reconcile.outcome import ReconcileOutcome

            reason = " ".join(str(exc).split())[:300] or type(exc).__name__
            error = (f"API server unreachable or failing while reading NFD's NodeFeatureRule/NodeFeature objects: "
                     f"{reason}; nothing written")
            print_outcome(args.node_name, ReconcileOutcome(changed=False, writes=0, error=error),
                          fmt=args.format, dry_run=args.dry_run)
            return 1
        for note in notes:
            log.warning("cluster: %s; applied without them", note)
        catalogue = cluster.catalogue(catalogue)
        features, labels, origins = cluster.join(features, labels, origins)
    for problem in getattr(catalogue, "problems", ()):
        log.warning("rule catalogue: %s", problem)

    hold = _undetermined_hold(found, catalogue, options)

    def desired_state(node_labels: Mapping[str, str]) -> DesiredNodeState:
        state = rules.desired_state(features, labels, node_labels, catalogue, options, origins)
        if hold is not None:
            held, held_resources, _ = hold
            state = dataclasses.replace(state, held_labels=held or frozenset(), hold_every_label=held is None,
                                        held_resources=held_resources)
        return state

    reconciler = Reconciler(api, args.node_name, emit_events=not args.no_events and not args.dry_run,
                            startup_taints=startup, max_attempts=max(1, args.retries),
                            claims=claim_policy(options, lambda: catalogue, startup))
    if args.dry_run:
        outcome = reconciler.preview(desired_state)
    else:
        with reconciler.events.deferred():  # the Warning joins the pass's one Event
            outcome = reconciler.reconcile(desired_state)
            if hold is not None:
                from agent.reconcile.events import REASON_READ_FAILED

                reconciler.events.record(reconciler.node_uid, REASON_READ_FAILED, hold[2], warning=True)
    desired = outcome.desired
    extra: dict[str, object] = {}
    if desired is not None:
        extra = {"desired": desired.to_json(), "desired_problems": [p.to_json() for p in desired.problems]}
        for problem in desired.problems:
            log.warning("rules: %s", problem)
    print_outcome(args.node_name, outcome, fmt=args.format, dry_run=args.dry_run, extra=extra)
    return 0 if outcome.ok else 1
