"""Checks every command runs on its flags before it reads a host or touches a Node.

Why: a wrong flag must never strip a Node. A host root that is not a host (a typo, an empty
directory, a file) discovers nothing, and "nothing" would be reconciled as "every device left";
a rules directory that does not exist desires no generalized labels, and the reconciler would
remove them. So both are refused up front, with one line on stderr and exit status
:data:`EXIT_CONFIG`, before anything is written.

Exit statuses shared by every command (deploy/operating.md, "Exit codes and start-up checks"):

- 0: done;
- 1: the work failed at run time (an API error that outlasted the retries, a port in use);
- 2: bad usage or configuration (:class:`agent.config.ConfigurationError`): nothing was written.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterable

from agent.config import ConfigurationError, rules_dirs, selected_sources, worker_config

__all__ = ["EXIT_CONFIG", "EXIT_OK", "EXIT_RUNTIME", "ConfigurationError", "check_args", "check_host_root",
           "check_rules_dirs"]

EXIT_OK = 0
EXIT_RUNTIME = 1
EXIT_CONFIG = 2

#: directories a real host root always has; discovery of a root without them finds nothing
REQUIRED_HOST_DIRS = ("sys", "proc")


def check_host_root(path: str, *, allow_partial: bool = False) -> None:
    """``path`` must be a directory; unless ``allow_partial``, with ``sys`` and ``proc`` in it."""
    if not path:
        raise ConfigurationError("--host-root is empty")
    if not os.path.exists(path):
        raise ConfigurationError(f"--host-root {path!r} does not exist")
    if not os.path.isdir(path):
        raise ConfigurationError(f"--host-root {path!r} is not a directory")
    if allow_partial:
        return
    missing = [name for name in REQUIRED_HOST_DIRS if not os.path.isdir(os.path.join(path, name))]
    if missing:
        raise ConfigurationError(
            f"--host-root {path!r} has no {' or '.join(missing)} directory: not a host root "
            "(mount the host's / there, or pass --allow-partial-host-root for a partial fixture)")


def check_rules_dirs(dirs: Iterable[str]) -> None:
    """Every rules directory must exist, be a directory and be listable."""
    dirs = list(dirs)
    if not dirs:
        raise ConfigurationError("no rules directory (pass --rules DIR)")
    for directory in dirs:
        if not os.path.exists(directory):
            raise ConfigurationError(f"--rules {directory!r} does not exist")
        if not os.path.isdir(directory):
            raise ConfigurationError(f"--rules {directory!r} is not a directory")
        try:
            os.listdir(directory)
        except OSError as exc:
            raise ConfigurationError(f"--rules {directory!r} cannot be listed: {exc.strerror or exc}") from exc


#: the commands that only read a host root, so may replay a snapshot archive as one
REPLAY_COMMANDS = ("discover", "plan", "explain")


def replay_archive(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    """A ``--host-root`` that is a snapshot archive (``snapshot --output X.tar.gz``) is unpacked
    into a private temporary directory, removed when ``stack`` closes, which becomes the host
    root (``agent.snapshot.extract_snapshot``: no path escape, bounded size). Only the
    read-only commands take one: a Node is never written from a recording."""
    path = getattr(args, "host_root", "")
    if not path or not os.path.isfile(path):
        return
    from agent.snapshot import SnapshotError, extract_snapshot, is_tarball

    if not is_tarball(path):
        return
    if getattr(args, "command", "") not in REPLAY_COMMANDS:
        raise ConfigurationError(f"--host-root {path!r} is a snapshot archive: only {', '.join(REPLAY_COMMANDS)} "
                                 "replay one")
    into = stack.enter_context(tempfile.TemporaryDirectory(prefix="nfa-replay-"))
    try:
        extract_snapshot(path, into)
    except SnapshotError as exc:
        raise ConfigurationError(f"--host-root {exc}") from exc
    args.host_root = into


def check_args(args: argparse.Namespace) -> None:
    """The checks that apply to whichever of these flags the command has."""
    if hasattr(args, "host_root"):
        check_host_root(args.host_root, allow_partial=getattr(args, "allow_partial_host_root", False))
    if hasattr(args, "sources"):
        worker_config(args)  # --config: file:line errors, exit 2, before anything runs
        selected_sources(args)
    if hasattr(args, "rules"):
        check_rules_dirs(rules_dirs(args))
