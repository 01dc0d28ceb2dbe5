#!/usr/bin/env python3
"""Refresh tests/data/k8s/evanphx_patch_corpus.json: what evanphx/json-patch, the library
kube-apiserver applies ``application/json-patch+json`` and ``application/merge-patch+json``
with (``k8s.io/apiserver/pkg/endpoints/handlers/patch.go``), does with every case of the
RFC 6902 test suite (json-patch/json-patch-tests ``tests.json``, ``spec_tests.json``) and of
RFC 7386's examples, all committed beside the corpus in tests/data/k8s/.

    apt-get install golang-go golang-github-evanphx-json-patch-dev
    python tests/oracle/make_patch_corpus.py [--go go]

Built in GOPATH mode against Debian's package (its root package is the v4 line that
kube-apiserver vendors as gopkg.in/evanphx/json-patch.v4); no module proxy, no network.
The expected values come from that Go library, never from our code; CI reads the JSON
(tests/support_tests/test_patch_suites.py) and needs no Go.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "k8s"
OUT = DATA / "evanphx_patch_corpus.json"
GOPATH = "/usr/share/gocode"


def cases() -> list[dict]:
    out = []
    for name in ("json_patch_tests.json", "json_patch_spec_tests.json"):
        for index, test in enumerate(json.loads((DATA / name).read_text())):
            if "patch" in test:
                out.append({"suite": name, "index": index, "kind": "json",
                            "doc": json.dumps(test["doc"]), "patch": json.dumps(test["patch"])})
    for index, test in enumerate(json.loads((DATA / "rfc7386_examples.json").read_text())["cases"]):
        out.append({"suite": "rfc7386_examples.json", "index": index, "kind": "merge",
                    "doc": json.dumps(test["target"]), "patch": json.dumps(test["patch"])})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--go", default="go")
    args = parser.parse_args()
    todo = cases()
    version = subprocess.run([args.go, "version"], capture_output=True, text=True, check=True).stdout.strip()
    package = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "golang-github-evanphx-json-patch-dev"],
                             capture_output=True, text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "GOCACHE": cache, "HOME": cache, "GO111MODULE": "off", "GOPATH": GOPATH}
        stdin = json.dumps([{"kind": c["kind"], "doc": json.loads(c["doc"]), "patch": json.loads(c["patch"])}
                            for c in todo])
        done = subprocess.run([args.go, "run", str(HERE / "jsonpatch.go")], input=stdin, env=env,
                              capture_output=True, text=True, check=True)
    results = json.loads(done.stdout)
    records = [{"suite": c["suite"], "index": c["index"], "kind": c["kind"], **r} for c, r in zip(todo, results, strict=True)]
    OUT.write_text(json.dumps({"recorded_with": f"{version}; golang-github-evanphx-json-patch-dev {package}",
                               "generator": "tests/oracle/make_patch_corpus.py", "cases": records},
                              ensure_ascii=False, indent=0) + "\n")
    print(f"{len(records)} cases -> {OUT}")


if __name__ == "__main__":
    main()
