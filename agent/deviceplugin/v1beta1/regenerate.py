"""Regenerate ``api_pb2.py`` and ``api_pb2_grpc.py`` from Kubernetes' ``api.proto``.

Usage (needs ``pip install grpcio-tools``; not a runtime dependency)::

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
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REL = Path("agent/deviceplugin/v1beta1")


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_file():
        print(__doc__, file=sys.stderr)
        return 2
    from grpc_tools import protoc  # noqa: PLC0415 - a build tool, imported only here

    with tempfile.TemporaryDirectory() as scratch:
        target = Path(scratch) / REL
        target.mkdir(parents=True)
        shutil.copy(argv[0], target / "api.proto")
        status = protoc.main(["protoc", f"-I{scratch}", f"--python_out={scratch}", f"--grpc_python_out={scratch}",
                              str(REL / "api.proto")])
        if status != 0:
            return status
        for name in ("api_pb2.py", "api_pb2_grpc.py"):
            shutil.copy(target / name, HERE / name)
    print(f"regenerated {HERE}/api_pb2.py and api_pb2_grpc.py")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
