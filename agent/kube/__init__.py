"""The Kubernetes layer under runtime, reconcile, placement and deviceplugin: the light client,
Backoff, Events, pod node-affinity reading and the one reflector every watch runs on."""
