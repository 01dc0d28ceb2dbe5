"""Misuse matrix: wrong invocations and hostile states.

Each case runs the real CLI as a process and asserts: the exit code, exactly one line on
stderr naming the problem, no traceback, and — for the commands that talk to a cluster — a
Node on the in-repo API server left exactly as it was (same object, same resourceVersion).
A wrong flag must never strip a Node.

Hostile cluster input (a tenant's NFD objects; the agent in-process against the in-repo server,
in ``tests/runtime/test_hostile_objects.py``): an object's NoExecute taints without
``--enable-taints`` (``test_taints_from_an_object_need_enable_taints``), 1,001 junk objects
named before a legitimate one (``test_more_objects_than_the_bound_named_first_keep_the_legitimate_label_after_a_restart``),
one object of 10,000 rules (``test_an_object_with_10000_rules_is_refused_before_it_is_parsed``),
an object over etcd's limit (``test_the_server_refuses_an_object_over_etcds_request_limit``).

Operator paths tested elsewhere, each as the real process (or the chart's real engine):

=================================================  ===========================================================
case                                               test
=================================================  ===========================================================
bad kubeconfig (missing, garbage, binary, no       the ``*-kubeconfig``, ``*-current-context``, ``*-incluster``
current context, no service account), every        cases below (apply, run, clean, clean --pods, plan,
command                                            placement)
SIGHUP / SIGUSR1 / SIGUSR2 to ``run``              test_run_ignores_sigusr_and_resyncs_on_sighup (below)
SIGHUP / SIGUSR1 / SIGUSR2 to ``placement``        test_placement_ignores_sighup_and_sigusr (below)
device plugin socket under umask 000               deviceplugin/test_socket_mode::test_plugin_sockets_are_0600_under_umask_000
explain-image against a plain-HTTP registry        images/test_explain_image::test_a_plain_http_registry_without_the_flag_says_which_flag
``--insecure-registry HOST`` for ``HOST:PORT``     images/test_explain_image::test_insecure_registry_without_the_port_is_named_as_the_miss
``discover --host-root X.tar.gz`` (snapshot)       test_snapshot::test_cli_writes_a_snapshot_that_discover_replays
hostile or oversized snapshot archive              test_snapshot::test_a_hostile_archive_is_refused_in_one_line_and_nothing_escapes,
                                                   test_snapshot::test_archive_bounds_stop_unpacking, ``discover-archive-*`` below
flags printing their default twice, no help        test_docs::test_every_flag_has_help_and_states_its_default_once,
                                                   test_docs::test_help_of_every_command_prints_in_a_process
``--tag-ttl 0``                                    test_docs::test_tag_ttl_help_and_parser_agree_on_zero, ``placement-negative-tag-ttl``
Warning Events logged at info (placement)          placement/test_controller::test_the_pod_s_own_choice_is_kept_and_a_conflict_is_said
Uninstall leaves the gating policy behind          test_docs::test_uninstall_removes_placement_admission_first_and_says_why
chart admission vs the cluster's version           test_helm_chart::test_placement_admission_follows_the_cluster_s_version,
                                                   test_helm_chart::test_an_admission_form_the_cluster_cannot_serve_is_refused_at_install
=================================================  ===========================================================
"""

from __future__ import annotations

import collections
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil
import pytest

from tests.conftest import FIXTURES, LABELS_DIR, REPO
from tests.support.apiserver import FakeApiServer

NODE = "misuse-node"
CORAL = str(FIXTURES / "coral-usb")
LABELS = {"kubernetes.io/hostname": NODE, "accelerators/edgetpu": "true",
          "feature.node.kubernetes.io/usb-fe_1a6e_089a.present": "true"}
ANNOTATIONS = {"node-feature-agent.io/owned-labels": "accelerators/edgetpu,feature.node.kubernetes.io/usb-fe_1a6e_089a.present"}


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]
    code: int = 2
    needle: str = ""  # a word the one-line message must contain
    env: tuple[tuple[str, str], ...] = ()


