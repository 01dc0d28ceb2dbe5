"""Devices through Dynamic Resource Allocation: ResourceSlices from the catalogue, the kubelet
DRA plugin and the CDI specs it writes. The devices come from the same catalogue resolution as
the device plugin's (``agent.deviceplugin.resolve``); this package only publishes and prepares.

The API the run loop uses (``agent.runtime.dra_service``): ``mode.discover``/``mode.decide``
pick the ``resource.k8s.io`` version; ``publisher.SlicePublisher.publish(resources)`` takes a
pass's ``Mapping[resource, ResourceDevices]`` and writes the node's ResourceSlices in its own
thread (it needs nothing of the kubelet plugin); the kubelet plugin's own ``publish`` takes the
same mapping (``DraService.consumers``), and both name devices by ``names.device_name``.
"""
