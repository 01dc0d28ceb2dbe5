"""The kubelet device plugin built into the agent (``run --device-plugin=on``).

One catalogue drives labels, counts and allocation: a rule that counts a device (``@count``)
and declares ``devices:`` for that resource (``labels/README.md``) becomes one plugin
endpoint here, whose devices are the instances the rule matched in this pass.

- ``v1beta1``: the kubelet's API (generated from its ``api.proto``) and constants;
- ``model``: what a plugin advertises and hands out (pure data);
- ``resolve``: matched instances + the host's sysfs -> devices with their ``/dev`` nodes;
- ``server``: one resource's gRPC service on its own unix socket;
- ``sockets``: binding a socket 0600, recognising a replaced one, staging leftovers (no gRPC:
  the DRA kubelet plugin uses them too);
- ``plugins``: every resource's server, registration with ``kubelet.sock`` and its restarts.

Only ``model``, ``resolve``, ``devnodes`` and ``sockets`` load without grpcio; the agent
imports the rest only when the plugin mode is on.
"""
