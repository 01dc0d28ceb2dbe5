"""The fault matrix's shared pieces: a seeded Node, the in-process agent, the expected final
state computed independently, and the ``Ledger`` that checks every write the agent made.

Why a ledger and not only a final-state check: an agent can end in the right state and still
have flapped a label (removed it for one version, re-added it) or trampled a foreign taint
in between. The fake server's store keeps every version of the Node (the same events its
watch streams carry). The ledger wraps the server's test-side editors (``edit_node``,
``add_node``, ``delete_node``, and so the second writer too) to know which versions the test
made; every other Node version was written through the API, i.e. by the agent, even a write
whose answer the agent never received (a timed-out PATCH the server applied). For each such
version it compares with the version just before it:

* a label/annotation/taint/extended resource the agent did not own before the write is left
  exactly as it was (only the configured startup taint may be removed), and anything new the
  write adds is recorded in the ownership annotations;
* a label in ``should_stay`` (owned before and after the fault) keeps its value.

It also checks every PATCH body the agent sent (accepted or not): no merge patch sets a
``should_stay`` label to null or another value, no /status JSON patch removes a
``should_stay`` resource.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes.client import ApiClient

from agent import rules
from agent.desired import OWNERSHIP_ANNOTATIONS, DesiredNodeState, Taint
from agent.discovery import DiscoveryConfig, discover
from agent.hostfs import HostFS
from agent.kube.light_core import LightCoreV1Api
from agent.reconcile import BackoffSettings, NodeApi
from agent.reconcile.ownership import parse_ownership
from agent.runtime.agent import Agent, Settings
from agent.runtime.event_sources import SocketSource
from agent.runtime.uevent import encode_kernel_uevent
from tests.conftest import LABELS_DIR
from tests.runtime.configmap import write_configmap
from tests.runtime.helpers import CORAL_DEVPATH, CoralHost, wait_for
from tests.support.apiserver import KUBELET_ANNOTATIONS
from tests.support.store import NotFound

NODE = "edge-1"
STARTUP_TAINT = {"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}
STARTUP = Taint.parse("node-feature-agent.io/not-ready:NoSchedule")
CATALOGUE = {str(p.relative_to(LABELS_DIR)): p.read_text() for p in LABELS_DIR.rglob("*") if p.is_file()}
FAST = BackoffSettings(initial=0.05, maximum=0.2)

# Someone else's: kubelet's defaults plus an operator's labels (one in the NFD namespace, which
# the agent must still leave alone since it never wrote it), annotations, taints, a resource.
FOREIGN_LABELS = {"kubernetes.io/hostname": NODE, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "team.example.com/owner": "infra", "topology.kubernetes.io/zone": "zone-a",
                  "feature.node.kubernetes.io/custom-rack": "r12"}
FOREIGN_ANNOTATIONS = {**KUBELET_ANNOTATIONS, "team.example.com/contact": "ops@example.com"}
FOREIGN_TAINTS = [{"key": "dedicated.example.com/team", "value": "ml", "effect": "NoSchedule"},
                  {"key": "example.com/maintenance", "effect": "PreferNoSchedule"}]
FOREIGN_CAPACITY = {"cpu": "4", "memory": "8Gi", "pods": "110", "example.com/dongle": "2"}


def seed_node(server, name: str = NODE) -> dict[str, Any]:
    """Register the node as kubelet would, with foreign labels, annotations, taints, a
    foreign extended resource, and the startup taint."""
    return server.add_node(name, labels=dict(FOREIGN_LABELS), annotations=dict(FOREIGN_ANNOTATIONS),
                           taints=[dict(t) for t in FOREIGN_TAINTS], capacity=dict(FOREIGN_CAPACITY),
                           register_taints=[dict(STARTUP_TAINT)])


class Harness:
    """The real ``Agent`` in-process on a writable copy of fixtures/sysfs/coral-usb, events
    through a socketpair in kernel uevent wire format (the netlink path), API over real HTTP
    with the light client the ``run`` command uses. Backoffs shrunk to keep the suite fast."""

    def __init__(self, tmp_path: Path, server, *, request_timeout=(2.0, 5.0), host_cls=None, **overrides) -> None:
        self.server = server
        self.host = CoralHost(tmp_path)
        self.rules = tmp_path / "rules"
        write_configmap(self.rules, CATALOGUE)
        self.sender, receiver = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        options = dict(node_name=NODE, rules_dirs=[str(self.rules)], host_root=str(self.host.root), metrics_port=None,
                       debounce=0.05, debounce_max=0.5, startup_taints=(STARTUP,), watch_timeout=30, backoff=FAST,
                       retries=3)
        options.update(overrides)
        api = NodeApi(LightCoreV1Api(ApiClient(server.client_configuration())), request_timeout=request_timeout)
        self.agent = Agent(Settings(**options), api, event_source=SocketSource(receiver))
        if host_cls is not None:  # a HostFS with hooks (sysfs changing under the scan)
            self.agent.discovery.host = host_cls(str(self.host.root))

    def start(self, wait_ready: bool = True) -> Harness:
        self.agent.start()
        if wait_ready:
            wait_for(self.agent.ready.is_set, what="first reconcile")
        return self

    def inject(self, action: str, devpath: str = CORAL_DEVPATH, subsystem: str = "usb") -> None:
        self.sender.send(encode_kernel_uevent(action, devpath, subsystem))

    def unplug(self) -> None:
        """The Coral leaves: sysfs entries go, then the kernel's uevents (interface, device)."""
        self.host.unplug()
        self.inject("remove", CORAL_DEVPATH + "/2-2:1.0")
        self.inject("remove")

    def plug(self) -> None:
        self.host.plug()
        self.inject("add")
        self.inject("add", CORAL_DEVPATH + "/2-2:1.0")

    def metric(self, prefix: str) -> float | None:
        for line in self.agent.metrics.render().decode().splitlines():
            if line.startswith(prefix):
                return float(line.rsplit(" ", 1)[1])
        return None

    def expected(self, node: Mapping[str, Any] | None = None, rules_dir: Path | None = None) -> DesiredNodeState:
        return expected_state(self.host.root, rules_dir or self.rules, node or self.server.node(NODE))

    def converged(self, desired: DesiredNodeState) -> bool:
        try:
            node = self.server.node(NODE)
        except NotFound:
            return False
        return not differences(node, desired)

    def wait_converged(self, desired: DesiredNodeState | None = None, timeout: float = 20.0,
                       what: str = "convergence") -> DesiredNodeState:
        """Wait until the Node holds ``desired`` (default: computed from the host as it is now)."""
        def check():
            want = desired or self.expected()
            return want if self.converged(want) else None

        try:
            return wait_for(check, timeout=timeout, what=what)
        except AssertionError:
            raise AssertionError(f"{what}: {differences(self.server.node(NODE), desired or self.expected())}") from None

    def close(self) -> bool:
        finished = self.agent.stop(timeout=5)
        self.sender.close()
        return finished


