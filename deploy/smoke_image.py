#!/usr/bin/env python3
"""Build the shipped Dockerfile and prove the image in a real container (run by
deploy/smoke-image.sh, in CI for the CI machine's platform; it needs a Docker engine and root;
deploy/install.md "The image").

For each ``--platform`` (default: this machine's):

1. base and image: deploy/smoke_build.py makes ``debian:bookworm-slim`` by its recipe with
   ``mmdebstrap`` and builds the repository's Dockerfile on it (a foreign platform under
   qemu-user-static); the build time and the image's size (unpacked, and ``docker save | gzip``)
   are printed; amd64 must stay within 80 MB compressed;
2. this machine's platform, run exactly as daemonset.yaml says (deploy/smoke_flags.py reads
   UID, read-only root, dropped capabilities, no-new-privileges, mounts, env, args from it):
   the restrictions hold inside (uid, CapEff, NoNewPrivs, writes refused); ``discover`` in the
   container matches ``discover`` on the host; ``run`` against the in-repo API server labels a
   Node named after this host (container start -> Node labelled is printed), ``/healthz`` and
   ``/readyz`` answer, SIGTERM ends it with exit 0; ``apply``, ``clean``, ``plan``,
   ``explain``, ``validate`` and ``snapshot`` run in the image too;
3. a foreign platform: ``discover`` and ``plan`` on the recorded boards of its architecture,
   inside the image under qemu, give exactly the host's answers.

Prints one PASS/FAIL line per check and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from deploy.smoke_build import (  # noqa: E402
    DOCKER,
    PLATFORMS,
    BuildFailed,
    Platform,
    build_base,
    build_image,
    host_platform,
    image_size,
    image_tag,
)
from deploy.smoke_commands import apply_and_clean, explain_image, offline_commands  # noqa: E402
from deploy.smoke_docker import (  # noqa: E402
    KUBECONFIG_IN_POD,
    RESULTS,
    check,
    container_cmd,
    cpu_seconds,
    sh,
    started_at,
)
from deploy.smoke_flags import DockerRun, ManifestError, docker_run  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402

#: amd64, docker save | gzip (issue 28's target; the figure of record is in deploy/install.md)
COMPRESSED_LIMIT = 80_000_000
#: recorded boards (fixtures/sysfs/*/README.md) per Debian architecture, replayed in the foreign image
BOARDS = {"arm64": ("raspberry-pi-4-recorded", "jetson-nano-l4t-recorded", "coral-devboard-vendor-recorded",
                    "lscpu-arm-A510-A710-A715-X3"),
          "armhf": ("lscpu-armv7", "raspberry-pi-4-recorded")}
def build(platform: Platform, tmp: Path, rebuild_base: bool) -> bool:
    try:
        base = build_base(platform, tmp, rebuild_base)
        took = build_image(platform, base, tmp)
    except BuildFailed as err:
        check(False, str(err))
        return False
    check(True, f"{platform.oci}: image built from the repository's Dockerfile on {base} ({took:.0f} s)")
    size = image_size(platform)
    line = (f"{platform.oci}: image {size.unpacked / 1e6:.1f} MB unpacked, {size.compressed / 1e6:.1f} MB "
            "compressed (docker save | gzip)")
    if platform.oci == "linux/amd64":
        check(size.compressed <= COMPRESSED_LIMIT, f"{line}; limit {COMPRESSED_LIMIT / 1e6:.0f} MB")
    else:
        print(f"      {line}")
    return True


def hardening_inside(run: DockerRun, image: str) -> None:
    """The restrictions really hold in the running container, seen from inside it."""
    probe = ("import os; s=open('/proc/self/status').read(); "
             "f=lambda k: [l.split()[1] for l in s.splitlines() if l.startswith(k)][0]; "
             "w=[]\nfor p in ('/etc/x','/host/sys/x','/usr/x','/opt/node-feature-agent/x'):\n"
             "    try: open(p,'w'); w.append(p)\n    except OSError: pass\n"
             "print(os.getuid(), os.getgid(), f('CapEff:'), f('NoNewPrivs:'), ','.join(w) or '-')")
    done = sh(*container_cmd(run, image, extra=["--entrypoint", "python3"]), "-c", probe)
    if not check(done.returncode == 0, "probe ran inside the container"):
        print(done.stderr[-1500:])
        return
    uid, gid, capeff, nnp, writable = done.stdout.split()
    want_uid, want_gid = run.user.split(":")
    check((uid, gid) == (want_uid, want_gid), f"runs as the manifest's UID/GID {run.user} (saw {uid}:{gid})")
    check(int(capeff, 16) == 0, f"no effective capabilities (CapEff {capeff})")
    check(nnp == "1", f"no-new-privileges set (NoNewPrivs {nnp})")
    check(writable == "-", f"root filesystem and host mounts refuse writes (writable: {writable})")
    tools = sh(*container_cmd(run, image, extra=["--entrypoint", "sh"]), "-c",
               "for t in pip pip3 gcc cc g++ apt-get; do command -v $t; done; ls /var/lib/apt/lists | grep -v lock")
    check(tools.stdout.split() == ["/usr/bin/apt-get"], f"no pip, no compiler, no apt lists in the image "
                                                        f"(found: {' '.join(tools.stdout.split()) or '-'})")


def compare_discover(run: DockerRun, image: str) -> None:
    host_root = next(a.split("=", 1)[1] for a in run.args if a.startswith("--host-root="))
    mine = sh(*container_cmd(run, image), "discover", f"--host-root={host_root}", "--format=json")
    if not check(mine.returncode == 0, "discover in the container exits 0"):
        print(mine.stderr[-2000:])
        return
    theirs = sh(sys.executable, "-m", "agent", "discover", "--host-root=/", "--format=json", cwd=REPO)
    if not check(theirs.returncode == 0, "discover on the host exits 0"):
        print(theirs.stderr[-2000:])
        return
    a, b = json.loads(mine.stdout)["labels"], json.loads(theirs.stdout)["labels"]
    only_host = sorted(set(b) - set(a))
    only_pod = sorted(set(a) - set(b))
    changed = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    same = len(set(a) & set(b)) - len(changed)
    print(f"      discover: {same} labels identical; only on the host: {only_host or '-'}; only in the pod: "
          f"{only_pod or '-'}; different: {[(k, b[k], a[k]) for k in changed] or '-'}")
    expected = {k for k in only_host if k.startswith("feature.node.kubernetes.io/kernel-config.")}
    if expected:
        print(f"      {len(expected)} kernel-config label(s) need /proc/config.gz, which the DaemonSet mounts only with "
              "hostProcConfigGz (this host has no /boot/config-<release>)")
    check(not changed and not only_pod and set(only_host) <= expected,
          f"the pod discovers what the host discovers ({len(a)} labels in the pod, {len(b)} on the host)")


def wait_labelled(server: FakeApiServer, node: str, limit: float = 60.0) -> float | None:
    """Seconds (wall clock, time.time()) at which the Node had feature labels and no startup
    taint, polled every 10 ms; None after ``limit``."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        found = server.node(node)
        labels = found["metadata"].get("labels") or {}
        if any(k.startswith("feature.node.kubernetes.io/") for k in labels) and not found["spec"].get("taints"):
            return time.time()
        time.sleep(0.01)
    return None


