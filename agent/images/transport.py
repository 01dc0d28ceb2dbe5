"""HTTP to registries: one exchange at a time, inside the caller's time bound.

What every request gets here, whoever makes it: a per-host token bucket (so one busy image
cannot flood a registry), a connect and read timeout no longer than what is left of the
caller's bound, a size cap read incrementally (a hostile ``Content-Length`` or an endless body
costs at most the cap), bounded retries of refused connections, timeouts and 5xx with backoff,
``429`` honoured once by waiting ``Retry-After`` (and holding back every other request to that
host meanwhile), redirects followed for blobs (``Authorization`` dropped when the host
changes), and every exchange counted by host and status.

The HTTP library is urllib3 (already installed as the Kubernetes client's transport): a
thread-safe connection pool per host and explicit control of redirects, retries and reads.
"""

from __future__ import annotations

import email.utils
import json
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import urllib3

from agent.images.counters import Counters
from agent.images.errors import (
    InvalidManifestError,
    RateLimitedError,
    RegistryUnavailableError,
)

RETRIED_STATUSES = frozenset({500, 502, 503, 504})
REDIRECTS = frozenset({301, 302, 303, 307, 308})
MAX_REDIRECTS = 5
ATTEMPTS = 3
CHUNK = 64 * 1024


@dataclass(frozen=True)
class Call:
    """The question being answered: the reference (named in errors) and the monotonic time
    by which the whole resolution must be done."""

    reference: str
    deadline: float


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes
    url: str


@dataclass(frozen=True)
class Limits:
    request_timeout: float
    requests_per_second: float
    burst: int
    max_retry_after: float


class _Bucket:
    """A token bucket; :meth:`reserve` returns how long the caller must wait for its token."""

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self._rate, self._burst = rate, float(burst)
        self._tokens, self._at = float(burst), now
        self._paused_until = now

    def reserve(self, now: float) -> float:
        start = max(now, self._paused_until)
        self._tokens = min(self._burst, self._tokens + (start - self._at) * self._rate)
        self._at = start
        self._tokens -= 1.0
        wait_for_token = 0.0 if self._tokens >= 0 else -self._tokens / self._rate
        return (start - now) + wait_for_token

    def pause_until(self, when: float) -> None:
        self._paused_until = max(self._paused_until, when)


