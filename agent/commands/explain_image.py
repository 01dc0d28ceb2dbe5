"""``explain-image REF``: which platforms an image runs on, asked of its registry.

Prints each platform exactly as the registry states it, the index entries skipped and why
(attestations, SBOMs), the digests, and where the answer came from. Credentials come from
``--pull-secret FILE`` (the contents of a ``.dockerconfigjson`` or ``.dockercfg``, or a Docker
CLI ``config.json``), matched to the image as kubelet matches them.

Exit status: 0 answered; 2 for any error, as one line quoting the registry's own words
(``error: explain-image: REF: registry HOST answered HTTP 404: MANIFEST_UNKNOWN: ...``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from agent.preflight import EXIT_CONFIG

HELP = "which os/architecture/variant an image runs on, from its registry (platforms, skipped entries, digests)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("reference", metavar="REF", help="image reference, as in a pod spec (nginx, host:port/repo:tag, ...@sha256:...)")
    parser.add_argument("--pull-secret", action="append", default=[], metavar="FILE",
                        help="file with a pull secret's .dockerconfigjson or .dockercfg contents (repeatable, in pod order)")
    parser.add_argument("--insecure-registry", action="append", default=[], metavar="HOST[:PORT]",
                        help="reach this registry over plain HTTP; matched whole against the image's registry as "
                             "Docker's insecure-registries are, so a registry on a port needs HOST:PORT (repeatable)")
    parser.add_argument("--ca-file", metavar="FILE", help="PEM CA bundle trusted for HTTPS registries instead of the system's")
    parser.add_argument("--pull-always", action="store_true", help="as for imagePullPolicy: Always (no cached tag)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds for the whole lookup, retries included")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def run(args: argparse.Namespace) -> int:
    from agent.images import (
        ImageError,
        Keyring,
        PullSecretError,
        Resolver,
        ResolverConfig,
        parse_pull_secret,
    )

    try:
        keyring = Keyring([parse_pull_secret(Path(path).read_bytes()) for path in args.pull_secret])
    except OSError as exc:
        return _fail(f"--pull-secret {exc.filename!r}: {exc.strerror}")
    except PullSecretError as exc:
        return _fail(str(exc))
    if args.ca_file and not Path(args.ca_file).is_file():
        return _fail(f"--ca-file {args.ca_file!r} is not a file")
    if not args.timeout > 0:
        return _fail("--timeout must be positive")
    config = ResolverConfig(insecure_registries=frozenset(args.insecure_registry), ca_file=args.ca_file,
                            total_timeout=args.timeout)
    resolver = Resolver(config)
    try:
        answer = resolver.resolve(args.reference, keyring, pull_always=args.pull_always)
    except ImageError as exc:
        return _fail(str(exc))
    finally:
        resolver.close()
    if args.format == "json":
        json.dump(answer.to_json(), sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    rows = [("reference", answer.reference), ("canonical", answer.canonical),
            ("digest", f"{answer.digest} ({answer.media_type})"), ("source", answer.source)]
    rows += [("platform", _platform_text(p.to_json())) for p in answer.platforms]
    rows += [("skipped", f"{s.digest} {s.reason}") for s in answer.skipped]
    print("\n".join(f"{name:<10} {value}" for name, value in rows))
    return 0


def _platform_text(fields: dict[str, str]) -> str:
    name = "/".join(fields[k] for k in ("os", "architecture", "variant") if k in fields)
    return f"{name} (os.version {fields['os.version']})" if "os.version" in fields else name


def _fail(message: str) -> int:
    print(f"error: explain-image: {message}", file=sys.stderr)
    return EXIT_CONFIG
