"""``discover``: run the discovery sources on a host root and print labels, features, errors."""

from __future__ import annotations

import argparse
import json
import sys

from agent.config import add_host_arguments, discovery_config, selected_sources
from agent.discovery import Discovery, discover
from agent.hostfs import HostFS

HELP = "discover this host's (or a fixture's) features and print NFD-compatible labels; no cluster needed"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    parser.add_argument("--format", choices=("json", "table"), default="json", help="output format")
    parser.add_argument("--node-name", default="", help="value for system.name.nodename (default: $NODE_NAME)")


def render_table(result: Discovery) -> str:
    """A person's view: labels, then feature counts per source, then errors."""
    lines = [f"LABELS ({len(result.labels)})"]
    width = max((len(k) for k in result.labels), default=0)
    lines += [f"  {k.ljust(width)}  {v}" for k, v in result.labels.items()]
    lines.append("")
    lines.append("FEATURES")
    for key, feat in sorted(result.features.items()):
        parts = []
        if feat.flags:
            parts.append(f"{len(feat.flags)} flags")
        if feat.attributes:
            parts.append(f"{len(feat.attributes)} attributes")
        if feat.instances:
            parts.append(f"{len(feat.instances)} instances")
        lines.append(f"  {key:<24} {', '.join(parts) or 'empty'}")
    lines.append("")
    lines.append(f"ERRORS ({len(result.errors)})")
    lines += [f"  {e}" for e in result.errors]
    timing = ", ".join(f"{n} {d * 1000:.1f}ms" for n, d in sorted(result.durations.items()))
    lines.append("")
    lines.append(f"took: {timing}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    host = HostFS(args.host_root)
    result = discover(host, discovery_config(args), selected_sources(args))
    if args.format == "json":
        json.dump(result.to_json(), sys.stdout, indent=2, sort_keys=False)
        sys.stdout.write("\n")
    else:
        print(render_table(result))
    return 0
