"""The agent in-process against the in-repo API server and a writable copy of a fixture host.

Events enter through a socketpair carrying kernel wire-format uevents: the same
``HotplugMonitor`` path pyudev's netlink events take.
"""

import socket
import time
import urllib.error
import urllib.request

import pytest

from agent.desired import Taint
from agent.reconcile import BackoffSettings, NodeApi
from agent.runtime.agent import Agent, Settings
from agent.runtime.event_sources import SocketSource
from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import LABELS_DIR
from tests.runtime.configmap import write_configmap
from tests.runtime.helpers import CORAL_DEVPATH, EDGETPU_LABEL, EDGETPU_RESOURCE, CoralHost, has_edgetpu, wait_for
from tests.support.apiserver import FakeApiServer

NODE = "edge-1"
STARTUP_TAINT = {"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}
CATALOGUE = {str(p.relative_to(LABELS_DIR)): p.read_text() for p in LABELS_DIR.rglob("*") if p.is_file()}
EXTRA = "example.com/coral-usb"
EXTRA_FILE = {EXTRA: "feature.node.kubernetes.io/usb-ff_18d1_9302.present\n"}


class Harness:
    def __init__(self, tmp_path, server, **overrides):
        self.server = server
        self.host = CoralHost(tmp_path)
        self.rules = tmp_path / "rules"
        write_configmap(self.rules, CATALOGUE)
        self.sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        settings = Settings(node_name=NODE, rules_dirs=[str(self.rules)], host_root=str(self.host.root),
                            metrics_port=0, metrics_host="127.0.0.1", debounce=0.05, debounce_max=0.5,
                            startup_taints=(Taint.parse("node-feature-agent.io/not-ready:NoSchedule"),),
                            watch_timeout=30, **{"backoff": BackoffSettings(initial=0.05, maximum=0.2), **overrides})
        source = None if overrides.get("udev_mode") else SocketSource(receiver)
        if source is None:
            receiver.close()
        api = NodeApi.from_configuration(server.client_configuration())
        self.agent = Agent(settings, api, event_source=source)

    def start(self):
        self.agent.start()
        wait_for(self.agent.ready.is_set, what="first reconcile")
        return self

    def node(self):
        return self.server.node(NODE)

    def inject(self, action, devpath=CORAL_DEVPATH, subsystem="usb"):
        self.sender.send(encode_kernel_uevent(action, devpath, subsystem))

    def http(self, path):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.agent.http.port}{path}", timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    def metric(self, line_start):
        for line in self.agent.metrics.render().decode().splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None

    def close(self):
        finished = self.agent.stop(timeout=5)
        self.sender.close()
        return finished


@pytest.fixture
def server():
    with FakeApiServer(bookmark_interval=0.5) as srv:
        srv.add_node(NODE, register_taints=[STARTUP_TAINT])
        yield srv


@pytest.fixture
def harness(tmp_path, server):
    h = Harness(tmp_path, server)
    yield h
    h.close()


def event_posts(server) -> list:
    """Event POSTs the server answered 2xx."""
    return [r for r in server.requests if r.method == "POST" and r.path.endswith("/events") and 200 <= r.status < 300]


def test_startup_labels_the_node_removes_the_startup_taint_and_becomes_ready(harness):
    harness.start()
    node = harness.node()
    assert has_edgetpu(node) == (True, True)
    assert node["status"]["capacity"][EDGETPU_RESOURCE] == "1"
    assert STARTUP_TAINT["key"] not in [t["key"] for t in node["spec"].get("taints") or []]
    assert harness.http("/readyz")[0] == 200 and harness.http("/healthz")[0] == 200
    _status, body = harness.http("/metrics")
    assert 'nfa_reconcile_total{result="applied"} 1.0' in body
    assert 'nfa_api_requests_total{code="200",verb="patch"}' in body
    assert harness.metric("nfa_owned_extended_resources") == 1.0
    assert harness.metric("nfa_last_success_timestamp_seconds") > 0