def cases(paths: dict[str, str]) -> list[Case]:
    p = paths
    k = ("--kubeconfig", p["kubeconfig"], "--node-name", NODE)
    good = ("--host-root", CORAL)
    return [
        # host root
        Case("discover-missing-root", ("discover", "--host-root", "/nonexistent-host"), needle="does not exist"),
        Case("discover-root-is-file", ("discover", "--host-root", p["file"]), needle="not a directory"),
        Case("discover-empty-root", ("discover", "--host-root", p["empty"]), needle="sys"),
        Case("discover-blank-root", ("discover", "--host-root", ""), needle="empty"),
        Case("plan-empty-root", ("plan", "--host-root", p["empty"]), needle="sys"),
        Case("explain-missing-root", ("explain", "accelerators/edgetpu", "--host-root", "/nonexistent-host"), needle="does not exist"),
        Case("snapshot-empty-root", ("snapshot", "--host-root", p["empty"], "--output", p["out"]), needle="sys"),
        Case("apply-empty-root", ("apply", "--host-root", p["empty"], *k), needle="sys"),
        Case("apply-only-sys", ("apply", "--host-root", p["only_sys"], *k), needle="proc"),
        Case("run-empty-root", ("run", "--host-root", p["empty"], *k), needle="sys"),
        Case("run-root-is-file", ("run", "--host-root", p["file"], *k), needle="not a directory"),
        # the DRA plugin's directories (--dra): one line, exit 2, before any API request
        Case("run-dra-plugin-dir-is-file", ("run", *good, "--dra", "on", "--dra-plugin-dir", p["file"], *k),
             needle="--dra-plugin-dir"),
        Case("run-dra-registry-dir-under-file", ("run", *good, "--dra", "auto", "--dra-registry-dir",
                                                 p["file"] + "/registry", *k), needle="not a directory"),
        Case("run-cdi-dir-empty", ("run", *good, "--dra", "on", "--cdi-dir", "", *k), needle="--cdi-dir"),
        # rules
        Case("plan-missing-rules", ("plan", *good, "--rules", "/nonexistent-rules"), needle="--rules"),
        Case("plan-rules-is-file", ("plan", *good, "--rules", p["file"]), needle="not a directory"),
        Case("validate-missing-rules", ("validate", "--rules", "/nonexistent-rules"), needle="--rules"),
        Case("explain-missing-rules", ("explain", "x", *good, "--rules", "/nonexistent-rules"), needle="--rules"),
        Case("apply-missing-rules", ("apply", *good, "--rules", "/nonexistent-rules", *k), needle="--rules"),
        Case("apply-second-rules-missing", ("apply", *good, "--rules", str(REPO / "labels"), "--rules", "/nonexistent-rules", *k),
             needle="--rules"),
        Case("run-missing-rules", ("run", *good, "--rules", "/nonexistent-rules", *k), needle="--rules"),
        Case("env-rules-missing", ("plan", *good), needle="--rules", env=(("NODE_FEATURE_AGENT_RULES", "/nonexistent-rules"),)),
        # client configuration
        Case("apply-garbage-kubeconfig", ("apply", *good, "--kubeconfig", p["garbage"], "--node-name", NODE), needle="configuration"),
        Case("apply-binary-kubeconfig", ("apply", *good, "--kubeconfig", p["binary"], "--node-name", NODE), needle="configuration"),
        Case("apply-missing-kubeconfig", ("apply", *good, "--kubeconfig", "/nonexistent-kubeconfig", "--node-name", NODE),
             needle="kubeconfig"),
        Case("run-garbage-kubeconfig", ("run", *good, "--kubeconfig", p["garbage"], "--node-name", NODE), needle="configuration"),
        Case("clean-garbage-kubeconfig", ("clean", "--kubeconfig", p["garbage"], "--node-name", NODE), needle="configuration"),
        Case("apply-no-incluster", ("apply", *good, "--node-name", NODE), needle="configuration",
             env=(("KUBECONFIG", ""), ("KUBERNETES_SERVICE_HOST", ""))),
        Case("apply-no-current-context", ("apply", *good, "--kubeconfig", p["no_context"], "--node-name", NODE),
             needle="current-context"),
        Case("run-missing-kubeconfig", ("run", *good, "--kubeconfig", "/nonexistent-kubeconfig", "--node-name", NODE),
             needle="no such file"),
        Case("run-no-current-context", ("run", *good, "--kubeconfig", p["no_context"], "--node-name", NODE),
             needle="current-context"),
        Case("clean-missing-kubeconfig", ("clean", "--kubeconfig", "/nonexistent-kubeconfig", "--node-name", NODE),
             needle="no such file"),
        Case("clean-pods-garbage-kubeconfig", ("clean", "--pods", "--kubeconfig", p["garbage"]), needle="configuration"),
        Case("clean-pods-missing-kubeconfig", ("clean", "--pods", "--kubeconfig", "/nonexistent-kubeconfig"),
             needle="no such file"),
        Case("clean-pods-no-current-context", ("clean", "--pods", "--kubeconfig", p["no_context"]),
             needle="current-context"),
        Case("placement-garbage-kubeconfig", ("placement", "--kubeconfig", p["garbage"], "--metrics-port", "off"),
             needle="configuration"),
        Case("placement-binary-kubeconfig", ("placement", "--kubeconfig", p["binary"], "--metrics-port", "off"),
             needle="configuration"),
        Case("placement-missing-kubeconfig", ("placement", "--kubeconfig", "/nonexistent-kubeconfig",
                                              "--metrics-port", "off"), needle="no such file"),
        Case("placement-no-current-context", ("placement", "--kubeconfig", p["no_context"], "--metrics-port", "off"),
             needle="current-context"),
        Case("placement-no-incluster", ("placement", "--metrics-port", "off"), needle="in-cluster",
             env=(("KUBECONFIG", ""), ("KUBERNETES_SERVICE_HOST", ""))),
        Case("plan-garbage-kubeconfig", ("plan", *good, "--kubeconfig", p["garbage"]), needle="configuration"),
        Case("plan-no-current-context", ("plan", *good, "--kubeconfig", p["no_context"]), needle="current-context"),
        Case("apply-no-node-name", ("apply", *good, "--kubeconfig", p["kubeconfig"]), needle="node name", env=(("NODE_NAME", ""),)),
        Case("run-no-node-name", ("run", *good, "--kubeconfig", p["kubeconfig"]), needle="node name", env=(("NODE_NAME", ""),)),
        # numbers and choices
        Case("run-negative-retries", ("run", *good, *k, "--retries", "-1"), needle="--retries"),
        Case("run-word-retries", ("run", *good, *k, "--retries", "many"), needle="--retries"),
        Case("apply-zero-retries", ("apply", *good, *k, "--retries", "0"), needle="--retries"),
        Case("run-zero-resync", ("run", *good, *k, "--resync-interval", "0"), needle="--resync-interval"),
        Case("run-negative-resync", ("run", *good, *k, "--resync-interval", "-5"), needle="--resync-interval"),
        Case("run-nan-poll", ("run", *good, *k, "--poll-interval", "nan"), needle="--poll-interval"),
        Case("run-negative-debounce", ("run", *good, *k, "--debounce", "-1"), needle="--debounce"),
        Case("run-infinite-jitter", ("run", *good, *k, "--startup-jitter", "inf"), needle="--startup-jitter"),
        Case("run-port-out-of-range", ("run", *good, *k, "--metrics-port", "70000"), needle="--metrics-port"),
        Case("run-bogus-udev-mode", ("run", *good, *k, "--udev-mode", "bogus"), needle="--udev-mode"),
        Case("run-evict-without-guard", ("run", *good, *k, "--evict-orphans"), needle="--pod-guard"),
        Case("run-bad-startup-taint", ("run", *good, *k, "--startup-taint", "x:Sometimes"), needle="taint"),
        Case("apply-bad-startup-taint", ("apply", *good, *k, "--startup-taint", "no-effect"), needle="taint"),
        # snapshot archives as --host-root: replayed by the read-only commands only, hostile ones refused
        Case("apply-host-root-archive", ("apply", "--host-root", p["snapshot_tar"], *k), needle="only discover"),
        Case("run-host-root-archive", ("run", "--host-root", p["snapshot_tar"], *k), needle="only discover"),
        Case("discover-archive-dotdot", ("discover", "--host-root", p["dotdot_tar"]), needle="refused"),
        Case("discover-archive-garbage", ("discover", "--host-root", p["garbage_tar"]), needle="not a readable"),
        Case("placement-negative-tag-ttl", ("placement", "--tag-ttl", "-1"), needle="--tag-ttl"),
        Case("discover-unknown-source", ("discover", *good, "--sources", "pci,floppy"), needle="floppy"),
        Case("discover-empty-sources", ("discover", *good, "--sources", ","), needle="--sources"),
        Case("discover-bad-format", ("discover", *good, "--format", "xml"), needle="--format"),
        Case("unknown-command", ("frobnicate",), needle="frobnicate"),
        Case("no-command", (), needle="COMMAND"),
        Case("explain-no-names", ("explain", *good), needle="LABEL_OR_RESOURCE"),
        Case("plan-node-labels-missing-file", ("plan", *good, "--node-labels", p["missing_json"]), needle="--node-labels"),
        Case("plan-node-labels-binary", ("plan", *good, "--node-labels", p["binary"]), needle="--node-labels"),
        # several names, one produced by nothing: a clear answer, exit 1, never a traceback
        Case("explain-several-names", ("explain", "accelerators/edgetpu", "no.such/label", "x", *good), code=1),
        # a rule that can never match: validate fails on it, naming the line and the closest name
        Case("validate-misspelt-feature", ("validate", "--rules", p["typo_rules"]), code=1, needle="did you mean 'usb.device'"),
    ]


