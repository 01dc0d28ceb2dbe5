"""The resolver: image reference + credentials -> the platforms the image runs on.

Flow for a tag: ``HEAD`` the manifest for its digest (cheap; Docker Hub does not count it as a
pull), then ``GET`` by that digest and check the body's sha256 against it; an index gives its
entries' platforms, a single manifest its config blob's (fetched by digest, checked the same
way). A reference with a digest skips the ``HEAD``.

Caches, all keyed by the identity of the credentials used (``anonymous`` for none), so what one
namespace's secret fetched is never answered to a caller without it:

- digest -> platforms: kept until evicted (LRU by count, no TTL): a digest names immutable
  content;
- tag -> digest: kept ``tag_ttl`` seconds (a tag can move); bypassed for
  ``imagePullPolicy: Always`` (``pull_always=True``), as the kubelet would ask the registry;
- one resolution in flight per (credentials, reference): concurrent callers wait for it and
  share its answer or its error (each waits no longer than its own ``deadline``).

Time: one resolution ends by ``total_timeout`` after it starts, or by the caller's
``deadline`` when that is earlier; every request's connect and read timeout, every backoff
and every wait is cut to what is left of it (``transport.py``).

Thread-safe: one resolver serves every worker thread of a controller.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from agent.images.auth import Authenticator
from agent.images.counters import Counters, CounterSnapshot
from agent.images.credentials import Credential, Keyring
from agent.images.errors import InvalidManifestError, NotFoundError, RegistryUnavailableError, UnauthorizedError
from agent.images.manifests import (
    check_digest,
    config_descriptor,
    config_platform,
    index_platforms,
    load_json,
    media_type_of,
    verify,
)
from agent.images.platforms import INDEX_TYPES, ImagePlatforms
from agent.images.reference import ImageReference, parse_reference
from agent.images.registry import RegistryClient
from agent.images.transport import Call, Limits, Transport

MiB = 1024 * 1024
K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class ResolverConfig:
    """Every knob, with the default an operator gets.

    ``insecure_registries``: hosts (``host:port`` as in the reference) reached over plain
    HTTP; ``ca_file``: PEM bundle trusted for HTTPS instead of the system's; ``tag_ttl``:
    seconds a tag's digest is trusted; ``cache_entries``: digest -> platforms entries kept;
    ``request_timeout``: connect and read timeout of one request; ``total_timeout``: bound on
    one resolution, retries and waits included; caps on manifest and config size and index
    entries; ``requests_per_second``/``burst``: per-registry request rate; ``max_retry_after``:
    the longest ``Retry-After`` waited for (a longer one fails at once).
    """

    insecure_registries: frozenset[str] = field(default_factory=frozenset)
    ca_file: str | None = None
    tag_ttl: float = 60.0
    cache_entries: int = 4096
    request_timeout: float = 5.0
    total_timeout: float = 20.0
    max_manifest_bytes: int = 4 * MiB
    max_config_bytes: int = 4 * MiB
    max_index_entries: int = 1000
    requests_per_second: float = 10.0
    burst: int = 20
    max_retry_after: float = 30.0


class _Lru(Generic[K, V]):
    """A bounded map, least recently used out first; entries may carry an expiry time."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._items: OrderedDict[K, tuple[V, float]] = OrderedDict()

    def get(self, key: K, now: float) -> V | None:
        item = self._items.get(key)
        if item is None or item[1] <= now:
            self._items.pop(key, None)
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: K, value: V, expires: float = float("inf")) -> None:
        self._items[key] = (value, expires)
        self._items.move_to_end(key)
        while len(self._items) > self._size:
            self._items.popitem(last=False)