def test_unplug_clears_label_and_resource_and_plug_restores_them(harness):
    harness.start()
    harness.host.unplug()
    harness.inject("remove", CORAL_DEVPATH + "/2-2:1.0")
    harness.inject("remove")
    wait_for(lambda: has_edgetpu(harness.node()) == (False, False), what="label and resource removed")
    assert harness.metric('nfa_hotplug_events_total{action="remove",subsystem="usb"}') == 2.0
    harness.host.plug()
    harness.inject("add")
    harness.inject("add", CORAL_DEVPATH + "/2-2:1.0")
    harness.inject("bind", CORAL_DEVPATH + "/2-2:1.0")
    wait_for(lambda: has_edgetpu(harness.node()) == (True, True), what="label and resource back")
    assert harness.node()["status"]["capacity"][EDGETPU_RESOURCE] == "1"


def test_events_for_unrelated_subsystems_and_junk_do_not_reconcile(harness):
    harness.start()
    passes = harness.agent.passes
    harness.sender.send(b"\x00\x01garbage")
    harness.inject("add", "/devices/virtual/input/input7", "input")
    harness.inject("change", "/devices/virtual/net/lo", "net")  # monitored: one cheap pass, no write
    wait_for(lambda: harness.agent.passes > passes, what="pass for net event")
    writes = len(harness.server.writes(NODE))
    assert harness.agent.last_outcome.writes == 0 and len(harness.server.writes(NODE)) == writes


def test_a_rule_edit_propagates_and_a_broken_edit_keeps_the_last_good_rules(harness):
    harness.start()
    write_configmap(harness.rules, {**CATALOGUE, **EXTRA_FILE})
    wait_for(lambda: harness.node()["metadata"]["labels"].get(EXTRA) == "true", what="new label from edited rules")
    broken = {**CATALOGUE, **EXTRA_FILE, "rules/zz-broken.yaml": "kind: NodeFeatureRule\nmetadata: {name: x\n"}
    broken.pop("accelerators/ncs2")
    write_configmap(harness.rules, broken)
    wait_for(lambda: any(e["reason"] == "RulesInvalid" for e in harness.server.events()), what="RulesInvalid event")
    event = next(e for e in harness.server.events() if e["reason"] == "RulesInvalid")
    assert event["type"] == "Warning" and "zz-broken.yaml" in event["message"]
    assert harness.metric('nfa_rules_reload_total{result="rejected"}') == 1.0
    assert harness.node()["metadata"]["labels"].get(EXTRA) == "true"  # still the last good catalogue
    write_configmap(harness.rules, CATALOGUE)  # the fix: back to the shipped catalogue
    wait_for(lambda: EXTRA not in harness.node()["metadata"]["labels"], what="label of the removed file gone")


def test_a_deleted_owned_label_and_resource_are_restored(harness):
    harness.start()

    def vandalise(node):
        node["metadata"]["labels"].pop(EDGETPU_LABEL)

    harness.server.edit_node(NODE, vandalise)
    wait_for(lambda: has_edgetpu(harness.node())[0], what="label restored")
    harness.server.edit_node(NODE, lambda n: n["status"]["capacity"].pop(EDGETPU_RESOURCE) and None)
    wait_for(lambda: has_edgetpu(harness.node())[1], what="resource restored")


def test_heartbeats_and_our_own_echoes_cost_no_writes(harness):
    harness.start()
    writes = len(harness.server.writes(NODE))
    harness.server.clear_requests()
    for _ in range(3):
        harness.server.edit_node(NODE, lambda n: n["status"]["conditions"][0].update(lastHeartbeatTime=time.strftime("%Y-%m-%dT%H:%M:%SZ")) and None)
    time.sleep(1.0)  # give a wrong implementation the chance to react
    assert len(harness.server.writes(NODE)) == 0 and writes == 3
    assert not [r for r in harness.server.requests if r.method == "GET" and r.path.endswith(f"/nodes/{NODE}")]


