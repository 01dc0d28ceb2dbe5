#!/usr/bin/env python3
"""Render the Helm chart with a real Helm engine, for the tests and for a look before installing.

The engine is helm-python-sdk (PyPI ``helm-python-sdk``): Helm v4's own Go SDK behind a C ABI,
loaded with ctypes, so the chart is rendered by the code ``helm template`` runs, without a helm
binary. It needs Python >= 3.12, so it lives in a side virtual environment (``.venv-helm``,
made by ``.ci/run``) and the tests, on the project's Python, call this script there.

    .venv-helm/bin/python deploy/render_chart.py                          # the default values
    .venv-helm/bin/python deploy/render_chart.py --set-json '{"udev": {"mode": "poll"}}'
    .venv-helm/bin/python deploy/render_chart.py --cases cases.json       # {name: values} -> JSON

With ``--cases`` it prints one JSON object: case name -> either ``{"manifests": {template:
text}}`` or ``{"error": message}`` (a values error or a ``fail`` in a template), so one engine
start renders the whole test matrix. Otherwise it prints the manifests as ``helm template``
does and exits 1 on a render error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

CHART = Path(__file__).resolve().parent / "helm" / "node-feature-agent"
RELEASE = "nfa"
NAMESPACE = "node-feature-agent"


def render(values: dict[str, Any]) -> dict[str, str]:
    """Template path -> rendered text, as ``helm template nfa CHART -n node-feature-agent``."""
    import helm_python  # type: ignore[import-not-found,unused-ignore]  # the side environment's

    chart = helm_python.Chart.load(CHART)
    manifests: dict[str, str] = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return manifests


def render_cases(cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    import helm_python  # type: ignore[import-not-found,unused-ignore]  # the side environment's

    out: dict[str, dict[str, Any]] = {}
    for name, values in cases.items():
        try:
            out[name] = {"manifests": render(values)}
        except helm_python.HelmError as exc:
            out[name] = {"error": str(exc)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--set-json", default="{}", metavar="JSON", help="values to merge over values.yaml")
    parser.add_argument("--cases", type=Path, metavar="FILE", help="JSON {case name: values}: render each, print JSON")
    args = parser.parse_args(argv)
    if args.cases:
        json.dump(render_cases(json.loads(args.cases.read_text())), sys.stdout)
        return 0
    import helm_python  # type: ignore[import-not-found,unused-ignore]  # the side environment's

    try:
        manifests = render(json.loads(args.set_json))
    except helm_python.HelmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml") and text.strip():
            print(f"---\n# Source: {path}\n{text.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