#: the case names, for the parametrization (the paths only matter when a case runs)
CASE_NAMES = [case.name for case in cases(collections.defaultdict(str))]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    base = tmp_path_factory.mktemp("misuse")
    paths = {name: str(base / name) for name in ("file", "empty", "only_sys", "garbage", "binary", "out", "missing_json",
                                                 "typo_rules", "no_context")}
    (base / "typo_rules").mkdir()
    (base / "typo_rules" / "coral.yaml").write_text(
        "apiVersion: nfd.k8s-sigs.io/v1alpha1\nkind: NodeFeatureRule\nmetadata: {name: coral}\nspec:\n  rules:\n"
        "  - name: coral\n    labels: {example.com/coral: 'true'}\n    matchFeatures:\n"
        "    - feature: usb.devic\n      matchExpressions:\n        vendor: {op: In, value: ['1a6e']}\n")
    (base / "file").write_text("not a directory\n")
    (base / "empty").mkdir()
    (base / "only_sys" / "sys").mkdir(parents=True)
    (base / "garbage").write_text("::: this [is not yaml\n\tat all")
    (base / "binary").write_bytes(bytes(range(256)) * 4)
    import io
    import tarfile

    for name, member in (("snapshot_tar", "sys"), ("dotdot_tar", "../escaped")):
        paths[name] = str(base / f"{name}.tar.gz")
        with tarfile.open(paths[name], "w:gz") as tar:
            info = tarfile.TarInfo(member)
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    paths["garbage_tar"] = str(base / "garbage.tgz")
    (base / "garbage.tgz").write_bytes(b"\x1f\x8b" + bytes(range(256)))
    # a well-formed kubeconfig naming no current context (kubectl: "current-context is not set")
    (base / "no_context").write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n")
    paths["missing_json"] = str(base / "labels-that-do-not-exist.json")
    with FakeApiServer() as server:
        server.add_node(NODE, labels=dict(LABELS), annotations=dict(ANNOTATIONS),
                        taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}],
                        capacity={"cpu": "4", "pods": "110", "node-feature-agent.io/edgetpu": "1"})
        paths["kubeconfig"] = str(server.kubeconfig(base / "kubeconfig"))
        yield server, paths


