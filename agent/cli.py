"""``node-feature-agent`` command line: one subcommand per module in ``agent/commands/``
(``explain-image`` is ``explain_image.py``).

Each command module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``.  Modules import heavy dependencies (the Kubernetes client, pyudev)
inside ``run`` so ``discover`` stays fast.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys
from typing import NoReturn

from agent import __version__
from agent.kube.connect import ClientConfigError
from agent.logs import setup_logging
from agent.preflight import EXIT_CONFIG, ConfigurationError, check_args, replay_archive

COMMANDS = ("discover", "plan", "explain", "explain-image", "validate", "apply", "clean", "run", "snapshot", "placement")


class OneLineErrorParser(argparse.ArgumentParser):
    """Usage errors as one line on stderr (``error: <command>: <why>``) and exit status 2,
    instead of argparse's usage block: a log collector keeps the reason in one record."""

    def error(self, message: str) -> NoReturn:  # argparse's hook
        self.exit(2, f"error: {self.prog}: {' '.join(message.split())} (see --help)\n")


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Each flag's help ends with ``(default: X)``, once: not when the help already states its
    default (``default: $NODE_NAME``), nor when the default says nothing (unset, off, empty)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text.lower() or action.default in (None, False, "", []) or action.default is argparse.SUPPRESS:
            return text
        return super()._get_help_string(action) or text


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(
        prog="node-feature-agent",
        description="Discover this node's hardware, map it to generalized labels and extended resources, and keep its Node object in step.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-format", choices=("auto", "json", "text"), default="auto", help="log format (auto: text on a terminal, JSON otherwise)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                        help="least severe log records written")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        module_name = f"agent.commands.{name.replace('-', '_')}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue  # command not built in this checkout
            raise
        cmd = sub.add_parser(name, help=module.HELP, description=module.HELP, formatter_class=HelpFormatter)
        module.add_arguments(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.log_format, args.log_level)
    try:
        with contextlib.ExitStack() as stack:
            replay_archive(args, stack)
            check_args(args)
            return int(args._run(args) or 0)
    except (ConfigurationError, ClientConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