def test_resync_rediscovers_without_api_requests_when_nothing_changed(tmp_path, server):
    h = Harness(tmp_path, server, resync_interval=0.3, resync_jitter=0.0)
    try:
        h.start()
        server.clear_requests()
        passes = h.agent.passes
        wait_for(lambda: h.agent.passes >= passes + 2, what="two resyncs")
        sent = [r for r in server.requests if not (r.method == "GET" and r.query.get("watch"))]
        assert sent == []  # the watch's Node is current: no GET, no write
        # a device unplugged while no event arrived is caught by the resync
        h.host.unplug()
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (False, False), what="resync noticed the unplug")
    finally:
        h.close()


def test_no_event_source_falls_back_to_polling(tmp_path, server):
    h = Harness(tmp_path, server, udev_mode=f"inject:{tmp_path}/no/such/dir/uevents.sock", poll_interval=0.05)
    try:
        h.start()
        assert h.agent.poller is not None and h.agent.monitor is None
        assert h.metric("nfa_udev_fallback_active") == 1.0
        ready, why = h.agent.is_ready()
        assert not ready and why.startswith("HotplugFallback") and "polling" in why
        h.host.unplug()
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (False, False), what="poller noticed the unplug")
        assert h.metric('nfa_hotplug_events_total{action="poll",subsystem="usb"}') >= 1.0
    finally:
        assert h.close()


def test_api_outage_is_retried_and_stop_is_prompt(tmp_path, server):
    server.faults.fail(503, count=4, verb="PATCH")
    h = Harness(tmp_path, server, retries=2)
    try:
        h.agent.start()
        wait_for(h.agent.ready.is_set, what="ready after the outage")
        assert harness_metric(h, 'nfa_reconcile_total{result="error"}') >= 1.0
        assert has_edgetpu(server.node(NODE)) == (True, True)
    finally:
        assert h.close()
    assert not h.agent._worker.is_alive()
    assert not h.agent.node_watcher.alive() and not h.agent.rules_watcher.alive() and not h.agent.monitor.alive()


def harness_metric(h, name):
    return h.metric(name)


def test_not_ready_until_the_node_registers(tmp_path, server):
    server.delete_node(NODE)
    h = Harness(tmp_path, server)
    try:
        h.agent.start()
        wait_for(lambda: h.agent.last_outcome is not None, what="first attempt")
        assert h.agent.last_outcome.error and "not found" in h.agent.last_outcome.error
        assert h.http("/readyz")[0] == 503 and h.http("/healthz")[0] == 200
        server.add_node(NODE, register_taints=[STARTUP_TAINT])
        wait_for(h.agent.ready.is_set, what="ready once the node exists")
        assert h.http("/readyz")[0] == 200
        wait_for(lambda: has_edgetpu(server.node(NODE)) == (True, True), what="labelled")
        assert not server.node(NODE)["spec"].get("taints")
    finally:
        h.close()


def test_pod_guard_reports_pods_that_lost_their_accelerator(tmp_path, server):
    server.add_pod("ml", "tpu-job", NODE, node_selector={EDGETPU_LABEL: "true"})
    server.add_pod("ml", "web", NODE)
    h = Harness(tmp_path, server, pod_guard=True)
    try:
        h.start()
        h.host.unplug()
        h.inject("remove")
        wait_for(lambda: [e for e in server.events() if e["involvedObject"]["kind"] == "Pod"], what="pod event")
        (event,) = [e for e in server.events() if e["involvedObject"]["kind"] == "Pod"]
        assert event["involvedObject"]["name"] == "tpu-job" and EDGETPU_LABEL in event["message"]
        assert len(server.pods(NODE)) == 2  # no eviction without --evict-orphans
    finally:
        h.close()


def test_metrics_port_in_use_fails_start(tmp_path, server):
    import socket as _socket

    busy = _socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    h = Harness(tmp_path, server)
    h.agent.settings.metrics_port = busy.getsockname()[1]
    try:
        with pytest.raises(OSError):
            h.agent.start()
    finally:
        busy.close()
        h.sender.close()