class Transport:
    """Thread-safe; one per resolver."""

    def __init__(self, limits: Limits, counters: Counters, ca_file: str | None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        self._limits, self._counters = limits, counters
        self._clock, self._sleep = clock, sleep
        context = ssl.create_default_context(cafile=ca_file)
        self._pool = urllib3.PoolManager(num_pools=64, maxsize=8, ssl_context=context, retries=False)
        self._lock = threading.Lock()
        self._buckets: dict[str, _Bucket] = {}

    def close(self) -> None:
        self._pool.clear()

    def remaining(self, call: Call) -> float:
        return call.deadline - self._clock()

    def send(self, call: Call, method: str, url: str, headers: Mapping[str, str], max_bytes: int,
             body: bytes | None = None) -> Answer:
        """One logical request: redirects followed, retries and ``429`` handled; any HTTP status
        is returned (the caller decides what 4xx means)."""
        for _ in range(MAX_REDIRECTS + 1):
            answer = self._with_retries(call, method, url, headers, max_bytes, body)
            location = answer.headers.get("Location")
            if answer.status not in REDIRECTS or not location:
                return answer
            target = urljoin(url, location)
            if urlsplit(target).netloc != urlsplit(url).netloc:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            url = target
        raise RegistryUnavailableError(call.reference, f"more than {MAX_REDIRECTS} redirects from {url}")

    def _with_retries(self, call: Call, method: str, url: str, headers: Mapping[str, str], max_bytes: int,
                      body: bytes | None) -> Answer:
        host = urlsplit(url).netloc
        waited_429 = False
        attempt = 0
        while True:
            attempt += 1
            try:
                answer = self._exchange(call, host, method, url, headers, max_bytes, body)
            except RegistryUnavailableError:
                if attempt >= ATTEMPTS or not self._backoff(call, attempt):
                    raise
                continue
            if answer.status == 429:
                if waited_429:
                    raise RateLimitedError(call.reference, host, 429, registry_message(answer.body))
                waited_429 = True
                self._honour_retry_after(call, host, answer)
                continue
            if answer.status in RETRIED_STATUSES and attempt < ATTEMPTS and self._backoff(call, attempt):
                continue
            return answer

    def _backoff(self, call: Call, attempt: int) -> bool:
        delay = 0.25 * 2 ** (attempt - 1)
        if self.remaining(call) <= delay:
            return False
        self._sleep(delay)
        return True

    def _honour_retry_after(self, call: Call, host: str, answer: Answer) -> None:
        wait = retry_after_seconds(answer.headers.get("Retry-After", ""), time.time())
        if wait > self._limits.max_retry_after or wait >= self.remaining(call):
            raise RateLimitedError(call.reference, host, 429,
                                   f"Retry-After {wait:g}s is beyond the time bound; {registry_message(answer.body)}".rstrip("; "))
        with self._lock:  # every request to this host, this one's retry included, waits
            self._bucket(host).pause_until(self._clock() + wait)

    def _bucket(self, host: str) -> _Bucket:
        bucket = self._buckets.get(host)
        if bucket is None:
            bucket = self._buckets[host] = _Bucket(self._limits.requests_per_second, self._limits.burst, self._clock())
        return bucket

    def _exchange(self, call: Call, host: str, method: str, url: str, headers: Mapping[str, str], max_bytes: int,
                  body: bytes | None) -> Answer:
        with self._lock:
            wait = self._bucket(host).reserve(self._clock())
        if wait > 0:
            if wait >= self.remaining(call):
                raise RegistryUnavailableError(call.reference, f"rate limit for {host} would exceed the time bound")
            self._sleep(wait)
        timeout = min(self._limits.request_timeout, self.remaining(call))
        if timeout <= 0:
            raise RegistryUnavailableError(call.reference, f"time bound reached before asking {host}")
        try:
            response = self._pool.request(method, url, headers=dict(headers), body=body,
                                          timeout=urllib3.Timeout(connect=timeout, read=timeout),
                                          redirect=False, preload_content=False)
        except urllib3.exceptions.HTTPError as exc:
            self._counters.request(host, "error")
            raise RegistryUnavailableError(call.reference, f"{method} {url}: {_reason(exc)}") from None
        self._counters.request(host, str(response.status))
        try:
            content = self._read(call, response, url, max_bytes)
        finally:
            response.release_conn()
        return Answer(response.status, response.headers, content, url)

    def _read(self, call: Call, response: urllib3.BaseHTTPResponse, url: str, max_bytes: int) -> bytes:
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > max_bytes and response.status < 300:
            response.drain_conn()
            raise InvalidManifestError(call.reference, f"{url}: Content-Length {declared} is over the {max_bytes}-byte cap")
        chunks, size = [], 0
        try:
            while chunk := response.read(CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise InvalidManifestError(call.reference, f"{url}: body is over the {max_bytes}-byte cap")
                if self.remaining(call) <= 0:
                    raise RegistryUnavailableError(call.reference, f"{url}: time bound reached while reading")
                chunks.append(chunk)
        except urllib3.exceptions.HTTPError as exc:
            raise RegistryUnavailableError(call.reference, f"{url}: {_reason(exc)}") from None
        return b"".join(chunks)


def retry_after_seconds(value: str, now: float) -> float:
    """``Retry-After`` as seconds: delta-seconds or an HTTP date (RFC 9110 10.2.3); 1 s when
    absent or unreadable."""
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return 1.0
    return max(0.0, when.timestamp() - now)


def _first_line(body: bytes) -> str:
    return body.decode("utf-8", "replace").strip().splitlines()[0][:300] if body.strip() else ""


def _reason(exc: BaseException) -> str:
    """urllib3's words without its connection-object prefix: "[Errno 111] Connection refused"."""
    text = str(getattr(exc, "reason", None) or exc).splitlines()[0]
    if isinstance(exc, urllib3.exceptions.NewConnectionError):
        text = text.rpartition("Failed to establish a new connection: ")[2] or text
    return text[:300]


def registry_message(body: bytes) -> str:
    """A registry's own error words: distribution's ``{"errors": [{"code", "message"}]}``
    as ``CODE: message`` (joined by ``; ``), else the body's first line."""
    try:
        errors = json.loads(body).get("errors")
        parts = [f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors if isinstance(e, dict)]
        if parts:
            return "; ".join(parts)[:300]
    except (ValueError, AttributeError, TypeError):
        pass
    return _first_line(body)
