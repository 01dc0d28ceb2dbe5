"""Configuration flows one way: CLI flags / environment -> these helpers -> components.

Defaults live here, once, and are printed by ``--help``.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from agent.desired import Taint
from agent.discovery import DiscoveryConfig
from agent.sources import SOURCE_NAMES

if TYPE_CHECKING:
    from agent.reconcile.claims import ClaimPolicy
    from agent.rules import Catalogue, RuleOptions
    from agent.worker_config import WorkerConfig

ENV_HOST_ROOT = "HOST_ROOT"
ENV_RULES = "NODE_FEATURE_AGENT_RULES"
ENV_NODE_NAME = "NODE_NAME"
ENV_CONFIG = "NODE_FEATURE_AGENT_CONFIG"
IMAGE_RULES_DIR = "/etc/node-feature-agent/labels"


class ConfigurationError(Exception):
    """A flag, environment value or file named by one that cannot be used; the message is
    one line naming the flag and the path (``agent.preflight`` turns it into exit status 2)."""


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (attempts, timeouts)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def positive_float(text: str) -> float:
    """argparse type: seconds > 0 (finite)."""
    value = _finite(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: seconds >= 0 (finite)."""
    value = _finite(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be >= 0")
    return value


def _finite(text: str) -> float:
    try:
        value = float(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from exc
    if not math.isfinite(value) or abs(value) > 10**9:
        raise argparse.ArgumentTypeError(f"not a usable number of seconds: {text!r}")
    return value


def default_rules_dirs() -> list[str]:
    """``$NODE_FEATURE_AGENT_RULES`` (``:``-separated), else the catalogue shipped beside the
    package (a source checkout), else the image's ``/etc/node-feature-agent/labels``."""
    env = os.environ.get(ENV_RULES, "")
    if env:
        return [p for p in env.split(":") if p]
    beside_package = Path(__file__).resolve().parent.parent / "labels"
    if beside_package.is_dir() and (beside_package.parent / "pyproject.toml").is_file():
        return [str(beside_package)]
    if Path(IMAGE_RULES_DIR).is_dir():
        return [IMAGE_RULES_DIR]
    return [str(packaged_catalogue())]


def packaged_catalogue() -> Path:
    """The catalogue the wheel carries (``agent/labels``, a copy of the repo's ``labels/``),
    so a pip-installed CLI reads the same rules as a checkout."""
    return Path(__file__).resolve().parent / "labels"


def add_host_arguments(parser: argparse.ArgumentParser) -> None:
    """``--host-root`` and ``--sources``: where and what to discover."""
    parser.add_argument(
        "--host-root",
        default=os.environ.get(ENV_HOST_ROOT, "/"),
        help="directory the host's /sys, /proc, /etc, /boot, /lib/modules are under "
        "(default: $HOST_ROOT or /; /host in the DaemonSet; a fixture in tests)",
    )
    parser.add_argument(
        "--allow-partial-host-root",
        action="store_true",
        help="accept a --host-root without sys/ and proc/ (a partial fixture); never on a real node",
    )
    parser.add_argument(
        "--sources",
        default=None,
        help=f"comma-separated discovery sources, overriding core.featureSources of --config "
        f"(default: the config's, else all: {','.join(SOURCE_NAMES)})",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=os.environ.get(ENV_CONFIG, ""),
        help="NFD worker configuration (nfd-worker.conf format: core.labelWhiteList, core.featureSources, "
        "core.labelSources, sources.<name>...; our additions under nodeFeatureAgent:); "
        "default: $NODE_FEATURE_AGENT_CONFIG, else none (NFD's built-in settings). Edits are picked up by `run` "
        "without a restart",
    )


def add_rules_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rules",
        action="append",
        metavar="DIR",
        help="label/rule directory; repeatable (default: $NODE_FEATURE_AGENT_RULES, else the shipped catalogue)",
    )


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """``--rules`` plus the label namespace policy; every command that loads the catalogue
    takes these, so ``plan`` previews exactly what ``apply`` and ``run`` would write."""
    add_rules_arguments(parser)
    parser.add_argument("--deny-label-ns", action="append", default=[], metavar="NS",
                        help="deny a label namespace (exact, or *.suffix); repeatable (NFD -deny-label-ns)")
    parser.add_argument("--extra-label-ns", action="append", default=[], metavar="NS",
                        help="re-allow an exact namespace that is denied, even under kubernetes.io; repeatable (NFD -extra-label-ns)")
    parser.add_argument("--nfd-namespace", default="node-feature-discovery", metavar="NS",
                        help="the namespace NFD ran in: its NodeFeature objects merge first, as nfd-master merges "
                             "its own namespace's first (default: node-feature-discovery)")


def rule_options(args: argparse.Namespace) -> RuleOptions:
    """The ``RuleOptions`` the policy flags ask for (defaults when a command has none)."""
    from agent.rules import RuleOptions

    return RuleOptions(deny_label_ns=tuple(getattr(args, "deny_label_ns", None) or ()),
                       extra_label_ns=tuple(getattr(args, "extra_label_ns", None) or ()),
                       nfd_namespace=getattr(args, "nfd_namespace", None) or "node-feature-discovery")


def add_node_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--node-name", default=os.environ.get(ENV_NODE_NAME, ""), help="this node's name (default: $NODE_NAME)")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG", ""), help="kubeconfig file (default: $KUBECONFIG, else in-cluster config)")


def require_node_name(args: argparse.Namespace) -> str:
    """``--node-name`` (or ``$NODE_NAME``); ``ConfigurationError`` without one."""
    if not getattr(args, "node_name", ""):
        raise ConfigurationError("no node name: pass --node-name or set NODE_NAME")
    return str(args.node_name)


def add_reconcile_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of the one-pass commands that write a Node (``apply`` and ``clean``)."""
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.add_argument("--retries", type=positive_int, default=5, metavar="N",
                        help="attempts per API call on 5xx/429/network errors (backoff 0.8 s doubling to 30 s) before giving up")
    parser.add_argument("--no-events", action="store_true", help="do not record Kubernetes Events on the Node")


def parse_startup_taints(texts: Iterable[str]) -> list[Taint]:
    """The ``--startup-taint KEY[=VALUE]:EFFECT`` values, each checked as the API server would
    check a taint; ``ConfigurationError`` naming the first bad one."""
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


def selected_sources(args: argparse.Namespace) -> list[str]:
    """``--sources`` if given, else ``core.featureSources`` of ``--config``, else all (NFD's
    ``-feature-sources`` flag overrides the file the same way)."""
    if getattr(args, "sources", None) is None:
        loaded = worker_config(args)
        return list(loaded.feature_sources) if loaded is not None else list(SOURCE_NAMES)
    names = [s.strip() for s in args.sources.split(",") if s.strip()]
    unknown = [n for n in names if n not in SOURCE_NAMES]
    if unknown:
        raise ConfigurationError(f"--sources: unknown source(s): {', '.join(unknown)} (known: {', '.join(SOURCE_NAMES)})")
    if not names:
        raise ConfigurationError("--sources is empty")
    return names


def worker_config(args: argparse.Namespace) -> WorkerConfig | None:
    """The ``--config`` file's ``WorkerConfig`` (loaded once per command), or None without one;
    ``ConfigurationError`` naming file:line for a missing or invalid file."""
    path = getattr(args, "config", "") or ""
    if not path:
        return None
    cached: tuple[str, WorkerConfig] | None = getattr(args, "_worker_config", None)
    if cached is not None and cached[0] == path:
        return cached[1]
    from agent.worker_config import WorkerConfigError, load_worker_config

    if not os.path.isfile(path):
        raise ConfigurationError(f"--config {path!r} does not exist or is not a file")
    try:
        loaded = load_worker_config(path, node_name_of(args))
    except WorkerConfigError as exc:
        raise ConfigurationError("--config: " + "; ".join(str(p) for p in exc.problems)) from exc
    for warning in loaded.warnings:
        import logging

        logging.getLogger(__name__).warning("--config: %s", warning, extra={"event": "config-warning"})
    args._worker_config = (path, loaded)
    return loaded


def node_name_of(args: argparse.Namespace) -> str:
    return getattr(args, "node_name", "") or os.environ.get(ENV_NODE_NAME, "")


def rules_dirs(args: argparse.Namespace) -> list[str]:
    return list(args.rules) if getattr(args, "rules", None) else default_rules_dirs()


def discovery_config(args: argparse.Namespace) -> DiscoveryConfig:
    """The ``--config`` file's discovery settings (NFD's defaults without one) for this node."""
    loaded = worker_config(args)
    if loaded is None:
        return DiscoveryConfig(node_name=node_name_of(args))
    return loaded.discovery


def claim_policy(options: RuleOptions | None, catalogue_fn: Callable[[], Catalogue],
                 startup_taints: Iterable[Taint | tuple[str, str]] = ()) -> ClaimPolicy:
    """What the reconciler may claim from the Node's ownership record: keys the label
    namespace policy allows, taint keys the current catalogue (``catalogue_fn()``) or
    ``--startup-taint`` can produce (``agent.reconcile.claims``)."""
    from agent.reconcile.claims import ClaimPolicy
    from agent.rules import RuleOptions
    from agent.rules.namespaces import namespace_problem

    policy = options if options is not None else RuleOptions()
    startup_keys = frozenset(t.key if isinstance(t, Taint) else t[0] for t in startup_taints)
    return ClaimPolicy(key_problem=lambda key: namespace_problem(key, policy),
                       taint_keys=lambda: catalogue_fn().taint_keys() | startup_keys)
