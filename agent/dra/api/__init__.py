"""The kubelet APIs the DRA plugin speaks, generated (see ``README.md`` here) from Kubernetes'
protos: ``v1`` and ``v1beta1`` (the ``DRAPlugin`` service) and ``registration``
(pluginregistration v1). Importing a subpackage loads grpcio and protobuf.

The constants are the kubelet's, copied by value:

- ``PLUGIN_TYPE``: ``DRAPlugin`` of ``k8s.io/kubelet/pkg/apis/pluginregistration/v1``
  ``constants.go``;
- ``SERVICES``: the gRPC service names a DRA plugin lists in ``supported_versions``,
  newest first: ``DRAPluginService`` of ``k8s.io/kubelet/pkg/apis/dra/v1`` and ``v1beta1``
  (``types.go``); kubelet's ``servicesSupportedByKubelet`` (``pkg/kubelet/cm/dra/plugin/
  dra_plugin.go``) holds both and ``validateSupportedServices`` takes the first the plugin
  lists that it knows;
- ``GRPC_SERVICES``: each of those names' full gRPC service name, the prefix of its method
  paths (kubelet's ``api_grpc.pb.go``: ``DRAPlugin_NodePrepareResources_FullMethodName =
  "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"``, and v1beta1's alike);
- ``REGISTRY_DIR`` / ``PLUGINS_DIR``: kubelet's plugin watcher directory and the per-driver
  socket directories' parent (the DaemonSet's hostPaths, dra-example-driver's chart).
"""

PLUGIN_TYPE = "DRAPlugin"
SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
GRPC_SERVICES = {"v1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
                 "v1beta1.DRAPlugin": "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"}
REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
PLUGINS_DIR = "/var/lib/kubelet/plugins"