class Resolver:
    """Answers :meth:`resolve`; see the module docstring for caching and thread-safety."""

    def __init__(self, config: ResolverConfig | None = None, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.config = config or ResolverConfig()
        self._clock = clock
        self._counters = Counters()
        limits = Limits(self.config.request_timeout, self.config.requests_per_second, self.config.burst,
                        self.config.max_retry_after)
        self._transport = Transport(limits, self._counters, self.config.ca_file, clock, sleep)
        auth = Authenticator(self._transport, clock)
        self._registry = RegistryClient(self._transport, auth, frozenset(self.config.insecure_registries))
        self._lock = threading.Lock()
        self._tags: _Lru[tuple[str, str, str, str], str] = _Lru(self.config.cache_entries)
        self._platforms: _Lru[tuple[str, str, str, str], ImagePlatforms] = _Lru(self.config.cache_entries)
        self._in_flight: dict[tuple[str, str, bool], Future[ImagePlatforms]] = {}

    def close(self) -> None:
        """Close pooled connections; the resolver must not be used afterwards."""
        self._transport.close()

    def counters(self) -> CounterSnapshot:
        """Registry requests by host and status, cache hits and misses, since creation."""
        return self._counters.snapshot()

    def resolve(self, reference: str, credentials: Keyring | None = None, *,
                pull_always: bool = False, deadline: float | None = None) -> ImagePlatforms:
        """The platforms ``reference`` runs on, asking the registry only what the caches cannot
        answer.

        ``credentials``: the keyring made from the pod's pull secrets (``None`` or an empty
        keyring: anonymous). As kubelet does, every credential the keyring matches is tried
        in order until one is let in; ``pull_always``: the container's ``imagePullPolicy`` is
        ``Always`` (the tag is looked up again; a known digest's platforms are still reused);
        ``deadline``: the time (on the resolver's clock, ``time.monotonic`` by default) by which
        the caller needs the answer; past it the resolution fails with a transient
        :class:`~agent.images.errors.RegistryUnavailableError`.
        Raises an :class:`~agent.images.errors.ImageError` subclass.
        """
        image = parse_reference(reference)
        creds = (credentials or Keyring()).lookup(image.name)
        identity = "+".join(c.identity for c in creds) or "anonymous"
        key = (identity, str(image), pull_always)
        with self._lock:
            future = self._in_flight.get(key)
            leader = future is None
            if future is None:
                future = self._in_flight[key] = Future()
        if not leader:
            wait = None if deadline is None else max(0.0, deadline - self._clock())
            try:
                return replace(future.result(timeout=wait), reference=reference)
            except FutureTimeout:
                raise RegistryUnavailableError(reference, "time bound reached waiting for the same image's "
                                                          "lookup in flight") from None
        try:
            answer = self._resolve(reference, image, creds, identity, pull_always, deadline)
            future.set_result(answer)
            return answer
        except BaseException as exc:
            future.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._in_flight[key]

    def _resolve(self, reference: str, image: ImageReference, creds: tuple[Credential, ...], identity: str,
                 pull_always: bool, deadline: float | None) -> ImagePlatforms:
        bound = self._clock() + self.config.total_timeout
        call = Call(reference, bound if deadline is None else min(bound, deadline))
        first_refusal: UnauthorizedError | NotFoundError | None = None
        for credential in creds or (None,):
            try:
                return self._resolve_with(call, image, credential, identity, pull_always)
            except (UnauthorizedError, NotFoundError) as exc:
                first_refusal = first_refusal or exc
        assert first_refusal is not None
        raise first_refusal

    def _resolve_with(self, call: Call, image: ImageReference, credential: Credential | None, identity: str,
                      pull_always: bool) -> ImagePlatforms:
        digest, fetched = image.digest, False
        if not digest:
            digest, fetched = self._tag_digest(call, image, credential, identity, pull_always)
        key = (identity, image.api_host, image.repository, digest)
        with self._lock:
            known = self._platforms.get(key, self._clock())
        self._counters.cache("platforms", known is not None)
        if known is not None:
            return replace(known, reference=call.reference, canonical=str(image), cached=not fetched)
        answer = self._fetch_platforms(call, image, credential, digest)
        with self._lock:
            self._platforms.put(key, answer)
        return answer

    def _tag_digest(self, call: Call, image: ImageReference, credential: Credential | None, identity: str,
                    pull_always: bool) -> tuple[str, bool]:
        key = (identity, image.api_host, image.repository, image.tag)
        if not pull_always:
            with self._lock:
                digest = self._tags.get(key, self._clock())
            self._counters.cache("tag", digest is not None)
            if digest is not None:
                return digest, False
        try:
            head = self._registry.head_manifest(call, image, credential, image.tag, self.config.max_manifest_bytes)
        except (UnauthorizedError, NotFoundError) as exc:
            if exc.registry_message:
                raise
            # a HEAD answer has no body: ask once more with GET for the registry's own words
            self._registry.get_manifest(call, image, credential, image.tag, self.config.max_manifest_bytes,
                                        authenticate=False)
            raise
        digest = head.headers.get("Docker-Content-Digest", "")
        if not digest:
            body = self._registry.get_manifest(call, image, credential, image.tag, self.config.max_manifest_bytes).body
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
        check_digest(call.reference, digest)
        if self.config.tag_ttl > 0:
            with self._lock:
                self._tags.put(key, digest, self._clock() + self.config.tag_ttl)
        return digest, True

    def _fetch_platforms(self, call: Call, image: ImageReference, credential: Credential | None,
                         digest: str) -> ImagePlatforms:
        reference, host = call.reference, image.api_host
        answer = self._registry.get_manifest(call, image, credential, digest, self.config.max_manifest_bytes)
        verify(reference, f"manifest from {host}", answer.body, digest)
        document = load_json(reference, "manifest", answer.body)
        media_type = media_type_of(reference, document, answer.headers.get("Content-Type", ""))
        if media_type in INDEX_TYPES:
            platforms, skipped = index_platforms(reference, document, self.config.max_index_entries)
            source = f"registry {host}: {_kind(media_type)} {digest}"
        else:
            config_digest = config_descriptor(reference, document, self.config.max_config_bytes)
            blob = self._registry.get_blob(call, image, credential, config_digest, self.config.max_config_bytes)
            verify(reference, f"config blob from {host}", blob.body, config_digest)
            platforms = (config_platform(reference, config_digest, load_json(reference, "config blob", blob.body)),)
            skipped = ()
            source = f"registry {host}: {_kind(media_type)} {digest}, config blob {config_digest}"
        if not platforms:
            raise InvalidManifestError(reference, "no platform")
        return ImagePlatforms(reference, str(image), digest, media_type, platforms, skipped, source, cached=False)


def _kind(media_type: str) -> str:
    return {
        "application/vnd.oci.image.index.v1+json": "OCI image index",
        "application/vnd.docker.distribution.manifest.list.v2+json": "Docker manifest list",
        "application/vnd.oci.image.manifest.v1+json": "OCI image manifest",
        "application/vnd.docker.distribution.manifest.v2+json": "Docker v2 schema 2 manifest",
    }[media_type]
