"""Registry cost of image-platform resolution (agent/images), on a real registry.

Starts Debian's docker-registry on 127.0.0.1 (plain, and behind the test token server),
pushes the test fixture images with skopeo, then reports:

- requests the registry logged (its access log, our user agent) per scenario: a cold index, a
  cold single-platform image (config blob), 100 lookups of one tag, 16 concurrent callers,
  10 lookups with imagePullPolicy Always, a cold private image behind token auth;
- the time of a cold resolution (fresh resolver: HEAD, GET by digest, sha256, parse) against a
  floor measured in the same run: the same HEAD and GET with bare urllib3, no checks, no
  parsing; and the time of a cached answer.

    .venv/bin/python bench/images.py            # 200 timed runs each
    .venv/bin/python bench/images.py --runs 50
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from functools import partial
from pathlib import Path

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.images import Keyring, Resolver, ResolverConfig, parse_dockerconfigjson
from tests.images.layouts import Layout
from tests.images.registries import RegistryProcess, TokenServer, push

ACCEPT = ("application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, "
          "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")


def logged(registry: RegistryProcess, since: int) -> tuple[int, str]:
    ours = registry.ours(since)
    return len(ours), ", ".join(f"{n} {m} {s}" for (m, s), n in sorted(Counter((r.method, r.status) for r in ours).items()))


def scenario(registry: RegistryProcess, name: str, work: object) -> None:
    since = len(registry.requests())
    work()  # type: ignore[operator]
    count, detail = logged(registry, since)
    print(f"  {name:<44} {count:>3} requests ({detail})")


def floor_once(host: str, repo: str) -> None:
    pool = urllib3.PoolManager(retries=False)
    head = pool.request("HEAD", f"http://{host}/v2/{repo}/manifests/1", headers={"Accept": ACCEPT})
    digest = head.headers["Docker-Content-Digest"]
    body = pool.request("GET", f"http://{host}/v2/{repo}/manifests/{digest}", headers={"Accept": ACCEPT}).data
    assert body
    pool.clear()


def timed(fn: object, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        Layout(root / "oci").write()
        tokens = TokenServer(root)
        plain = RegistryProcess(root, "plain").start()
        token = RegistryProcess(root, "token", {"auth": tokens.registry_auth()}).start()
        try:
            for ref in ("multi", "single", "pair", "levels"):
                push(root / "oci", ref, f"{plain.host}/test/{ref}:1")
            push(root / "oci", "multi", f"{token.host}/private/multi:1", creds="alice:secret")
            report(plain, token, tokens, args.runs)
        finally:
            plain.stop()
            token.stop()
            tokens.stop()


def report(plain: RegistryProcess, token: RegistryProcess, tokens: TokenServer, runs: int) -> None:
    def fresh() -> Resolver:
        return Resolver(ResolverConfig(insecure_registries=frozenset({plain.host, token.host})))

    print("registry requests (access log):")
    scenario(plain, "cold index (5 entries)", lambda: fresh().resolve(f"{plain.host}/test/multi:1"))
    scenario(plain, "cold single-platform image (config blob)", lambda: fresh().resolve(f"{plain.host}/test/single:1"))
    shared = fresh()
    scenario(plain, "100 lookups of one tag, one resolver",
             lambda: [shared.resolve(f"{plain.host}/test/pair:1") for _ in range(100)])
    concurrent = fresh()
    threads = [threading.Thread(target=concurrent.resolve, args=(f"{plain.host}/test/levels:1",)) for _ in range(16)]
    scenario(plain, "16 concurrent callers, one resolver",
             lambda: ([t.start() for t in threads], [t.join() for t in threads]))
    scenario(plain, "10 lookups, imagePullPolicy Always",
             lambda: [shared.resolve(f"{plain.host}/test/pair:1", pull_always=True) for _ in range(10)])
    secret = json.dumps({"auths": {token.host: {"username": "alice", "password": "secret"}}})
    alice = Keyring([parse_dockerconfigjson(secret)])
    before = len(tokens.seen)
    scenario(token, "cold private index behind token auth", lambda: fresh().resolve(f"{token.host}/private/multi:1", alice))
    print(f"  {'  plus token server requests':<44} {len(tokens.seen) - before:>3}")

    cold, floor = [], []
    for i in range(runs):  # alternated, so neither side always runs second
        resolver = fresh()  # made untimed: a process makes one (its TLS context loads the CA store)
        pair = [partial(resolver.resolve, f"{plain.host}/test/multi:1"), partial(floor_once, plain.host, "test/multi")]
        first, second = (cold, floor) if i % 2 == 0 else (floor, cold)
        first.extend(timed(pair[i % 2], 1))
        second.extend(timed(pair[1 - i % 2], 1))
    warm = timed(lambda: shared.resolve(f"{plain.host}/test/pair:1"), runs)
    median = statistics.median
    print(f"cold resolution {median(cold) * 1e3:.2f} ms, floor {median(floor) * 1e3:.2f} ms, "
          f"{median(cold) / median(floor):.2f}x (medians of {runs})")
    print(f"cached answer {median(warm) * 1e6:.1f} us")


if __name__ == "__main__":
    main()