def test_a_failed_write_ends_the_pass_and_a_new_event_does_not_wait_for_the_backoff(tmp_path, server):
    """With a 30 s backoff, a 503 ends the pass at once (no sleep inside it) and
    the next hotplug starts a fresh pass from the current host state, not after the backoff."""
    h = Harness(tmp_path, server, backoff=BackoffSettings(initial=30.0, maximum=30.0))
    try:
        h.start()
        server.faults.fail(503, count=1, verb="PATCH")
        h.host.unplug()
        h.inject("remove")
        wait_for(lambda: harness_metric(h, 'nfa_reconcile_total{result="error"}'), timeout=10, what="failed pass")
        assert server.faults.pending() == 0
        wait_for(lambda: h.agent._busy_since is None, timeout=10, what="the failed pass to end")
        assert has_edgetpu(h.node()) == (True, True)  # nothing applied yet
        h.inject("remove", CORAL_DEVPATH + "/2-2:1.0")
        wait_for(lambda: has_edgetpu(h.node()) == (False, False), timeout=10, what="fresh pass during the backoff")
    finally:
        assert h.close()


def test_every_invalid_rules_edit_is_judged_while_the_worker_is_busy(harness):
    """Two broken edits in a row while the worker is stuck in a slow write are each judged when
    seen (metric, log line), not when the worker is free, so neither goes unreported; their
    Warnings share the next pass's one Event (one POST naming both), not one POST each."""
    harness.start()
    harness.server.faults.slow(6.0, count=1, verb="PATCH")
    harness.host.unplug()
    harness.inject("remove")
    wait_for(lambda: harness.agent._busy_since is not None, timeout=10, what="a pass in progress")
    for n, name in enumerate(("zz-broken-1.yaml", "zz-broken-2.yaml"), start=1):
        write_configmap(harness.rules, {**CATALOGUE, f"rules/{name}": "kind: NodeFeatureRule\nmetadata: {name: x\n"})
        wait_for(lambda n=n: harness.metric('nfa_rules_reload_total{result="rejected"}') == n, timeout=5,
                 what=f"broken edit {n} judged")
    assert harness.agent._busy_since is not None  # the worker was busy all along
    wait_for(lambda: [e for e in harness.server.events() if e["reason"] == "RulesInvalid"], what="the RulesInvalid Event")
    time.sleep(0.5)  # a wrong implementation's second RulesInvalid POST would arrive now
    (event,) = [e for e in harness.server.events() if "RulesInvalid" in (e["reason"], e["message"][:12])]
    parts = event["message"].split(" | ")
    assert "zz-broken-1.yaml" in parts[0] and "zz-broken-2.yaml" in parts[1] and event["type"] == "Warning"


def test_udev_mode_without_udevds_socket_falls_back_to_kernel_uevents(tmp_path, server, monkeypatch):
    """libudev subscribes to nothing without /run/udev/control (systemd's device-monitor.c): the agent
    must not sit on a silent monitor but fall back, say so in the log, the metric and /readyz."""
    from agent.runtime import event_sources

    monkeypatch.setattr(event_sources, "UDEV_CONTROL", str(tmp_path / "no-udevd" / "control"))
    h = Harness(tmp_path, server, udev_mode="udev", poll_interval=0.05)
    try:
        h.start()
        # kernel uevents where this kernel lets us open the netlink socket, else polling
        if h.agent.monitor is not None:
            assert h.agent.monitor.source.kind == "kernel" and h.agent.poller is None
        else:
            assert h.agent.poller is not None
        assert h.metric("nfa_udev_fallback_active") == 1.0
        ready, why = h.agent.is_ready()
        assert not ready and why.startswith("HotplugFallback: --udev-mode=udev") and "/run/udev" in why
    finally:
        assert h.close()


