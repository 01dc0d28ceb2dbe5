#!/usr/bin/env python3
"""Write the DeviceClasses the catalogue implies (``agent.dra.classes``) to
``deploy/device-classes.yaml`` (``resource.k8s.io/v1``), ``deploy/device-classes-v1beta1.yaml``
(1.32-1.33) and the chart's ``templates/deviceclasses.yaml``, which holds both and renders the
one the cluster serves (``nfa.deviceClassVersion`` in ``_helpers.tpl``).

    python deploy/render_device_classes.py            # print
    python deploy/render_device_classes.py --write    # update the three files
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "deploy" / "device-classes.yaml"
SHIPPED_V1BETA1 = REPO / "deploy" / "device-classes-v1beta1.yaml"
CHART = REPO / "deploy" / "helm" / "node-feature-agent" / "templates" / "deviceclasses.yaml"


def rendered() -> tuple[str, str, str]:
    """(the v1 file, the v1beta1 file, the chart template)."""
    sys.path.insert(0, str(REPO))
    from agent.dra.classes import render
    from agent.rules.loader import load_catalogue

    catalogue = load_catalogue([str(REPO / "labels")])
    v1, v1beta1 = render(catalogue, "v1"), render(catalogue, "v1beta1")
    chart = ("{{- if .Values.dra.deviceClasses }}\n"
             '{{- if eq (include "nfa.deviceClassVersion" .) "v1" }}\n' + v1 +
             "{{- else }}\n" + v1beta1 +
             "{{- end }}\n{{- end }}\n")
    return v1, v1beta1, chart


def main() -> int:
    v1, v1beta1, chart = rendered()
    if "--write" in sys.argv[1:]:
        SHIPPED.write_text(v1)
        SHIPPED_V1BETA1.write_text(v1beta1)
        CHART.write_text(chart)
    else:
        print(v1, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