def expected_state(host_root: Path, rules_dir: Path, node: Mapping[str, Any]) -> DesiredNodeState:
    """What the agent should publish, computed apart from the agent's loop: a fresh discovery
    of the host as it is now, the rules on disk, the node's foreign labels."""
    found = discover(HostFS(str(host_root)), DiscoveryConfig(node_name=NODE))
    catalogue = rules.load_catalogue([str(rules_dir)])
    labels = (node.get("metadata") or {}).get("labels") or {}
    owned = parse_ownership((node.get("metadata") or {}).get("annotations")).labels
    foreign = {k: v for k, v in labels.items() if k not in owned}
    return rules.desired_state(found.features, found.labels, foreign, catalogue, None, found.label_origins)


def differences(node: Mapping[str, Any], desired: DesiredNodeState) -> list[str]:
    """Why ``node`` does not hold ``desired`` (empty: it does). Startup taint must be gone."""
    meta = node.get("metadata") or {}
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    capacity = (node.get("status") or {}).get("capacity") or {}
    taints = (node.get("spec") or {}).get("taints") or []
    owned = parse_ownership(annotations)
    out = [f"label {k}={labels.get(k)!r}, want {v!r}" for k, v in desired.labels.items() if labels.get(k) != v]
    out += [f"stale owned label {k}" for k in labels if k in owned.labels and k not in desired.labels]
    out += [f"resource {k}={capacity.get(k)!r}, want {v}" for k, v in desired.extended_resources.items()
            if str(capacity.get(k)) != str(v)]
    out += [f"stale owned resource {k}" for k in capacity if k in owned.resources and k not in desired.extended_resources]
    if owned.labels != frozenset(desired.labels):
        out.append(f"ownership record {sorted(owned.labels ^ frozenset(desired.labels))} differs")
    out += [f"annotation {k}" for k, v in desired.annotations.items() if annotations.get(k) != v]
    have = {(t["key"], t.get("effect")): t.get("value", "") for t in taints}
    out += [f"taint {t.key}:{t.effect}" for t in desired.taints if have.get((t.key, t.effect)) != (t.value or "")]
    if (STARTUP_TAINT["key"], STARTUP_TAINT["effect"]) in have:
        out.append("startup taint still there")
    return out


