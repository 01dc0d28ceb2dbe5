"""The generated DRA and plugin registration APIs match the kubelet's: service and method
paths from kubelet's ``api_grpc.pb.go`` (``DRAPlugin_NodePrepareResources_FullMethodName =
"/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"``), the service names of
``supported_versions`` from ``dra/v1/types.go`` (``DRAPluginService = "v1.DRAPlugin"``), message
fields and numbers from each api.proto."""

from agent.dra import api
from agent.dra.api.registration import api_pb2 as reg_pb2
from agent.dra.api.v1 import api_pb2 as v1_pb2
from agent.dra.api.v1beta1 import api_pb2 as v1beta1_pb2


def _services(module):
    return {s.full_name: [m.name for m in s.methods] for s in module.DESCRIPTOR.services_by_name.values()}


def test_dra_services_and_methods_are_the_kubelets():
    for version, module in (("v1", v1_pb2), ("v1beta1", v1beta1_pb2)):
        assert _services(module) == {
            f"k8s.io.kubelet.pkg.apis.dra.{version}.DRAPlugin": ["NodePrepareResources", "NodeUnprepareResources"]}
        service = module.DESCRIPTOR.services_by_name["DRAPlugin"]
        assert all(not m.server_streaming and not m.client_streaming for m in service.methods)


def test_registration_service_is_pluginregistrations():
    assert _services(reg_pb2) == {"pluginregistration.Registration": ["GetInfo", "NotifyRegistrationStatus"]}


def test_wire_fields_are_the_protos():
    for module in (v1_pb2, v1beta1_pb2):
        def fields(name, module=module):
            return {f.name: f.number for f in module.DESCRIPTOR.message_types_by_name[name].fields}

        assert fields("Claim") == {"namespace": 1, "uid": 2, "name": 3}
        assert fields("Device") == {"request_names": 1, "pool_name": 2, "device_name": 3, "cdi_device_ids": 4}
        assert fields("NodePrepareResourceResponse") == {"devices": 1, "error": 2}
        assert fields("NodeUnprepareResourceResponse") == {"error": 1}
        assert fields("NodePrepareResourcesRequest") == {"claims": 1}
        assert fields("NodePrepareResourcesResponse") == {"claims": 1}
    info = {f.name: f.number for f in reg_pb2.PluginInfo.DESCRIPTOR.fields}
    assert info == {"type": 1, "name": 2, "endpoint": 3, "supported_versions": 4}
    status = {f.name: f.number for f in reg_pb2.RegistrationStatus.DESCRIPTOR.fields}
    assert status == {"plugin_registered": 1, "error": 2}


def test_service_names_are_the_kubelets():
    assert api.SERVICES == ("v1.DRAPlugin", "v1beta1.DRAPlugin")
    assert api.PLUGIN_TYPE == "DRAPlugin"


def test_the_grpc_service_names_served_are_the_generated_ones():
    """The plugin serves both names with v1's messages (agent.dra.plugin): each name must be the
    full service name of its own proto, kubelet's method paths' prefix."""
    for version, module in (("v1", v1_pb2), ("v1beta1", v1beta1_pb2)):
        assert api.GRPC_SERVICES[f"{version}.DRAPlugin"] == module.DESCRIPTOR.services_by_name["DRAPlugin"].full_name
    assert tuple(api.GRPC_SERVICES) == api.SERVICES
