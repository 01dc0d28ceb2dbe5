"""Run one of the Go recorders in tests/oracle and write its corpus (shared by the generators)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path


def record(go: str, program: Path, cases: list[dict], out: Path, generator: str) -> list[dict]:
    """``go run program`` with ``cases`` as JSON on stdin; the results, with the Go version,
    go to ``out``. No module, no network: the recorders use only Go's standard library."""
    version = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GOCACHE": cache, "HOME": cache, "GO111MODULE": "off"}
        done = subprocess.run([go, "run", str(program)], input=json.dumps(cases), env=env,
                              capture_output=True, text=True, check=True)
    results = json.loads(done.stdout)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"recorded_with": version, "generator": generator, "cases": results},
                              ensure_ascii=False, separators=(",", ":")) + "\n")
    return results
