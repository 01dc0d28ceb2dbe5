"""The Kubernetes layer every cluster-facing part stands on: how the client is configured and
built (``connect``), below runtime, reconcile, placement and the commands (the import-linter
``layers`` contract in pyproject.toml)."""
