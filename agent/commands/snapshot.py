"""``snapshot``: record the host files discovery reads into a tree ``discover`` replays exactly."""

from __future__ import annotations

import argparse
import logging
import sys

from agent.config import add_host_arguments, discovery_config, selected_sources

HELP = "record the host files discovery reads into a directory or .tar.gz that discover --host-root replays exactly"

log = logging.getLogger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_host_arguments(parser)
    parser.add_argument(
        "--output",
        required=True,
        metavar="DIR|FILE.tar.gz",
        help="new or empty directory, or an archive path ending in .tar.gz/.tgz (discover, plan and explain "
        "--host-root read the archive as it is)",
    )
    parser.add_argument("--node-name", default="", help="value for system.name.nodename (default: $NODE_NAME)")


def run(args: argparse.Namespace) -> int:
    from agent.snapshot import SnapshotError, take_snapshot

    try:
        result = take_snapshot(args.output, args.host_root, discovery_config(args), selected_sources(args))
    except SnapshotError as exc:
        log.error("snapshot failed: %s", exc)
        print(f"snapshot failed: {exc}", file=sys.stderr)
        return 1
    print(
        f"snapshot of {args.host_root} written to {result.output}: {result.files} files, "
        f"{result.links} symlinks, {result.directories} directories, "
        f"{len(result.discovery.labels)} labels, {len(result.notes)} note(s)"
    )
    for note in result.notes:
        print(f"  note: {note}")
    return 0
