"""The kubelet Device Plugin API v1beta1: generated messages and stubs, plus its constants.

``api_pb2`` / ``api_pb2_grpc`` are generated (see ``README.md`` here) from Kubernetes'
``staging/src/k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1/api.proto``; the constants below
are ``constants.go`` of the same package, copied by value. Importing this package loads
grpcio and protobuf, so only the device-plugin mode does it.
"""

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
VERSION = "v1beta1"
DEVICE_PLUGIN_PATH = "/var/lib/kubelet/device-plugins/"
KUBELET_SOCKET_NAME = "kubelet.sock"
KUBELET_SOCKET = DEVICE_PLUGIN_PATH + KUBELET_SOCKET_NAME
SUPPORTED_VERSIONS = ("v1beta1",)
