"""``validate``: load the rule catalogue and report every problem as ``file:line: item: why``.

Exit status: 0 when clean (warnings are printed but do not fail), 1 on any error, so CI and
a pre-commit hook can gate label and rule changes.
"""

from __future__ import annotations

import argparse
import sys

from agent.config import add_policy_arguments, rule_options, rules_dirs

HELP = "check label files and NodeFeatureRule YAML; exit non-zero with file:line messages on any error"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_policy_arguments(parser)
    parser.add_argument("--strict", action="store_true", help="treat warnings (ignored files, duplicates) as errors")


def run(args: argparse.Namespace) -> int:
    from agent import rules

    dirs = rules_dirs(args)
    catalogue = rules.load_catalogue(dirs, rule_options(args))
    for problem in catalogue.problems:
        print(f"error: {problem}", file=sys.stderr)
    for warning in catalogue.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    rule_count = sum(1 for _ in catalogue.rules())
    failed = bool(catalogue.problems) or (args.strict and bool(catalogue.warnings))
    status = "FAILED" if failed else "ok"
    print(f"{status}: {len(catalogue.files)} file(s), {rule_count} rule(s), {len(catalogue.label_files)} label file(s), "
          f"{len(catalogue.problems)} error(s), {len(catalogue.warnings)} warning(s) in {', '.join(dirs)}")
    return 1 if failed else 0
