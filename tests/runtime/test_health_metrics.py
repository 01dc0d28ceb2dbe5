"""Metrics registry, the HTTP endpoints (real HTTP) and API request counting (real client)."""

import urllib.error
import urllib.request

import pytest
import urllib3
from kubernetes.client.exceptions import ApiException

from agent.runtime.api_metrics import instrument, k8s_verb
from agent.runtime.health import HealthServer
from agent.runtime.metrics import AgentMetrics
from tests.support.apiserver import FakeApiServer


def fetch(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_endpoints_follow_health_and_readiness():
    state = {"healthy": (True, "ok"), "ready": (False, "first reconcile pending")}
    metrics = AgentMetrics()
    metrics.hotplug("usb", "add")
    metrics.reconciled("applied", owned_labels=3, owned_resources=1)
    server = HealthServer(0, metrics.render, lambda: state["healthy"], lambda: state["ready"], host="127.0.0.1").start()
    try:
        assert fetch(server.port, "/readyz") == (503, "first reconcile pending\n")
        state["ready"] = (True, "ok")
        assert fetch(server.port, "/readyz")[0] == 200
        assert fetch(server.port, "/healthz")[0] == 200
        state["healthy"] = (False, "one reconcile pass has been running for 400s")
        assert fetch(server.port, "/healthz") == (500, "one reconcile pass has been running for 400s\n")
        code, body = fetch(server.port, "/metrics")
        assert code == 200
        assert 'nfa_hotplug_events_total{action="add",subsystem="usb"} 1.0' in body
        assert 'nfa_reconcile_total{result="applied"} 1.0' in body
        assert "nfa_owned_labels 3.0" in body and "nfa_owned_extended_resources 1.0" in body
        assert "nfa_udev_fallback_active 0.0" in body
        assert fetch(server.port, "/nope")[0] == 404
    finally:
        server.stop()
    assert not server.alive()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=2)


def test_registries_are_separate():
    a, b = AgentMetrics(), AgentMetrics()
    a.hotplug("pci", "remove")
    assert b"nfa_hotplug_events_total{" not in b.render()
    assert b'subsystem="pci"' in a.render()


@pytest.mark.parametrize("method, url, verb", [
    ("GET", "http://h/api/v1/nodes/n1", "get"),
    ("GET", "http://h/api/v1/nodes?fieldSelector=metadata.name%3Dn1", "list"),
    ("GET", "http://h/api/v1/nodes?watch=true&fieldSelector=x", "watch"),
    ("GET", "http://h/api/v1/watch/nodes/n1", "watch"),
    ("GET", "http://h/api/v1/pods?fieldSelector=spec.nodeName%3Dn1", "list"),
    ("GET", "http://h/api/v1/namespaces/default/pods", "list"),
    ("GET", "http://h/api/v1/namespaces/default/pods/p", "get"),
    ("GET", "http://h/apis/events.k8s.io/v1/namespaces/default/events", "list"),
    ("PATCH", "http://h/api/v1/nodes/n1/status", "patch"),
    ("POST", "http://h/api/v1/namespaces/default/pods/p/eviction", "create"),
    ("PUT", "http://h/api/v1/nodes/n1", "update"),
    ("DELETE", "http://h/api/v1/nodes/n1", "delete"),
    ("GET", "http://h/version", "get"),
])
def test_verbs(method, url, verb):
    assert k8s_verb(method, url) == verb


def test_instrumented_client_counts_real_requests_by_verb_and_code():
    metrics = AgentMetrics()
    with FakeApiServer() as server:
        server.add_node("n1")
        core = server.core_api()
        instrument(core.api_client, metrics.api_request)
        instrument(core.api_client, metrics.api_request)  # idempotent: still counted once
        core.read_node("n1")
        core.list_node(field_selector="metadata.name=n1")
        server.faults.fail(503, verb="GET")
        with pytest.raises(ApiException):
            core.read_node("n1")
        server.faults.refuse_connections()
        with pytest.raises(urllib3.exceptions.HTTPError):
            core.read_node("n1", _request_timeout=5)
        core.patch_node("n1", {"metadata": {"labels": {"a": "b"}}})
    body = metrics.render().decode()
    assert 'nfa_api_requests_total{code="200",verb="get"} 1.0' in body
    assert 'nfa_api_requests_total{code="200",verb="list"} 1.0' in body
    assert 'nfa_api_requests_total{code="503",verb="get"} 1.0' in body
    assert 'nfa_api_requests_total{code="error",verb="get"} 1.0' in body
    assert 'nfa_api_requests_total{code="200",verb="patch"} 1.0' in body


