"""``explain``: why a label, extended resource, annotation or taint is (or is not) desired.

Names the rule or label file (file:line), the expression that matched, the feature instance
and the host file that supplied the value; for an absent item, the condition that failed.
Exit status: 0 when every argument was explained, 1 when some name is produced by nothing in
the catalogue, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys

from agent.commands.plan import add_plan_arguments, compute
from agent.config import rule_options

HELP = "explain where a label / extended resource / taint comes from (file:line, expression, feature instance, host file) or why it is absent"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="+", metavar="LABEL_OR_RESOURCE", help="label key, extended resource name, annotation key or taint key")
    add_plan_arguments(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    from agent.rules.explain import explain

    result, _ = compute(args)
    explanations = [explain(result, name, rule_options(args)) for name in args.names]
    if args.format == "json":
        json.dump([{"name": e.target, "present": e.present, "known": e.known, "lines": list(e.lines)} for e in explanations], sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n\n".join(e.text() for e in explanations))
    return 0 if all(e.known for e in explanations) else 1
