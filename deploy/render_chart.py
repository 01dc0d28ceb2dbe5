#!/usr/bin/env python3
"""Render the Helm chart with a real Helm engine, for the tests and for a look before installing.

The engine is helm-python-sdk (PyPI ``helm-python-sdk``): Helm v4's own Go SDK behind a C ABI,
loaded with ctypes, so the chart is rendered by the code ``helm template`` runs, without a helm
binary. It needs Python >= 3.12, so it lives in a side virtual environment (``.venv-helm``,
made by ``.ci/run``) and the tests, on the project's Python, call this script there.

    .venv-helm/bin/python deploy/render_chart.py                          # the default values
    .venv-helm/bin/python deploy/render_chart.py --set-json '{"udev": {"mode": "poll"}}'
    .venv-helm/bin/python deploy/render_chart.py --kube-version v1.33.4    # as for that cluster
    .venv-helm/bin/python deploy/render_chart.py --cases cases.json       # {name: case} -> JSON

``--kube-version`` and ``--api-versions`` are ``helm template``'s: what the chart sees as the
cluster (``.Capabilities``; ``helm install`` fills them from the cluster itself). Without them
the engine's defaults apply (this SDK: Kubernetes v1.36.0, no optional APIs).

With ``--cases`` (a JSON object: case name -> ``{"values": {...}, "kube_version": "v1.33.0",
"api_versions": [...]}``, the last two optional) it prints one JSON object: case name ->
either ``{"manifests": {template: text}}`` or ``{"error": message}`` (a values error, a
``fail`` in a template, or a cluster outside the chart's ``kubeVersion``), so one engine start
renders the whole test matrix. Otherwise it prints the manifests as ``helm template`` does and
exits 1 on a render error.
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


def render(values: dict[str, Any], kube_version: str = "", api_versions: list[str] | None = None) -> dict[str, str]:
    """Template path -> rendered text, as ``helm template nfa CHART -n node-feature-agent
    [--kube-version V] [--api-versions A ...]``. The SDK's ``Chart.render`` does not take the
    last two, so the call is the one it makes, with the engine's own render options
    (helm-python-sdk 0.2.2, pinned in .ci/run)."""
    import helm_python  # type: ignore[import-not-found,unused-ignore]  # the side environment's
    from helm_python import _native  # type: ignore[import-not-found,unused-ignore]

    chart = helm_python.Chart.load(CHART)
    options: dict[str, Any] = {"name": RELEASE, "namespace": NAMESPACE, "is_install": True}
    if kube_version:
        options["kube_version"] = kube_version
    if api_versions:
        options["api_versions"] = list(api_versions)
    manifests: dict[str, str] = json.loads(_native.call_string("helm_render", chart._raw(), json.dumps(values),
                                                               json.dumps(options)))
    return manifests


def render_cases(cases: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    import helm_python  # type: ignore[import-not-found,unused-ignore]  # the side environment's

    out: dict[str, dict[str, Any]] = {}
    for name, case in cases.items():
        try:
            out[name] = {"manifests": render(case.get("values", {}), case.get("kube_version", ""),
                                             case.get("api_versions"))}
        except helm_python.HelmError as exc:
            out[name] = {"error": str(exc)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--set-json", default="{}", metavar="JSON", help="values to merge over values.yaml")
    parser.add_argument("--kube-version", default="", metavar="VERSION", help="the cluster's version, e.g. v1.33.4")
    parser.add_argument("--api-versions", action="append", default=[], metavar="GROUP/VERSION[/KIND]",
                        help="an API the cluster serves (repeatable)")
    parser.add_argument("--cases", type=Path, metavar="FILE", help="JSON {case name: case}: render each, print JSON")
    args = parser.parse_args(argv)
    if args.cases:
        json.dump(render_cases(json.loads(args.cases.read_text())), sys.stdout)
        return 0
    import helm_python  # type: ignore[import-not-found,unused-ignore]  # the side environment's

    try:
        manifests = render(json.loads(args.set_json), args.kube_version, args.api_versions)
    except helm_python.HelmError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for path, text in sorted(manifests.items()):
        if path.endswith(".yaml") and text.strip():
            print(f"---\n# Source: {path}\n{text.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