def run_cli(argv, env_overrides=(), timeout=60):
    env = {k: v for k, v in os.environ.items() if k not in ("NODE_FEATURE_AGENT_RULES", "HOST_ROOT")}
    env.update(dict(env_overrides))
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, "-m", "agent", "--log-format", "json", *argv], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_the_matrix_has_at_least_forty_cases(world):
    assert len(cases(world[1])) >= 40


@pytest.mark.parametrize("name", CASE_NAMES)
def test_misuse_case(world, name):
    server, paths = world
    case = next(case for case in cases(paths) if case.name == name)
    before = server.node(NODE)
    cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run_cli(case.argv, case.env)
    cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    after = server.node(NODE)
    # no busy loop behind a refusal: the process's CPU is its imports (~1-2 s), not a spin
    # until the 60 s timeout (which run_cli would raise on anyway)
    cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
    assert cpu < 10.0, (case.name, cpu)
    assert "Traceback" not in result.stderr and "Traceback" not in result.stdout, (case.name, result.stderr)
    assert result.returncode == case.code, (case.name, result.returncode, result.stderr)
    assert after == before, f"{case.name} changed the Node"
    if case.code == 2:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert len(lines) == 1, (case.name, result.stderr)
        assert lines[0].startswith("error:"), (case.name, lines[0])
        assert case.needle.lower() in lines[0].lower(), (case.name, lines[0])
    else:
        assert case.needle.lower() in result.stderr.lower(), (case.name, result.stderr)


