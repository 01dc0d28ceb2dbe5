"""Regenerate the kubelet gRPC stubs the DRA plugin speaks, with their type stubs for mypy,
from a Kubernetes checkout's ``staging/src/k8s.io/kubelet/pkg/apis`` directory.

Usage (needs ``pip install grpcio-tools mypy-protobuf``; not runtime dependencies)::

    python agent/dra/api/regenerate.py <kubernetes checkout>/staging/src/k8s.io/kubelet/pkg/apis

Each proto is placed at ``agent/dra/api/<dir>/api.proto`` in a scratch tree so the generated
gRPC modules import their messages from this package; the proto packages stay upstream's
(``k8s.io.kubelet.pkg.apis.dra.v1``, ``pluginregistration``), so the method paths are the
kubelet's own. The v1 proto's gogoproto options only steer Go code generation: they are
removed before protoc runs (protoc would otherwise need gogo.proto).
"""

from __future__ import annotations

import re
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REL = Path("agent/dra/api")
SOURCES = {"v1": "dra/v1/api.proto", "v1beta1": "dra/v1beta1/api.proto",
           "registration": "pluginregistration/v1/api.proto"}
GENERATED = ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi", "api_pb2_grpc.pyi")

_GOGO = (re.compile(r'^import "github.com/gogo/protobuf/gogoproto/gogo.proto";\n', re.M),
         re.compile(r"^option \(gogoproto\.[^\n]*\n", re.M),
         re.compile(r"\s*\[\(gogoproto\.[^\]]*\]"))


def without_gogo(text: str) -> str:
    for pattern in _GOGO:
        text = pattern.sub("", text)
    return text


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not all((Path(argv[0]) / s).is_file() for s in SOURCES.values()):
        print(__doc__, file=sys.stderr)
        return 2
    from grpc_tools import protoc  # a build tool, imported only here

    plugin = Path(sysconfig.get_path("scripts")) / "protoc-gen-mypy_grpc"  # installed by mypy-protobuf
    with tempfile.TemporaryDirectory() as scratch:
        for target, source in SOURCES.items():
            (Path(scratch) / REL / target).mkdir(parents=True)
            text = without_gogo((Path(argv[0]) / source).read_text())
            (Path(scratch) / REL / target / "api.proto").write_text(text)
        for target in SOURCES:
            status: int = protoc.main(["protoc", f"-I{scratch}", f"--python_out={scratch}",
                                       f"--grpc_python_out={scratch}", f"--pyi_out={scratch}",
                                       f"--plugin=protoc-gen-mypy_grpc={plugin}", f"--mypy_grpc_out={scratch}",
                                       str(REL / target / "api.proto")])
            if status != 0:
                return status
            for name in GENERATED:
                shutil.copy(Path(scratch) / REL / target / name, HERE / target / name)
    print(f"regenerated {', '.join(GENERATED)} in {', '.join(SOURCES)} under {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
