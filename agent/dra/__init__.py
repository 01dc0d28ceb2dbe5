"""Devices through Dynamic Resource Allocation: ResourceSlices from the catalogue, the kubelet
DRA plugin and the CDI specs it writes. The devices come from the same catalogue resolution as
the device plugin's (``agent.deviceplugin.resolve``); this package only publishes and prepares."""