def terminate_and_check(proc: subprocess.Popen, phase: str) -> None:
    """SIGTERM ``proc``: it must exit 0, without a traceback, well within the 1 s contract's
    generous test bound (a noisy 2-core machine; a hang would be many seconds)."""
    try:
        assert proc.poll() is None, proc.stderr.read()
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read()
    assert code == 0, (phase, stderr[-2000:])
    assert "Traceback" not in stderr, phase
    assert waited < 3.0, (phase, waited)


def test_sigterm_ends_run_within_a_second_while_the_api_is_unreachable(tmp_path):
    """Start-up with an API server that refuses connections (the agent retrying) and a long
    startup jitter: SIGTERM must end the process within about a second, exit 0, and the
    process must not have spun (CPU time small)."""
    import socket

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n")
    for phase, extra in (("startup-jitter", ["--startup-jitter", "30"]), ("retrying", ["--startup-jitter", "0"])):
        env = {k: v for k, v in os.environ.items() if k != "NODE_FEATURE_AGENT_RULES"}
        env["PYTHONPATH"] = str(REPO)
        proc = subprocess.Popen([sys.executable, "-m", "agent", "--log-format", "json", "run", "--host-root", CORAL,
                                 "--kubeconfig", str(kubeconfig), "--node-name", NODE, "--metrics-port", "off",
                                 "--udev-mode", "off", *extra], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(4)
        cpu = psutil.Process(proc.pid).cpu_times() if proc.poll() is None else None
        terminate_and_check(proc, phase)
        assert cpu.user + cpu.system < 3.0, (phase, cpu)  # importing the client is ~1 s; a busy loop is 4 s


@pytest.mark.parametrize("phase", ["first-pass-write-in-flight", "steady-with-rules-and-node-watch",
                                   "rules-edit-being-judged"])
def test_sigterm_ends_run_within_a_second_in_every_later_phase(tmp_path, phase):
    """SIGTERM ends the process within a second in every phase, so no rollout or drain waits out
    the grace period; here the phases after start-up: a first pass whose PATCH the server holds
    for 20 s, the steady state (node watch streaming, rules watcher waiting), and right after
    a rules edit. SIGTERM must end the process promptly with exit 0, without a traceback."""
    rules = tmp_path / "rules"
    shutil.copytree(LABELS_DIR, rules)
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        if phase == "first-pass-write-in-flight":
            server.faults.slow(20, count=5, verb="PATCH")
        env = {k: v for k, v in os.environ.items() if k != "NODE_FEATURE_AGENT_RULES"}
        env["PYTHONPATH"] = str(REPO)
        proc = subprocess.Popen([sys.executable, "-m", "agent", "--log-format", "json", "run", "--host-root", CORAL,
                                 "--rules", str(rules), "--kubeconfig", str(kubeconfig), "--node-name", NODE,
                                 "--metrics-port", "off", "--udev-mode", "off", "--startup-jitter", "0"],
                                cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 30
            if phase == "first-pass-write-in-flight":
                while not server.faults.injected and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert server.faults.injected, "the first PATCH never reached the server"
            else:
                while not (server.node(NODE)["metadata"].get("labels") or {}).get("accelerators/edgetpu"):
                    assert time.monotonic() < deadline and proc.poll() is None, "never labelled"
                    time.sleep(0.05)
                if phase == "rules-edit-being-judged":
                    (rules / "rules" / "zz-broken.yaml").write_text("kind: NodeFeatureRule\nmetadata: {name: x\n")
                    time.sleep(0.3)
        except BaseException:
            proc.kill()
            raise
        terminate_and_check(proc, phase)  # a hang in the held PATCH would be ~20 s


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _resync_passes(log_path) -> int:
    import json

    count = 0
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == "reconcile" and str(record.get("msg") or record.get("message") or "").startswith(
                "reconcile (resync"):
            count += 1
    return count


class _SlowClients:
    """``count`` connections that never finish their request: each sends the start of a head,
    then one more header byte every second (a per-read timeout never fires), and is opened
    again when the server closes it. A thread, from ``with`` to its end."""

    def __init__(self, port: int, count: int) -> None:
        import threading

        self.port, self.count = port, count
        self.opened = 0  # connections the server took, reopened ones included
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _open(self):  # a socket, or None when the server would not take it
        import socket

        conn = socket.socket()
        conn.settimeout(0.5)
        try:
            conn.connect(("127.0.0.1", self.port))
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        except OSError:
            conn.close()
            return None
        self.opened += 1
        return conn

    def _run(self) -> None:
        conns: list = []
        while not self._stop.is_set():
            conns = [c for c in conns if c is not None]
            while len(conns) < self.count and not self._stop.is_set():
                conns.append(self._open())
            for index, conn in enumerate(conns):
                if conn is None:
                    continue
                try:
                    conn.sendall(b"x")
                except OSError:
                    conn.close()
                    conns[index] = None
            self._stop.wait(1.0)
        for conn in conns:
            if conn is not None:
                conn.close()

    def __enter__(self) -> _SlowClients:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def test_a_flood_of_idle_clients_on_the_metrics_port_neither_strips_the_node_nor_kills_the_agent(tmp_path):
    """Anyone who reaches the metrics/health port held a thread and a
    descriptor per connection, without a cap. With the descriptor limit at 256, 300 idle
    half-sent requests made sysfs reads fail with EMFILE, and the next resync removed 11-15
    labels and the Coral's extended resource. Now the endpoint holds at most an eighth of the
    limit: resyncs during the flood change nothing, the agent lives, and /healthz answers after."""
    from tests.runtime.helpers import CoralHost, has_edgetpu

    host = CoralHost(tmp_path)
    port = _free_port()
    log_path = tmp_path / "agent.log"
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        env = {k: v for k, v in os.environ.items() if k != "NODE_FEATURE_AGENT_RULES"}
        env["PYTHONPATH"] = str(REPO)
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agent", "--log-format", "json", "run", "--host-root", str(host.root),
                 "--rules", str(LABELS_DIR), "--kubeconfig", str(kubeconfig), "--node-name", NODE,
                 "--metrics-port", str(port), "--metrics-address", "127.0.0.1", "--udev-mode", "off",
                 "--startup-jitter", "0", "--resync-interval", "1"],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log,
                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256)))
        deadline = time.monotonic() + 60
        while has_edgetpu(server.node(NODE)) != (True, True):
            assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()[-3000:]
            time.sleep(0.05)
        before = server.node(NODE)
        with _SlowClients(port, 300) as flood:
            deadline = time.monotonic() + 120
            while flood.opened < 300:  # as many as the limit allows the process, at least
                assert time.monotonic() < deadline and proc.poll() is None, f"{flood.opened} connections opened"
                time.sleep(0.05)
            passes = _resync_passes(log_path)
            deadline = time.monotonic() + 60
            while _resync_passes(log_path) < passes + 3:  # resyncs while the flood goes on
                assert time.monotonic() < deadline and proc.poll() is None, log_path.read_text()[-3000:]
                time.sleep(0.05)
            after = server.node(NODE)
        assert proc.poll() is None, log_path.read_text()[-3000:]
        assert after["metadata"]["labels"] == before["metadata"]["labels"]
        assert after["metadata"]["annotations"] == before["metadata"]["annotations"]
        assert after["status"]["capacity"] == before["status"]["capacity"]
        deadline = time.monotonic() + 30
        while True:
            try:
                import urllib.request

                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                    assert answer.status == 200
                    break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "/healthz never answered after the flood"
                time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert "Traceback" not in log_path.read_text()