def test_warning_events_that_fail_to_post_go_out_in_the_next_good_passs_one_event(harness):
    """Invalid rules edits judged while Events are throttled (429) must still reach
    ``kubectl describe node``: their Warnings wait in a backlog; the next successful pass carries them all in its one Event (one POST, not one per Warning kept); a
    Normal Event failing is only logged."""
    harness.start()
    harness.server.faults.throttle(retry_after=1, count=2, verb="POST", path="/events")
    for n in (1, 2):
        write_configmap(harness.rules, {**CATALOGUE, f"rules/zz-broken-{n}.yaml": "kind: NodeFeatureRule\nmetadata: {name: x\n"})
        wait_for(lambda n=n: harness.metric('nfa_rules_reload_total{result="rejected"}') == n, what=f"broken edit {n} judged")
        # the fault is taken when the request arrives; the agent keeps the Warning once the 429 is back
        wait_for(lambda n=n: len(harness.agent.reconciler.events.backlog) == n, what=f"Warning {n} kept in the backlog")
    assert harness.server.faults.pending() == 0 and not [e for e in harness.server.events() if e["reason"] == "RulesInvalid"]
    posts = len(event_posts(harness.server))
    harness.host.unplug()  # any next pass (here a hotplug) carries the backlog once it succeeds
    harness.inject("remove")
    wait_for(lambda: [e for e in harness.server.events() if e["reason"] == "RulesInvalid"], what="RulesInvalid posted")
    (event,) = [e for e in harness.server.events() if e["reason"] == "RulesInvalid"]
    parts = event["message"].split(" | ")
    assert event["type"] == "Warning" and "zz-broken-1.yaml" in parts[0] and "zz-broken-2.yaml" in parts[1]
    assert any(p.startswith("ExtendedResourcesUpdated: ") or p.startswith("NodeFeaturesUpdated: ") for p in parts[2:])
    # the backlog drops its entries once the POST has been answered, just after the server has it
    wait_for(lambda: not harness.agent.reconciler.events.backlog, what="the backlog emptied")
    time.sleep(0.5)
    assert len(event_posts(harness.server)) - posts == 1


def test_a_monitor_that_delivers_nothing_is_noticed_at_resync_and_polling_takes_over(tmp_path, server):
    """The event socket opens but no device event ever arrives (udevd's events
    stay in the host netns, a user-namespaced pod...). The Coral leaves and comes back with no
    uevent: the resync finds USB changed with no USB event since USB was last read, so the agent
    says so (log, nfa_udev_fallback_active, /readyz HotplugSilent) and polls from then on,
    which catches the next change within a poll interval, still without any event."""
    h = Harness(tmp_path, server, resync_interval=0.6, resync_jitter=0.0, poll_interval=0.1)
    try:
        h.start()
        assert h.agent.poller is None and h.agent.is_ready() == (True, "ok")
        time.sleep(1.5)  # resyncs with nothing changed: no verdict
        assert h.agent.poller is None and h.agent.is_ready() == (True, "ok")
        h.host.unplug()  # ... and no uevent
        wait_for(lambda: h.agent.poller is not None, what="silent monitor noticed at a resync")
        ready, why = h.agent.is_ready()
        assert not ready and why.startswith("HotplugSilent:") and "USB" in why, why
        assert h.metric("nfa_udev_fallback_active") == 1.0
        wait_for(lambda: has_edgetpu(h.node()) == (False, False), what="unplug applied")
        # polling now: a plug with no uevent is announced by the poller (a resync would also catch
        # it, so the proof is the poller's synthetic USB event in the metric, not the label alone)
        def usb_events():
            return sum(float(line.rsplit(" ", 1)[1]) for line in h.agent.metrics.render().decode().splitlines()
                       if line.startswith("nfa_hotplug_events_total{") and 'subsystem="usb"' in line)

        before = usb_events()
        h.host.plug()
        wait_for(lambda: usb_events() > before, timeout=10, what="plug announced by the poller")
        wait_for(lambda: has_edgetpu(h.node()) == (True, True), timeout=10, what="plug applied")
    finally:
        assert h.close()


def test_a_monitor_that_delivers_events_is_never_judged_silent(harness):
    harness.start()
    for _ in range(2):
        harness.host.unplug()
        harness.inject("remove")
        wait_for(lambda: has_edgetpu(harness.node()) == (False, False), what="unplug")
        harness.host.plug()
        harness.inject("add")
        wait_for(lambda: has_edgetpu(harness.node()) == (True, True), what="plug")
    harness.agent.queue.put("resync", sources=None)
    wait_for(lambda: harness.agent.passes >= 6, what="a resync pass")
    assert harness.agent.poller is None and harness.agent.is_ready() == (True, "ok")
