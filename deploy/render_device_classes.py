#!/usr/bin/env python3
"""Write the DeviceClasses the catalogue implies (``agent.dra.classes``) to
``deploy/device-classes.yaml`` and the chart's ``templates/deviceclasses.yaml``.

    python deploy/render_device_classes.py            # print
    python deploy/render_device_classes.py --write    # update both files
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHIPPED = REPO / "deploy" / "device-classes.yaml"
CHART = REPO / "deploy" / "helm" / "node-feature-agent" / "templates" / "deviceclasses.yaml"


def rendered() -> tuple[str, str]:
    sys.path.insert(0, str(REPO))
    from agent.dra.classes import render
    from agent.rules.loader import load_catalogue

    text = render(load_catalogue([str(REPO / "labels")]))
    return text, "{{- if .Values.dra.deviceClasses }}\n" + text + "{{- end }}\n"


def main() -> int:
    shipped, chart = rendered()
    if "--write" in sys.argv[1:]:
        SHIPPED.write_text(shipped)
        CHART.write_text(chart)
    else:
        print(shipped, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
