"""Small builders for rule tests: features and catalogues from plain data, no host needed."""

from __future__ import annotations

import textwrap
from pathlib import Path

from agent import rules
from agent.features import Feature, Instance


def flags(*names: str, origin: str = "/proc/modules") -> Feature:
    return Feature(flags=frozenset(names), origin=origin)


def attrs(origin: str = "/etc/os-release", **values: str) -> Feature:
    return Feature(attributes=values, origin=origin)


def instances(*items: dict, origin: str = "/sys/bus/pci/devices") -> Feature:
    return Feature(instances=tuple(Instance(dict(i), f"{origin}/{n}") for n, i in enumerate(items)), origin=origin)


def nfr(rules_yaml: str, name: str = "test") -> str:
    body = textwrap.indent(textwrap.dedent(rules_yaml).strip("\n"), "    ")
    return f"apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata:\n  name: {name}\nspec:\n  rules:\n{body}\n"


def catalogue_from(tmp_path: Path, files: dict[str, str | bytes], options=None):
    for relative, content in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return rules.load_catalogue([str(tmp_path)], options)


def plan_for(tmp_path: Path, files: dict[str, str | bytes], features=None, raw=None, node=None, options=None):
    catalogue = catalogue_from(tmp_path, files, options)
    return catalogue, rules.derive(features or {}, raw or {}, node or {}, catalogue, options)