#: hostile host states for ``apply`` on the Coral USB Accelerator's host (coral-usb): its
#: ``idVendor`` a directory or a FIFO while its device directory is still listed, discovery
#: out of descriptors, or a host file read but not whole (``tests/faults/test_unreadable_host.py``
#: holds the same cases for the PCIe card, and for ``run``)
UNREADABLE_IDVENDOR = "sys/devices/pci0000:00/0000:00:14.0/usb2/2-2/idVendor"


def _idvendor_a_directory(root):
    (root / UNREADABLE_IDVENDOR).unlink()
    (root / UNREADABLE_IDVENDOR).mkdir()


def _idvendor_a_fifo(root):
    (root / UNREADABLE_IDVENDOR).unlink()
    os.mkfifo(root / UNREADABLE_IDVENDOR)


def _cpuinfo_made(shape):
    """/proc/cpuinfo rewritten incomplete (``tests/faults/test_unreadable_host.py``'s shapes)."""
    def make(root):
        from tests.faults.test_unreadable_host import INCOMPLETE

        path = root / "proc/cpuinfo"
        path.write_text(INCOMPLETE[shape](path.read_text()))
    return make


def _emptied(path):
    """A kernel file that always has a line, found empty (memory-swap, system-os_release.*,
    kernel-version.* and kernel-config.* decide on them)."""
    return lambda root: (root / path).write_bytes(b"")


