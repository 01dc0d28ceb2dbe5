"""Test support code (not shipped): an in-repo Kubernetes API server, ``FakeApiServer``.

It speaks enough of the REST API (nodes, nodes/status, pods, evictions, events, discovery)
for the official ``kubernetes`` Python client and ``kubectl``, records every request, and
injects faults per test. See ``tests/support/apiserver.py``.
"""
