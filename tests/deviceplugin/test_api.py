"""The generated API matches the kubelet's: method paths from kubelet's api_grpc.pb.go
(``Registration_Register_FullMethodName = "/v1beta1.Registration/Register"``, ...), message
fields and numbers from api.proto, constants from constants.go."""

from agent.deviceplugin import v1beta1
from agent.deviceplugin.v1beta1 import api_pb2


def test_services_and_methods_are_the_kubelets():
    services = {s.full_name: [m.name for m in s.methods] for s in api_pb2.DESCRIPTOR.services_by_name.values()}
    assert services == {
        "v1beta1.Registration": ["Register"],
        "v1beta1.DevicePlugin": ["GetDevicePluginOptions", "ListAndWatch", "GetPreferredAllocation", "Allocate",
                                 "PreStartContainer"],
    }
    list_and_watch = api_pb2.DESCRIPTOR.services_by_name["DevicePlugin"].methods_by_name["ListAndWatch"]
    assert list_and_watch.server_streaming and not list_and_watch.client_streaming


def test_wire_fields_are_the_protos():
    def fields(name):
        return {f.name: f.number for f in api_pb2.DESCRIPTOR.message_types_by_name[name].fields}

    assert fields("RegisterRequest") == {"version": 1, "endpoint": 2, "resource_name": 3, "options": 4}
    assert fields("DevicePluginOptions") == {"pre_start_required": 1, "get_preferred_allocation_available": 2}
    assert fields("Device") == {"ID": 1, "health": 2, "topology": 3}
    assert fields("DeviceSpec") == {"container_path": 1, "host_path": 2, "permissions": 3}
    assert fields("Mount") == {"container_path": 1, "host_path": 2, "read_only": 3}
    assert fields("ContainerAllocateResponse") == {"envs": 1, "mounts": 2, "devices": 3, "annotations": 4,
                                                   "cdi_devices": 5}
    assert fields("ContainerPreferredAllocationRequest") == {"available_deviceIDs": 1, "must_include_deviceIDs": 2,
                                                             "allocation_size": 3}


def test_constants_are_constants_go():
    assert (v1beta1.HEALTHY, v1beta1.UNHEALTHY, v1beta1.VERSION) == ("Healthy", "Unhealthy", "v1beta1")
    assert v1beta1.KUBELET_SOCKET == "/var/lib/kubelet/device-plugins/kubelet.sock"
