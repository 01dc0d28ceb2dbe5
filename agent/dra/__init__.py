"""Devices through Dynamic Resource Allocation: ResourceSlices from the catalogue, the kubelet
DRA plugin and the CDI specs it writes. The devices come from the same catalogue resolution as
the device plugin's (``agent.deviceplugin.resolve``); this package only publishes and prepares.

- ``names``: the driver, pools and device names shared by the slices and the plugin;
- ``api``: the kubelet's DRA (v1, v1beta1) and plugin registration gRPC APIs, generated;
- ``claims``: ResourceClaims read from the API server;
- ``cdi``: CDI specs, written atomically;
- ``plugin``: the kubelet plugin (registration, NodePrepareResources, checkpoint).

``plugin``, ``api`` and ``claims`` load grpcio or the Kubernetes client: only DRA mode imports
them.
"""