HOSTILE_HOSTS = {"idvendor-eisdir": _idvendor_a_directory, "idvendor-fifo": _idvendor_a_fifo,
                 "out-of-descriptors": lambda root: None,
                 "cpuinfo-empty": _cpuinfo_made("empty"), "cpuinfo-cut-mid-line": _cpuinfo_made("cut-mid-line"),
                 "cpuinfo-fewer-processors": _cpuinfo_made("fewer-processors"),
                 "swaps-empty": _emptied("proc/swaps"), "os-release-empty": _emptied("etc/os-release"),
                 "osrelease-empty": _emptied("proc/sys/kernel/osrelease")}


@pytest.mark.parametrize("state", list(HOSTILE_HOSTS))
def test_apply_on_a_host_it_cannot_read_leaves_the_node_as_it_was(tmp_path, state):
    """A labelled Node, then ``apply`` on the same host with a file it cannot read: exit 0, no
    traceback, the Node exactly as it was (same resourceVersion: nothing written), a Warning
    Event saying what is held."""
    from tests.faults.test_unreadable_host import STARVED

    root = tmp_path / "host"
    shutil.copytree(CORAL, root, symlinks=True)
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        argv = ("apply", "--once", "--host-root", str(root), "--rules", str(LABELS_DIR), "--kubeconfig",
                str(kubeconfig), "--node-name", NODE)
        assert run_cli(argv).returncode == 0
        labelled = server.node(NODE)
        assert labelled["metadata"]["labels"]["accelerators/edgetpu"] == "true"
        HOSTILE_HOSTS[state](root)
        if state == "out-of-descriptors":
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            result = subprocess.run([sys.executable, "-c", STARVED, "0", "-", "--log-format", "json", *argv], cwd=REPO,
                                    env=env, capture_output=True, text=True, timeout=120)
        else:
            result = run_cli(argv)
        assert result.returncode == 0 and "Traceback" not in result.stderr, (state, result.stderr[-2000:])
        assert server.node(NODE) == labelled, f"{state} changed the Node"
        assert [e for e in server.events() if e["reason"] == "DiscoveryReadFailed" and e["type"] == "Warning"]


class _SilentRegistry:
    """A registry host that accepts every connection and never answers; counts connections
    (the resolver opens one per request: a timed-out connection is not reused)."""

    def __init__(self) -> None:
        import socket
        import threading

        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(0.2)
        self.host = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self.accepted: list[object] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            self.accepted.append(conn)

    def __enter__(self) -> _SilentRegistry:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        for conn in self.accepted:
            conn.close()  # type: ignore[attr-defined]
        self._listener.close()


def test_placement_releases_gated_pods_whatever_their_labels_and_cuts_a_silent_registry(tmp_path):
    """The ``placement`` command against hostile states: two gated pods whose placement label
    was removed or set to ``disabled`` before the controller started (the watch never shows
    them; the Pending sweep does), and a pod whose registry accepts and never answers, with a
    1 s retry window and the default 5 s request timeout. All three released, the silent
    registry asked exactly once (uncut: three 5 s requests before the decision), exit 0 on
    SIGTERM, no traceback."""
    from kubernetes.client.api_client import ApiClient

    from agent.placement import podspec
    from agent.placement.kube import PlacementApi
    from agent.placement.policy import ON_ERROR_ANNOTATION
    from tests.placement.harness import events_for, gated_pod, start_command, ungated, wait_event

    with _SilentRegistry() as registry, FakeApiServer() as server:
        server.add_namespace("apps")
        server.add_namespace("held", annotations={ON_ERROR_ANNOTATION: "hold"})
        api = PlacementApi(ApiClient(server.client_configuration()))
        image = [f"{registry.host}/test/pair:1"]
        for name, value in (("removed", None), ("opted-out", podspec.OPTED_OUT)):
            gated_pod(server, "held", name, image)
            api.patch_pod("held", name, {"metadata": {"labels": {podspec.SELECTOR_LABEL: value}}})
        gated_pod(server, "apps", "silent", image)
        log = tmp_path / "placement.log"
        proc = start_command(server.kubeconfig(tmp_path / "kubeconfig"), registry.host, "--leader-elect", "off",
                             "--retry-window", "1", "--watchdog-interval", "1", log=log)
        try:
            released = {name: ungated(server, "held", name) for name in ("removed", "opted-out")}
            silent = ungated(server, "apps", "silent")
            skipped = {name: wait_event(server, name, "ArchPlacementSkipped")[1] for name in released}
            failed = wait_event(server, "silent", "ArchInspectionFailed")
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert code == 0 and "Traceback" not in log.read_text()
    assert skipped == {"removed": "Warning", "opted-out": "Normal"}
    assert [released[n]["metadata"].get("labels", {}).get(podspec.SELECTOR_LABEL) for n in ("removed", "opted-out")] \
        == [None, podspec.OPTED_OUT]
    assert not (silent["spec"].get("affinity") or {}).get("nodeAffinity")
    assert failed[1] == "Warning" and [e[0] for e in events_for(server, "silent")] == ["ArchInspectionFailed"]
    assert len(registry.accepted) == 1

