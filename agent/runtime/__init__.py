"""The long-running agent (``node-feature-agent run``): event sources feed one reconcile queue.

Modules, one job each:

``queue``        coalescing trigger queue (debounce, retry delay), one consumer
``uevent``       kernel uevent wire format <-> ``UEvent`` records
``subsystems``   uevent subsystem -> discovery sources; what the poller fingerprints
``event_sources`` pyudev (kernel/udev netlink) and the injection socket, one interface
``hotplug``      monitor thread (blocking select) and the polling fallback
``rules_state``  load the catalogue, keep the last good one when an edit breaks it
``rules_watch``  watchfiles on the rules directories (ConfigMap ``..data`` swaps included)
``node_watch``   this Node's handler of the reflector (``agent.kube.reflector``): relevance, freshness
``cluster_watch`` NFD objects' handler of the reflector: digests, the bound on objects
``api_metrics``  count Kubernetes API requests by verb and code (wraps the urllib3 pool)
``recording_api`` remembers the Node versions our own writes produced (no echo reconciles)
``discovery_cache`` rediscover some sources, keep the cached results of the others
``metrics``      the Prometheus registry (one per agent, not the global one)
``health``       /metrics, /healthz, /readyz HTTP server
``pod_guard``    Events (and optional evictions) for pods whose placement no longer holds
``device_service`` ``--device-plugin=on``: the capacity hand-off to kubelet, this pass's devices
                 to the plugins (``agent.deviceplugin``), the directory watch
``agent``        wires it together: the worker loop, resync timer, startup, shutdown
"""