def foreign_view(node: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a Node the agent does not own, per the node's own ownership record."""
    meta = node.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    owned = parse_ownership(annotations)
    taints = (node.get("spec") or {}).get("taints") or []
    return {"labels": {k: v for k, v in (meta.get("labels") or {}).items() if k not in owned.labels},
            "annotations": {k: v for k, v in annotations.items()
                            if k not in owned.annotations and k not in OWNERSHIP_ANNOTATIONS},
            "taints": sorted((t["key"], t.get("effect"), t.get("value", "")) for t in taints
                             if (t["key"], t.get("effect")) not in owned.taints),
            "capacity": {k: v for k, v in ((node.get("status") or {}).get("capacity") or {}).items()
                         if k not in owned.resources}}


def seeded_foreign(extra_labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``foreign_view`` of the seeded node once the agent has converged (startup taint gone)."""
    return {"labels": {**FOREIGN_LABELS, **(extra_labels or {})}, "annotations": dict(FOREIGN_ANNOTATIONS),
            "taints": sorted((t["key"], t.get("effect"), t.get("value", "")) for t in FOREIGN_TAINTS),
            "capacity": dict(FOREIGN_CAPACITY)}


class Ledger:
    """Which Node versions the agent wrote, and whether any of them broke the invariants."""

    def __init__(self, server, node: str = NODE) -> None:
        self.server, self.node = server, node
        with server.store.lock:
            self.start_rv = server.store.rv
            try:
                self.initial: dict | None = server.node(node)
            except NotFound:  # not registered yet
                self.initial = None
        self.test_rvs: set[int] = set()
        self._lock = threading.Lock()
        for name in ("edit_node", "add_node", "delete_node"):
            self._wrap(name)

    def _wrap(self, name: str) -> None:
        original = getattr(self.server, name)

        def wrapped(*args, **kwargs):
            with self.server.store.lock:  # the version it makes is known before anyone else writes
                result = original(*args, **kwargs)
                with self._lock:
                    self.test_rvs.add(self.server.store.rv)
            return result

        setattr(self.server, name, wrapped)

    def versions(self) -> list:
        return [e for e in self.server.store.events_after(self.start_rv)
                if e.resource == "nodes" and e.object["metadata"]["name"] == self.node]

    def agent_writes(self) -> list[tuple[dict, dict]]:
        """(previous version, version the agent wrote) pairs, oldest first."""
        pairs, previous = [], self.initial
        with self._lock:
            test_rvs = set(self.test_rvs)
        for event in self.versions():
            if event.type == "MODIFIED" and event.rv not in test_rvs and previous is not None:
                pairs.append((previous, event.object))
            previous = event.object if event.type != "DELETED" else None
        return pairs

    def violations(self, should_stay: Mapping[str, str] = {}, should_stay_resources: Iterable[str] = ()) -> list[str]:
        out: list[str] = []
        keep_resources = set(should_stay_resources)
        for before, after in self.agent_writes():
            out += _write_violations(before, after, should_stay, keep_resources)
        for record in self.server.requests:
            if record.method != "PATCH" or record.node != self.node:
                continue
            body = record.body
            if record.subresource is None and isinstance(body, dict):
                labels = (body.get("metadata") or {}).get("labels") or {}
                out += [f"PATCH sent {k}={v!r}, must stay {should_stay[k]!r}" for k, v in labels.items()
                        if k in should_stay and v != should_stay[k]]
            elif record.subresource == "status" and isinstance(body, list):
                out += [f"PATCH /status removes {op.get('path')}" for op in body if isinstance(op, dict)
                        and op.get("op") == "remove" and str(op.get("path", "")).rsplit("/", 1)[-1].replace("~1", "/")
                        in keep_resources]
        return out

    def check_new(self) -> tuple[int, list[str]]:
        """(agent writes, violations) among the versions made since the last call. For runs
        longer than the store's watch history (the soak bench): call it more often than the
        history fills (10,000 versions), and it never looks at a version twice."""
        if not hasattr(self, "_checked_rv"):
            self._checked_rv, self._previous = self.start_rv, self.initial
        writes, out = 0, []
        if self.server.store.trimmed > self._checked_rv:
            out.append(f"versions {self._checked_rv}..{self.server.store.trimmed} left the history unchecked")
        for event in [e for e in self.versions() if e.rv > self._checked_rv]:
            with self._lock:
                ours = event.rv not in self.test_rvs
                self.test_rvs.discard(event.rv)
            if event.type == "MODIFIED" and ours and self._previous is not None:
                writes += 1
                out += _write_violations(self._previous, event.object, {}, set())
            self._previous = event.object if event.type != "DELETED" else None
            self._checked_rv = event.rv
        return writes, out

    def assert_clean(self, should_stay: Mapping[str, str] = {}, should_stay_resources: Iterable[str] = ()) -> int:
        """Assert no violations; returns how many agent writes were checked."""
        problems = self.violations(should_stay, should_stay_resources)
        assert not problems, "\n".join(problems[:20])
        return len(self.agent_writes())


def _write_violations(before: dict, after: dict, should_stay: Mapping[str, str], keep_resources: set[str]) -> list[str]:
    rv = after["metadata"]["resourceVersion"]
    out: list[str] = []
    if before["metadata"].get("uid") != after["metadata"].get("uid"):
        return out
    owned_before = parse_ownership(before["metadata"].get("annotations"))
    owned_after = parse_ownership(after["metadata"].get("annotations"))
    for section, owned_b, owned_a in (("labels", owned_before.labels, owned_after.labels),
                                      ("annotations", owned_before.annotations | set(OWNERSHIP_ANNOTATIONS),
                                       owned_after.annotations | set(OWNERSHIP_ANNOTATIONS))):
        old, new = before["metadata"].get(section) or {}, after["metadata"].get(section) or {}
        for key in set(old) | set(new):
            if key in owned_b:
                continue
            if key in old and new.get(key) != old[key]:
                out.append(f"rv {rv}: foreign {section[:-1]} {key} changed {old[key]!r} -> {new.get(key)!r}")
            elif key not in old and key not in owned_a:
                out.append(f"rv {rv}: {section[:-1]} {key} added without an ownership record")
    out += _taint_violations(rv, before, after, owned_before.taints, owned_after.taints)
    old_cap = (before.get("status") or {}).get("capacity") or {}
    new_cap = (after.get("status") or {}).get("capacity") or {}
    for key in set(old_cap) | set(new_cap):
        if key not in owned_before.resources and key in old_cap and new_cap.get(key) != old_cap[key]:
            out.append(f"rv {rv}: foreign resource {key} changed {old_cap[key]!r} -> {new_cap.get(key)!r}")
    old_labels, new_labels = before["metadata"].get("labels") or {}, after["metadata"].get("labels") or {}
    for key, value in should_stay.items():
        if old_labels.get(key) == value and new_labels.get(key) != value:
            out.append(f"rv {rv}: owned label {key} flapped {value!r} -> {new_labels.get(key)!r}")
    for key in keep_resources:
        if key in old_cap and new_cap.get(key) != old_cap[key]:
            out.append(f"rv {rv}: owned resource {key} flapped {old_cap[key]!r} -> {new_cap.get(key)!r}")
    return out


def _taint_violations(rv: str, before: dict, after: dict, owned_before: Iterable[Any],
                      owned_after: Iterable[Any]) -> list[str]:
    """Foreign taints changed, and taints added without an ownership record."""
    out: list[str] = []
    old_taints = {(t["key"], t.get("effect")): t.get("value", "") for t in (before["spec"].get("taints") or [])}
    new_taints = {(t["key"], t.get("effect")): t.get("value", "") for t in (after["spec"].get("taints") or [])}
    for ident in set(old_taints) | set(new_taints):
        if ident in owned_before:
            continue
        if ident in old_taints and ident not in new_taints and ident == (STARTUP_TAINT["key"], STARTUP_TAINT["effect"]):
            continue  # the sanctioned startup-taint removal
        if ident in old_taints and new_taints.get(ident) != old_taints[ident]:
            out.append(f"rv {rv}: foreign taint {ident} changed {old_taints[ident]!r} -> {new_taints.get(ident)!r}")
        elif ident not in old_taints and ident not in owned_after:
            out.append(f"rv {rv}: taint {ident} added without an ownership record")
    return out


def stable(before: DesiredNodeState, after: DesiredNodeState) -> tuple[dict[str, str], set[str]]:
    """Labels and resources owned with the same value before and after a fault: must not flap."""
    labels = {k: v for k, v in before.labels.items() if after.labels.get(k) == v}
    resources = {k for k, v in before.extended_resources.items() if str(after.extended_resources.get(k)) == str(v)}
    return labels, resources
