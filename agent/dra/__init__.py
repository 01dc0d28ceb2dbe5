"""Devices through Dynamic Resource Allocation: ResourceSlices from the catalogue, the kubelet
DRA plugin and the CDI specs it writes. The devices come from the same catalogue resolution as
the device plugin's (``agent.deviceplugin.resolve``); this package only publishes and prepares.

- ``names``: the driver, pools and device names shared by the slices and the plugin;
- ``api``: the kubelet's DRA (v1, v1beta1) and plugin registration gRPC APIs, generated;
- ``claims``: ResourceClaims read from the API server;
- ``cdi``: CDI specs, written atomically;
- ``plugin``: the kubelet plugin (registration, NodePrepareResources, checkpoint).

- ``mode``, ``slices``, ``watched``, ``publisher``, ``classes``, ``cel_check``: the API version,
  the node's ResourceSlices, their watch (the reflector's handler) and their writer, the shipped
  DeviceClasses and their CEL check.

``plugin``, ``api`` and ``claims`` load grpcio or the Kubernetes client: only DRA mode imports
them.

The API the run loop uses (``agent.runtime.dra_service``): ``mode.discover``/``mode.decide``
pick the ``resource.k8s.io`` version; ``publisher.SlicePublisher.publish(resources)`` takes a
pass's ``Mapping[resource, ResourceDevices]`` and writes the node's ResourceSlices in its own
thread (it needs nothing of the kubelet plugin); the kubelet plugin's own ``publish`` takes the
same mapping (``DraService.consumers``), and both name devices by ``names.device_name``.
"""
