"""``apply``: discover, plan and apply this node's labels, resources and taints once.

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
import os
import sys
from typing import TYPE_CHECKING

from agent.config import (
    add_host_arguments,
    add_node_arguments,
    add_policy_arguments,
    claim_policy,
    discovery_config,
    positive_int,
    rule_options,
    rules_dirs,
    selected_sources,
)
from agent.preflight import ConfigurationError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from agent.desired import DesiredNodeState, Taint
    from agent.reconcile.node_api import NodeApi
    from agent.reconcile.outcome import ReconcileOutcome

HELP = "discover, plan and apply this node's labels, extended resources and taints once (the agent loop is `run`)"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--once", action="store_true", help="one pass and exit (apply always does one pass; the flag states it)")
    add_host_arguments(parser)
    add_policy_arguments(parser)
    add_node_arguments(parser)
    add_reconcile_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="read the Node and print what would change; write nothing")
    parser.add_argument("--startup-taint", action="append", default=[], metavar="KEY:EFFECT",
                        help="a taint the node registers with (--register-with-taints) that the agent removes once the node "
                             "is labelled; the only foreign item the agent ever removes; repeatable")


def add_reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``apply`` and ``clean``."""
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument("--retries", type=positive_int, default=5, metavar="N",
                        help="attempts per API call on 5xx/429/network errors (backoff 0.8 s doubling to 30 s) before giving up")
    parser.add_argument("--no-events", action="store_true", help="do not record Kubernetes Events on the Node")


def connect(args: argparse.Namespace) -> NodeApi:
    """A ``NodeApi`` from --kubeconfig / in-cluster config; ``SystemExit(2)`` without a node
    name, ``ConfigurationError`` (exit 2, one line) when the configuration cannot be loaded.

    ``apply``, ``clean`` and ``run`` all use the light CoreV1 subset
    (``agent.kube.light_core``): the generated ``CoreV1Api`` costs ~0.9 s of import and 250
    generated models, and the image ships without the generated APIs and models
    (Dockerfile)."""
    from agent.reconcile.node_api import NodeApi, load_configuration

    if not args.node_name:
        print("error: no node name: pass --node-name or set NODE_NAME", file=sys.stderr)
        raise SystemExit(2)
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        raise ConfigurationError(f"--kubeconfig {args.kubeconfig!r} is not a file")
    try:
        return NodeApi.from_configuration(load_configuration(args.kubeconfig or None))
    except Exception as exc:  # any failure to read the client configuration is a configuration error
        where = args.kubeconfig or "in-cluster service account"
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigurationError(f"cannot load Kubernetes client configuration ({where}): {reason[:300]}") from exc


def parse_startup_taints(texts: list[str]) -> list[Taint]:
    from agent.desired import Taint
    from agent.k8s_validation import taint_errors

    taints = []
    for text in texts:
        try:
            taint = Taint.parse(text)
        except ValueError as exc:
            raise ConfigurationError(f"--startup-taint {text!r}: {exc}") from exc
        errors = taint_errors(taint.key, taint.value, taint.effect)
        if errors:
            raise ConfigurationError(f"--startup-taint {text!r}: {'; '.join(errors)}")
        taints.append(taint)
    return taints


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


def run(args: argparse.Namespace) -> int:
    from agent import rules
    from agent.discovery import discover
    from agent.hostfs import HostFS
    from agent.reconcile import Reconciler

    startup = parse_startup_taints(args.startup_taint)
    api = connect(args)
    found = discover(HostFS(args.host_root), discovery_config(args), selected_sources(args))
    options = rule_options(args)
    catalogue = rules.load_catalogue(rules_dirs(args), options)
    for problem in getattr(catalogue, "problems", ()):
        log.warning("rule catalogue: %s", problem)

    # one pass has no earlier answer: what a feature it cannot determine decides stays as it is
    from agent.rules.held import held_label_keys, held_resource_names

    undetermined = {f"{r.source}.{f}": keys for r in found.results.values() for f, keys in r.undetermined.items()}
    held = held_label_keys(catalogue, options, undetermined) if undetermined else frozenset()
    held_resources = held_resource_names(catalogue, options, undetermined) if undetermined else frozenset()
    why = ""
    if undetermined:
        first = next((str(e) for e in found.errors), "a read failed")
        why = (f"could not determine {', '.join(sorted(undetermined))} ({first}): the labels and "
               f"extended resources it decides stay on the Node as they are "
               f"({'all owned labels' if held is None else ', '.join(sorted(held))}"
               f"{'; ' + ', '.join(sorted(held_resources)) if held_resources else ''})")
        log.warning("%s", why)

    def plan(node_labels: Mapping[str, str]) -> DesiredNodeState:
        state = rules.plan_node(found.features, found.labels, node_labels, catalogue, options, found.label_origins)
        if undetermined:
            state = dataclasses.replace(state, held_labels=held or frozenset(), hold_every_label=held is None,
                                        held_resources=held_resources)
        return state

    reconciler = Reconciler(api, args.node_name, emit_events=not args.no_events and not args.dry_run,
                            startup_taints=startup, max_attempts=max(1, args.retries),
                            claims=claim_policy(options, lambda: catalogue, startup))
    if args.dry_run:
        outcome = reconciler.preview(plan)
    else:
        with reconciler.events.deferred():  # the Warning joins the pass's one Event
            outcome = reconciler.reconcile(plan)
            if why:
                from agent.reconcile.events import REASON_READ_FAILED

                reconciler.events.record(reconciler.node_uid, REASON_READ_FAILED, why, warning=True)
    desired = outcome.desired
    extra: dict[str, object] = {}
    if desired is not None:
        extra = {"desired": desired.to_json(), "desired_problems": [p.to_json() for p in desired.problems]}
        for problem in desired.problems:
            log.warning("rules: %s", problem)
    print_outcome(args.node_name, outcome, fmt=args.format, dry_run=args.dry_run, extra=extra)
    return 0 if outcome.ok else 1
