"""The Kubernetes layer every cluster-facing part stands on, below runtime, reconcile, placement,
deviceplugin and the commands (the import-linter ``layers`` contract in pyproject.toml): how the
client is configured and built (``connect``), the light client, Backoff, Events, pod
node-affinity reading and the one reflector every watch runs on."""
