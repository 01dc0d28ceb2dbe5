#!/usr/bin/env python3
"""Generate the label/rule catalogue ConfigMap (and its volume ``items:``) from ``labels/``.

ConfigMap keys cannot contain ``/`` but the catalogue is a tree (``labels/<namespace>/<name>``),
so every file gets a flat key (``accelerators/edgetpu`` -> ``accelerators.edgetpu``) and the
DaemonSet's configMap volume maps each key back to its path with ``items:``.  The agent also
reads the flat form directly (a ConfigMap mounted without ``items:``): a label file's flat
key splits at its *last* dot (``agent/rules/label_files.py``), so a label file whose name
holds a dot would read back as a different label and is refused here.  Both blocks live
in ``daemonset.yaml`` between ``# BEGIN GENERATED: <block>`` / ``# END GENERATED: <block>``
markers; ``tests/test_manifests.py`` fails when they drift from ``labels/``.

    python deploy/render_catalogue_configmap.py                  # print both blocks
    python deploy/render_catalogue_configmap.py --write daemonset.yaml
    python deploy/render_catalogue_configmap.py --check daemonset.yaml   # exit 1 if stale
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
DEFAULT_LABELS = REPO / "labels"
CONFIGMAP_NAME = "node-feature-agent-catalogue"
NAMESPACE = "node-feature-agent"
MAX_CONFIGMAP_BYTES = 900 * 1024
"""Kubernetes caps a ConfigMap at 1 MiB (etcd object limit); stay clear of it."""
_KEY_UNSAFE = re.compile(r"[^-._a-zA-Z0-9]")
_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)# BEGIN GENERATED: (?P<name>[-a-z]+)[^\n]*\n(?P<body>.*?)^(?P=indent)# END GENERATED: (?P=name)[^\n]*$",
    re.MULTILINE | re.DOTALL,
)


class CatalogueError(Exception):
    """The catalogue cannot be put in a ConfigMap (binary file, key clash, too large)."""


@dataclass(frozen=True)
class CatalogueFile:
    path: str  # relative to labels/, '/'-separated
    key: str  # ConfigMap key
    text: str


def config_map_key(relative_path: str) -> str:
    """``accelerators/edgetpu`` -> ``accelerators.edgetpu``; other characters a key may not hold -> ``-``."""
    return _KEY_UNSAFE.sub("-", relative_path.replace("/", "."))


_DOC_SUFFIXES = (".md", ".txt", ".rst")
_DOC_PREFIXES = ("readme", "license", "notice", "owners", "changelog")


def is_label_file(relative_path: str) -> bool:
    """``<namespace>/<name>`` that is neither YAML nor documentation (the agent's loader rule)."""
    parts = relative_path.split("/")
    name = parts[-1].lower()
    return len(parts) == 2 and not name.endswith((".yaml", ".yml") + _DOC_SUFFIXES) and not name.startswith(_DOC_PREFIXES)


def catalogue_files(labels_dir: Path) -> list[CatalogueFile]:
    """Every non-hidden regular file under ``labels_dir`` (hidden files and dirs are editor/VCS junk)."""
    files: list[CatalogueFile] = []
    seen: dict[str, str] = {}
    for path in sorted(labels_dir.rglob("*")):
        relative = path.relative_to(labels_dir).as_posix()
        if any(part.startswith(".") or part == "__pycache__" for part in relative.split("/")) or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise CatalogueError(f"{path}: not UTF-8 text ({exc.reason}); the catalogue holds text files only") from exc
        key = config_map_key(relative)
        if is_label_file(relative) and ("." in relative.split("/")[1] or key != relative.replace("/", ".")):
            raise CatalogueError(f"{path}: label file name must not contain '.' or characters a ConfigMap key cannot hold: "
                                 f"its flat key {key!r} would not read back as {relative!r}")
        if key in (".", "..") or key.startswith(".."):
            raise CatalogueError(f"{path}: maps to the reserved ConfigMap key {key!r}")
        if key in seen:
            raise CatalogueError(f"{path}: ConfigMap key {key!r} is also the key of {seen[key]}; rename one of them")
        seen[key] = relative
        files.append(CatalogueFile(relative, key, text))
    size = sum(len(f.text.encode()) + len(f.key) for f in files)
    if size > MAX_CONFIGMAP_BYTES:
        raise CatalogueError(f"catalogue is {size} bytes; a ConfigMap holds at most ~1 MiB: split it or bake it into the image")
    return files


class _LiteralDumper(yaml.SafeDumper):
    """Multi-line strings as ``|`` blocks, so the ConfigMap reads like the files it holds."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_presenter)


def _dump(data: object) -> str:
    return yaml.dump(data, Dumper=_LiteralDumper, sort_keys=False, default_flow_style=False, width=1000)


def configmap_object(files: list[CatalogueFile], name: str = CONFIGMAP_NAME, namespace: str = NAMESPACE) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "node-feature-agent", "app.kubernetes.io/component": "catalogue"},
        },
        "data": {f.key: f.text for f in files},
    }


def volume_items(files: list[CatalogueFile]) -> list[dict[str, str]]:
    return [{"key": f.key, "path": f.path} for f in files]


def rendered_blocks(labels_dir: Path = DEFAULT_LABELS) -> dict[str, str]:
    """Block name -> YAML text (unindented) for every generated block in daemonset.yaml."""
    files = catalogue_files(labels_dir)
    return {
        "catalogue-configmap": _dump(configmap_object(files)),
        "catalogue-items": _dump({"items": volume_items(files)}),
    }


def replace_blocks(manifest: str, blocks: dict[str, str]) -> str:
    """``manifest`` with every generated block's body replaced (indented like its markers)."""
    found: set[str] = set()

    def substitute(match: re.Match[str]) -> str:
        name, indent = match.group("name"), match.group("indent")
        if name not in blocks:
            raise CatalogueError(f"unknown generated block {name!r}")
        found.add(name)
        body = "".join(f"{indent}{line}\n" if line else "\n" for line in blocks[name].rstrip("\n").split("\n"))
        head = match.group(0).split("\n", 1)[0]
        return f"{head}\n{body}{indent}# END GENERATED: {name}"

    result = _BLOCK.sub(substitute, manifest)
    missing = set(blocks) - found
    if missing:
        raise CatalogueError(f"no '# BEGIN GENERATED: {sorted(missing)[0]}' marker in the manifest")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--labels", type=Path, default=DEFAULT_LABELS, help="catalogue directory (default: labels/)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", type=Path, metavar="MANIFEST", help="rewrite the generated blocks in MANIFEST")
    action.add_argument("--check", type=Path, metavar="MANIFEST", help="exit 1 if MANIFEST's generated blocks are stale")
    args = parser.parse_args(argv)
    try:
        blocks = rendered_blocks(args.labels)
        if args.write or args.check:
            manifest = (args.write or args.check).read_text()
            updated = replace_blocks(manifest, blocks)
    except (CatalogueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.write:
        if updated != manifest:
            args.write.write_text(updated)
            print(f"{args.write}: catalogue blocks updated")
        return 0
    if args.check:
        if updated != manifest:
            print(f"{args.check}: catalogue blocks are stale; run python deploy/render_catalogue_configmap.py --write {args.check}", file=sys.stderr)
            return 1
        return 0
    for name, text in blocks.items():
        sys.stdout.write(f"# {name}\n{text}---\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