def run_against_api(run: DockerRun, image: str, tmp: Path, node: str) -> None:
    with FakeApiServer() as server:
        server.add_node(node, register_taints=[{"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}])
        kubeconfig = server.kubeconfig(tmp / "kubeconfig")
        os.chmod(kubeconfig, 0o644)
        name = f"nfa-smoke-{os.getpid()}"
        port = next(a.split("=", 1)[1] for a in run.args if a.startswith("--metrics-port="))
        # the DaemonSet's args, without the random start-up delay a rollout wants
        cmd = container_cmd(run, image, *run.args, "--startup-jitter=0", f"--kubeconfig={KUBECONFIG_IN_POD}",
                            name=name, detach=True,
                            extra=["--mount", f"type=bind,source={kubeconfig},target={KUBECONFIG_IN_POD},readonly"])
        asked = time.time()
        started = sh(*cmd)
        if not check(started.returncode == 0, "run started in the container with the DaemonSet's args"):
            print(started.stderr[-2000:])
            return
        try:
            labelled = wait_labelled(server, node)
            cpu = cpu_seconds(name)
            labels = server.node(node)["metadata"].get("labels") or {}
            check(labelled is not None, f"the Node got {sum(k.startswith('feature.node.kubernetes.io/') for k in labels)} "
                                        "feature labels and lost its startup taint")
            if labelled is not None:
                used = "unknown" if cpu is None else f"{cpu:.2f} s"
                print(f"      start-up: container started -> Node labelled {labelled - started_at(name):.2f} s, "
                      f"{used} of CPU (docker run -> Node labelled {labelled - asked:.2f} s)")
            for path in ("/healthz", "/readyz"):
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
                        check(answer.status == 200, f"{path} answers {answer.status} {answer.read().decode()[:60]!r}")
                except Exception as exc:  # noqa: BLE001 - reported as a failed check
                    check(False, f"{path}: {exc}")
            began = time.monotonic()
            sh(DOCKER, "stop", "-t", "30", name)
            took = time.monotonic() - began
            code = sh(DOCKER, "inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip()
            # docker stop sends SIGKILL after 30 s (exit 137): exit 0 is the agent ending on SIGTERM itself
            check(code == "0", f"SIGTERM (docker stop): exit {code} after {took:.2f} s")
            logs = sh(DOCKER, "logs", name)
            text = logs.stdout + logs.stderr
            check("Traceback" not in text, f"no traceback in {len(text.splitlines())} log lines")
        finally:
            sh(DOCKER, "rm", "-f", name)


def board_answers(platform: Platform) -> None:
    """discover and plan on the recorded boards of ``platform``'s architecture, in the foreign
    image under qemu, against the same commands on this host. The fixture and the catalogue
    are mounted at their host paths, so provenance paths in the output match too."""
    image = image_tag(platform)
    labels = REPO / "labels"
    for board in BOARDS.get(platform.debian, ()):
        root = REPO / "fixtures" / "sysfs" / board
        partial = [] if (root / "proc").is_dir() else ["--allow-partial-host-root"]
        mounts = ["--mount", f"type=bind,source={root},target={root},readonly",
                  "--mount", f"type=bind,source={labels},target={labels},readonly"]
        for command in ("discover", "plan"):
            args = [command, f"--host-root={root}", *partial, "--format=json", *(["--rules", str(labels)] if command == "plan" else [])]
            mine = sh(DOCKER, "run", "--rm", "--platform", platform.oci, "--network", "none", "--read-only",
                      *mounts, image, *args)
            theirs = sh(sys.executable, "-m", "agent", *args, cwd=REPO)
            same = mine.returncode == theirs.returncode == 0 and json.loads(mine.stdout) == json.loads(theirs.stdout)
            check(same, f"{platform.oci}: {command} on {board} in the image = on the host"
                        + ("" if same else f" (exit {mine.returncode}: {mine.stderr.strip()[-300:]})"))


def native_checks(platform: Platform, tmp: Path) -> None:
    image = image_tag(platform)
    node = socket.gethostname()
    manifest = (REPO / "daemonset.yaml").read_text()
    try:
        run = docker_run(manifest, node_name=node, catalogue_dir=str(REPO / "labels"), configmap_root=str(tmp / "configmaps"))
        check(True, "every typed hostPath of the manifest exists here (kubelet would start the pod)")
    except ManifestError as err:
        # not a failure of the image: the manifest needs adapting for such nodes (documented)
        print(f"WARN  the pod as shipped would not start on this host: {err}")
        run = docker_run(manifest, node_name=node, catalogue_dir=str(REPO / "labels"), drop_missing_files=True,
                         configmap_root=str(tmp / "configmaps"))
    print(f"      docker run {' '.join(run.flags)} {image} {' '.join(run.args)}")
    for note in run.notes:
        print(f"      note: {note}")
    hardening_inside(run, image)
    compare_discover(run, image)
    run_against_api(run, image, tmp, node)
    offline_commands(run, image)
    apply_and_clean(run, image, tmp)
    explain_image(run, image, tmp)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--platform", action="append", choices=sorted(PLATFORMS), metavar="PLATFORM",
                        help=f"build and check for this platform ({', '.join(sorted(PLATFORMS))}); repeatable; "
                             "default: this machine's")
    parser.add_argument("--rebuild-base", action="store_true", help="make the Debian base images again")
    args = parser.parse_args(argv)
    if sh(DOCKER, "info").returncode:
        raise SystemExit("no Docker engine: start dockerd first (deploy/smoke-image.sh does)")
    native = host_platform()
    with tempfile.TemporaryDirectory(prefix="nfa-smoke-") as name:
        tmp = Path(name)
        os.chmod(tmp, 0o755)
        for platform in [PLATFORMS[p] for p in args.platform or [native.oci]]:
            if not build(platform, tmp, args.rebuild_base):
                continue
            if platform == native:
                native_checks(platform, tmp)
            else:
                board_answers(platform)
    failed = [w for ok, w in RESULTS if not ok]
    print(f"smoke test: {len(RESULTS) - len(failed)} of {len(RESULTS)} checks passed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
