#!/usr/bin/env python3
"""Prove the hardening in a real container (run by deploy/smoke-image.sh; not in CI: it needs
a Docker engine, root and a few minutes).

1. base image: no registry is reachable here, so one is made from Debian packages
   (``mmdebstrap``, the host's suite, python3 + pip + libudev1 + the host's CA bundle for pip)
   and imported; real builds keep the Dockerfile's official base;
2. the image: the repository's own Dockerfile, ``--build-arg BASE_IMAGE=<that base>``;
3. the container runs exactly as daemonset.yaml says (deploy/smoke_flags.py reads UID,
   read-only root, dropped capabilities, no-new-privileges, mounts, env, args from it) and
   the script checks inside that it really is so (uid, CapEff, NoNewPrivs, writes refused);
4. ``discover`` in the container against the host mounts vs ``discover`` on the host itself;
5. ``run`` in the container against the in-repo API server with a Node named after this
   host: the Node gets its labels, ``/healthz`` and ``/readyz`` answer, SIGTERM (docker stop)
   ends it promptly with exit 0 and no traceback.

Prints one PASS/FAIL line per check and exits 1 if any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from deploy.smoke_flags import ManifestError, docker_run  # noqa: E402
from tests.support.apiserver import FakeApiServer  # noqa: E402

DOCKER = os.environ.get("DOCKER", "/usr/bin/docker")  # Debian's docker.io client: BuildKit without buildx
BASE = "nfa-smoke-base:{suite}"
IMAGE = "node-feature-agent:smoke"
KUBECONFIG_IN_POD = "/var/run/node-feature-agent/kubeconfig"
RESULTS: list[tuple[bool, str]] = []


def check(ok: bool, what: str) -> bool:
    RESULTS.append((ok, what))
    print(f"{'PASS' if ok else 'FAIL'}  {what}", flush=True)
    return ok


def sh(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, text=True, capture_output=True, **kw)


def host_suite() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME="):
            return line.split("=", 1)[1].strip('"')
    raise SystemExit("cannot tell the host's Debian suite from /etc/os-release")


def build_base(tmp: Path, suite: str, rebuild: bool) -> str:
    tag = BASE.format(suite=suite)
    if not rebuild and sh(DOCKER, "image", "inspect", tag).returncode == 0:
        return tag
    tar = tmp / "base.tar"
    ca = os.environ.get("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt")
    done = sh("mmdebstrap", "--variant=minbase", "--include=python3,python3-pip,ca-certificates,libudev1",
              f"--customize-hook=cp {ca} \"$1/etc/ssl/certs/ca-certificates.crt\"",
              "--customize-hook=printf '[global]\\ncert = /etc/ssl/certs/ca-certificates.crt\\n"
              "break-system-packages = true\\n' > \"$1/etc/pip.conf\"",
              suite, str(tar))
    if done.returncode:
        raise SystemExit(f"mmdebstrap failed:\n{done.stderr[-2000:]}")
    done = sh(DOCKER, "import", str(tar), tag)
    if done.returncode:
        raise SystemExit(f"docker import failed:\n{done.stderr}")
    return tag


def build_image(tmp: Path, base: str) -> None:
    context = tmp / "context"
    files = sh("git", "-C", str(REPO), "ls-files", "-z").stdout.split("\0")
    for rel in filter(None, files):
        src, dst = REPO / rel, context / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    dockerfile = context / "Dockerfile"
    # the syntax directive makes BuildKit fetch a frontend image from a registry; the built-in
    # frontend of Debian's docker.io understands this Dockerfile (RUN --mount) without it
    dockerfile.write_text("".join(line for line in dockerfile.read_text().splitlines(True)
                                  if not line.startswith("# syntax=")))
    started = time.monotonic()
    done = subprocess.run([DOCKER, "build", "--network", "host", "--build-arg", f"BASE_IMAGE={base}", "-t", IMAGE,
                           str(context)], env={**os.environ, "DOCKER_BUILDKIT": "1"}, text=True, capture_output=True)
    check(done.returncode == 0, f"image built from the repository's Dockerfile on {base} "
                                f"({time.monotonic() - started:.0f} s)")
    if done.returncode:
        print(done.stderr[-3000:])
        raise SystemExit(1)


def container_cmd(run, *args: str, name: str | None = None, detach: bool = False, extra=()) -> list[str]:
    cmd = [DOCKER, "run"] + (["-d"] if detach else ["--rm"]) + (["--name", name] if name else [])
    return cmd + list(run.flags) + list(extra) + [IMAGE, *args]


def hardening_inside(run) -> None:
    """The restrictions really hold in the running container, seen from inside it."""
    probe = ("import os; s=open('/proc/self/status').read(); "
             "f=lambda k: [l.split()[1] for l in s.splitlines() if l.startswith(k)][0]; "
             "w=[]\nfor p in ('/etc/x','/host/sys/x','/usr/x'):\n"
             "    try: open(p,'w'); w.append(p)\n    except OSError: pass\n"
             "print(os.getuid(), os.getgid(), f('CapEff:'), f('NoNewPrivs:'), ','.join(w) or '-')")
    done = sh(*container_cmd(run, extra=["--entrypoint", "python3"]), "-c", probe)
    if not check(done.returncode == 0, "probe ran inside the container"):
        print(done.stderr[-1500:])
        return
    uid, gid, capeff, nnp, writable = done.stdout.split()
    want_uid, want_gid = run.user.split(":")
    check((uid, gid) == (want_uid, want_gid), f"runs as the manifest's UID/GID {run.user} (saw {uid}:{gid})")
    check(int(capeff, 16) == 0, f"no effective capabilities (CapEff {capeff})")
    check(nnp == "1", f"no-new-privileges set (NoNewPrivs {nnp})")
    check(writable == "-", f"root filesystem and host mounts refuse writes (writable: {writable})")


def compare_discover(run, tmp: Path) -> None:
    host_root = next(a.split("=", 1)[1] for a in run.args if a.startswith("--host-root="))
    mine = sh(*container_cmd(run), "discover", f"--host-root={host_root}", "--format=json")
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


def run_against_api(run, tmp: Path, node: str) -> None:
    with FakeApiServer() as server:
        server.add_node(node, register_taints=[{"key": "node-feature-agent.io/not-ready", "effect": "NoSchedule"}])
        kubeconfig = server.kubeconfig(tmp / "kubeconfig")
        os.chmod(kubeconfig, 0o644)
        name = f"nfa-smoke-{os.getpid()}"
        port = next(a.split("=", 1)[1] for a in run.args if a.startswith("--metrics-port="))
        cmd = container_cmd(run, *run.args, f"--kubeconfig={KUBECONFIG_IN_POD}", name=name, detach=True,
                            extra=["--mount", f"type=bind,source={kubeconfig},target={KUBECONFIG_IN_POD},readonly"])
        started = sh(*cmd)
        if not check(started.returncode == 0, "run started in the container with the DaemonSet's args"):
            print(started.stderr[-2000:])
            return
        try:
            deadline, labels = time.monotonic() + 60, {}
            while time.monotonic() < deadline:
                labels = server.node(node)["metadata"].get("labels") or {}
                taints = server.node(node)["spec"].get("taints") or []
                if any(k.startswith("feature.node.kubernetes.io/") for k in labels) and not taints:
                    break
                time.sleep(0.2)
            check(any(k.startswith("feature.node.kubernetes.io/") for k in labels) and not taints,
                  f"the Node got {sum(k.startswith('feature.node.kubernetes.io/') for k in labels)} feature labels "
                  "and lost its startup taint")
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
            check(code == "0" and took < 1.5, f"SIGTERM (docker stop): exit {code} after {took:.2f} s (contract 1 s + docker's own)")
            logs = sh(DOCKER, "logs", name)
            text = logs.stdout + logs.stderr
            check("Traceback" not in text, f"no traceback in {len(text.splitlines())} log lines")
        finally:
            sh(DOCKER, "rm", "-f", name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rebuild-base", action="store_true", help="make the Debian base image again")
    args = parser.parse_args(argv)
    if sh(DOCKER, "info").returncode:
        raise SystemExit("no Docker engine: start dockerd first (deploy/smoke-image.sh does)")
    node = socket.gethostname()
    with tempfile.TemporaryDirectory(prefix="nfa-smoke-") as name:
        tmp = Path(name)
        os.chmod(tmp, 0o755)
        base = build_base(tmp, host_suite(), args.rebuild_base)
        build_image(tmp, base)
        manifest = (REPO / "daemonset.yaml").read_text()
        try:
            run = docker_run(manifest, node_name=node, catalogue_dir=str(REPO / "labels"), configmap_root=str(tmp / "configmaps"))
            check(True, "every typed hostPath of the manifest exists here (kubelet would start the pod)")
        except ManifestError as err:
            # not a failure of the image: the manifest needs adapting for such nodes (documented)
            print(f"WARN  the pod as shipped would not start on this host: {err}")
            run = docker_run(manifest, node_name=node, catalogue_dir=str(REPO / "labels"), drop_missing_files=True,
                             configmap_root=str(tmp / "configmaps"))
        print("      docker run " + " ".join(run.flags) + f" {IMAGE} " + " ".join(run.args))
        for note in run.notes:
            print(f"      note: {note}")
        hardening_inside(run)
        compare_discover(run, tmp)
        run_against_api(run, tmp, node)
    failed = [w for ok, w in RESULTS if not ok]
    print(f"{len(RESULTS) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