def _log_records(log_path) -> list[dict]:
    import json

    records = []
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


def _signal_records(log_path) -> list[str]:
    return [str(r.get("msg") or r.get("message") or "") for r in _log_records(log_path) if r.get("event") == "signal"]


def _wait(predicate, proc, log_path, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert proc.poll() is None, f"{what}: the process ended ({proc.returncode}): {log_path.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"{what}: {log_path.read_text()[-3000:]}"
        time.sleep(0.05)


def test_run_ignores_sigusr_and_resyncs_on_sighup(tmp_path):
    """SIGUSR1/SIGUSR2 ended the agent (their default action) with no word in the docs. Now a
    real ``run``: both are logged and ignored, SIGHUP re-reads rules and --config and runs a
    resync at once (the periodic one is an hour away here), and SIGTERM still exits 0."""
    log_path = tmp_path / "agent.log"
    with FakeApiServer() as server:
        server.add_node(NODE)
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        env = {k: v for k, v in os.environ.items() if k != "NODE_FEATURE_AGENT_RULES"}
        env["PYTHONPATH"] = str(REPO)
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agent", "--log-format", "json", "run", "--host-root", CORAL,
                 "--rules", str(LABELS_DIR), "--kubeconfig", str(kubeconfig), "--node-name", NODE,
                 "--metrics-port", "off", "--udev-mode", "off", "--startup-jitter", "0", "--resync-interval", "3600"],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait(lambda: (server.node(NODE)["metadata"].get("labels") or {}).get("accelerators/edgetpu"), proc,
                  log_path, "labelled")
            assert _resync_passes(log_path) == 0
            proc.send_signal(signal.SIGUSR1)
            _wait(lambda: len(_signal_records(log_path)) == 1, proc, log_path, "SIGUSR1 logged")
            proc.send_signal(signal.SIGUSR2)
            _wait(lambda: len(_signal_records(log_path)) == 2, proc, log_path, "SIGUSR2 logged")
            assert all("ignored" in text for text in _signal_records(log_path))
            proc.send_signal(signal.SIGHUP)
            _wait(lambda: _resync_passes(log_path) == 1, proc, log_path, "a resync after SIGHUP")
            assert "re-reading rules and configuration" in _signal_records(log_path)[2]
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in log_path.read_text()


def test_placement_ignores_sighup_and_sigusr(tmp_path):
    """The placement controller as a process: SIGHUP, SIGUSR1 and SIGUSR2 are logged and
    ignored (it has nothing to re-read), SIGTERM still stops it with exit 0."""
    log_path = tmp_path / "placement.log"
    with FakeApiServer() as server:
        kubeconfig = server.kubeconfig(tmp_path / "kubeconfig")
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with open(log_path, "w") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agent", "--log-format", "json", "placement", "--kubeconfig", str(kubeconfig),
                 "--metrics-port", "off", "--leader-elect", "off"],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)
        try:
            _wait(lambda: any(r.get("event") == "started" for r in _log_records(log_path)), proc, log_path, "started")
            for count, sig in enumerate((signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2), start=1):
                proc.send_signal(sig)
                _wait(lambda count=count: len(_signal_records(log_path)) == count, proc, log_path, f"{sig.name} logged")
            assert all("ignored" in text for text in _signal_records(log_path))
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert "Traceback" not in log_path.read_text()