def _get(host: str, port: int, path: str = "/readyz") -> bytes:
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect((host, port))
        conn.sendall(f"GET {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        chunks = []
        while chunk := conn.recv(4096):
            chunks.append(chunk)
    return b"".join(chunks)


def test_metrics_address_ipv6_and_the_dual_stack_default():
    """`--metrics-address ::` must work on IPv6-only nodes; the default serves both families."""
    import socket

    if not socket.has_ipv6:
        pytest.fail("this Python has no IPv6 support; the dual-stack contract cannot be checked")
    for host, clients in (("::", ["::1", "127.0.0.1"]), ("", ["::1", "127.0.0.1"]), ("::1", ["::1"])):
        server = HealthServer(0, lambda: b"m\n", lambda: (True, ""), lambda: (True, ""), host=host).start()
        try:
            for client in clients:
                assert _get(client, server.port).startswith(b"HTTP/1.0 200"), (host, client)
        finally:
            server.stop()


def test_a_client_reset_mid_request_leaves_no_traceback(capfd):
    import socket
    import struct

    server = HealthServer(0, lambda: b"m\n" * 200000, lambda: (True, ""), lambda: (True, ""), host="127.0.0.1").start()
    try:
        for _ in range(5):
            with socket.socket() as conn:
                conn.connect(("127.0.0.1", server.port))
                conn.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST on close
        assert _get("127.0.0.1", server.port).startswith(b"HTTP/1.0 200")  # still serving
    finally:
        server.stop()
    assert "Traceback" not in capfd.readouterr().err


def _half_sent(port):
    import socket

    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.sendall(b"GET /healthz HTTP/1.0\r\nX-Slow: ")
    return conn


def _closed_by_server(conn) -> bool:
    """Whether the server closed ``conn`` without an answer (EOF or reset, no bytes)."""
    try:
        return conn.recv(4096) == b""
    except ConnectionResetError:
        return True


def _wait(condition, what):
    import time

    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_at_the_cap_a_new_client_closes_the_oldest_one_still_sending():
    server = HealthServer(0, lambda: b"m\n", lambda: (True, ""), lambda: (True, ""), host="127.0.0.1",
                          max_connections=2).start()
    try:
        first, second = _half_sent(server.port), None
        _wait(lambda: server.open_connections() == 1, "the first client is not held")
        second = _half_sent(server.port)
        _wait(lambda: server.open_connections() == 2, "the second client is not held")
        third = _half_sent(server.port)
        assert _closed_by_server(first)  # the oldest half-sent request made room
        _wait(lambda: server.open_connections() == 2, "the cap is not held")
        assert fetch(server.port, "/healthz") == (200, "ok\n")  # a probe gets in: it closes `second`
        assert _closed_by_server(second)
        third.close()
    finally:
        server.stop()


def test_a_request_head_over_8_KiB_or_too_slow_is_closed_unanswered(monkeypatch):
    import socket

    from agent.runtime import health

    monkeypatch.setattr(health, "REQUEST_TIMEOUT", 0.2)
    server = HealthServer(0, lambda: b"m\n", lambda: (True, ""), lambda: (True, ""), host="127.0.0.1").start()
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as long_head:
            long_head.sendall(b"GET /healthz HTTP/1.0\r\nX-Long: " + b"x" * health.MAX_REQUEST_HEAD)
            assert _closed_by_server(long_head)
        with _half_sent(server.port) as slow:
            assert _closed_by_server(slow)  # after REQUEST_TIMEOUT, with no answer
        _wait(lambda: server.open_connections() == 0, "a closed client is still counted")
        assert fetch(server.port, "/healthz") == (200, "ok\n")
    finally:
        server.stop()


def test_a_failing_check_loses_its_answer_not_the_server():
    def broken() -> tuple[bool, str]:
        raise RuntimeError("a bug in a check")

    server = HealthServer(0, lambda: b"m\n", broken, lambda: (True, ""), host="127.0.0.1").start()
    try:
        with pytest.raises(OSError):  # closed unanswered (urllib: RemoteDisconnected)
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
        assert fetch(server.port, "/readyz") == (200, "ok\n")
        assert server.alive()
    finally:
        server.stop()
