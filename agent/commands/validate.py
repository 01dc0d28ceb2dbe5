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
    parser.add_argument("--device-classes", metavar="FILE",
                        help="also check these DeviceClasses' CEL selectors (deploy/device-classes.yaml or "
                             "device-classes-v1beta1.yaml); without it, the classes the catalogue implies (v1 and "
                             "v1beta1) are checked")


def run(args: argparse.Namespace) -> int:
    from agent import rules

    dirs = rules_dirs(args)
    catalogue = rules.load_catalogue(dirs, rule_options(args))
    for problem in catalogue.problems:
        print(f"error: {problem}", file=sys.stderr)
    for warning in catalogue.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    rule_count = sum(1 for _ in catalogue.rules())
    class_problems = device_class_problems(catalogue, getattr(args, "device_classes", None))
    for text in class_problems:
        print(f"error: DeviceClass {text}", file=sys.stderr)
    failed = bool(catalogue.problems or class_problems) or (args.strict and bool(catalogue.warnings))
    status = "FAILED" if failed else "ok"
    print(f"{status}: {len(catalogue.files)} file(s), {rule_count} rule(s), {len(catalogue.label_files)} label file(s), "
          f"{len(catalogue.problems) + len(class_problems)} error(s), {len(catalogue.warnings)} warning(s) in {', '.join(dirs)}")
    return 1 if failed else 0


def device_class_problems(catalogue: object, path: str | None) -> list[str]:
    """The CEL problems of the DeviceClasses in ``path``, or of those the catalogue implies."""
    import yaml

    from agent.dra.cel_check import available, problems
    from agent.dra.classes import VERSIONS, class_name, device_classes, resources

    if not available():
        print("warning: DeviceClass CEL not checked: cel-python is not installed on this platform", file=sys.stderr)
        return []
    known = {class_name(r): r for r in resources(catalogue)}  # type: ignore[arg-type]
    if path is None:
        return [p for version in VERSIONS
                for p in problems(device_classes(catalogue, version), known)]  # type: ignore[arg-type]
    try:
        with open(path, encoding="utf-8") as handle:
            docs = [d for d in yaml.safe_load_all(handle) if isinstance(d, dict) and d.get("kind") == "DeviceClass"]
    except (OSError, yaml.YAMLError) as exc:
        return [f"{path}: cannot read: {exc}"]
    return problems(docs, known)
