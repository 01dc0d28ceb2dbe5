"""Regenerate ``api_pb2.py`` and ``api_pb2_grpc.py`` from Kubernetes' ``api.proto``, with their
type stubs (``api_pb2.pyi`` from protoc, ``api_pb2_grpc.pyi`` from mypy-protobuf) for mypy.

Usage (needs ``pip install grpcio-tools mypy-protobuf``; not runtime dependencies)::

    python agent/deviceplugin/v1beta1/regenerate.py \
        <kubernetes checkout>/staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto

The proto is placed at ``agent/deviceplugin/v1beta1/api.proto`` inside a scratch tree so the
generated gRPC module imports the messages as ``agent.deviceplugin.v1beta1.api_pb2``; the
proto package stays ``v1beta1``, so method paths are the kubelet's own
(``/v1beta1.Registration/Register``, ``/v1beta1.DevicePlugin/Allocate``).
"""

from __future__ import annotations

import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REL = Path("agent/deviceplugin/v1beta1")
GENERATED = ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi", "api_pb2_grpc.pyi")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print(__doc__, file=sys.stderr)
        return 2
    from grpc_tools import protoc  # a build tool, imported only here

    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / REL
        target.mkdir(parents=True)
        shutil.copy(argv[0], target / "api.proto")
        plugin = Path(sysconfig.get_path("scripts")) / "protoc-gen-mypy_grpc"  # installed by mypy-protobuf
        status: int = protoc.main(["protoc", f"-I{scratch}", f"--python_out={scratch}", f"--grpc_python_out={scratch}",
                                   f"--pyi_out={scratch}", f"--plugin=protoc-gen-mypy_grpc={plugin}",
                                   f"--mypy_grpc_out={scratch}", str(REL / "api.proto")])
        if status != 0:
            return status
        for name in GENERATED:
            shutil.copy(target / name, HERE / name)
    print(f"regenerated {', '.join(GENERATED)} in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
