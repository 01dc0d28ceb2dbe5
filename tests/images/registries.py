"""Real registries for the tests: Debian's ``docker-registry`` (CNCF distribution 2.8) on
127.0.0.1, started and stopped by PID, plus what the tests put in front of it.

- :class:`RegistryProcess`: one registry (plain HTTP, Bearer token auth, or TLS) with its
  access log (the combined log format distribution writes on stdout), read by the tests to
  count the requests our resolver made (user agent ``node-feature-agent``).
- :class:`TokenServer`: the token service of distribution's ``docs/spec/auth/token.md``:
  RS256 JWT with the signing certificate in ``x5c`` (distribution's ``registry/auth/token``
  verifies the chain against ``rootcertbundle``); anonymous tokens grant pull on ``public/*``
  only; ``alice:secret`` (Basic) or the refresh token ``alice-refresh`` (POST, oauth.md)
  get what they ask; a wrong password gets a 401 with a JSON error body.
- :class:`Throttle`: a forwarding proxy that answers ``429 Retry-After: N`` to chosen paths
  a set number of times, since distribution itself never rate-limits.
- :func:`make_ca`: a throwaway CA and a server certificate for 127.0.0.1.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import http.server
import json
import re
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import jwt
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

USER_AGENT = "node-feature-agent"
_LOG_LINE = re.compile(r'^\S+ - \S+ \[[^\]]+\] "(\S+) (\S+) HTTP/[\d.]+" (\d+) \S+ "[^"]*" "([^"]*)"$')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(predicate: Any, what: str, timeout: float = 60.0) -> None:
    """Poll ``predicate`` until true: tests wait for state, and fail after a generous bound."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    status: int
    agent: str


class RegistryProcess:
    """``docker-registry serve`` on a free loopback port; ``extra`` is merged into its config."""

    def __init__(self, root: Path, name: str, extra: dict[str, Any] | None = None, scheme: str = "http") -> None:
        self.root = root / name
        (self.root / "data").mkdir(parents=True)
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.scheme = scheme
        self.log = self.root / "access.log"
        http_section: dict[str, Any] = {"addr": self.host, **(extra or {}).pop("http", {})}
        config = {"version": 0.1, "log": {"level": "warn"},
                  "storage": {"filesystem": {"rootdirectory": str(self.root / "data")}, "delete": {"enabled": True}},
                  "http": http_section, **(extra or {})}
        (self.root / "config.yml").write_text(json.dumps(config))  # YAML is a superset of JSON
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, ca_file: str | None = None) -> RegistryProcess:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(["docker-registry", "serve", str(self.root / "config.yml")],
                                            stdout=out, stderr=subprocess.STDOUT)
        context = None
        if self.scheme == "https":
            import ssl
            context = ssl.create_default_context(cafile=ca_file)
        wait_for(lambda: self._answers(context), f"registry {self.host}")
        return self

    @contextlib.contextmanager
    def running(self, ca_file: str | None = None) -> Iterator[RegistryProcess]:
        """Started, and stopped by PID however the block ends (a failed start included)."""
        try:
            yield self.start(ca_file)
        finally:
            self.stop()

    def _answers(self, context: Any) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"registry exited: {self.log.read_text()[-2000:]}")
        try:
            urllib.request.urlopen(f"{self.scheme}://{self.host}/v2/", timeout=2, context=context)
        except urllib.error.HTTPError:
            return True  # 401 from an auth registry: it is serving
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)

    def blob_file(self, digest: str) -> Path:
        algorithm, hexa = digest.split(":")
        return self.root / "data" / "docker" / "registry" / "v2" / "blobs" / algorithm / hexa[:2] / hexa / "data"

    def requests(self, context: Any = None) -> list[Request]:
        """Every request in the access log so far, after making sure the log has caught up: a
        sentinel request is sent and waited for, so lines of earlier requests are in."""
        sentinel = f"/v2/?sentinel={uuid.uuid4().hex}"
        try:
            urllib.request.urlopen(f"{self.scheme}://{self.host}{sentinel}", timeout=10, context=context)
        except urllib.error.HTTPError:
            pass
        wait_for(lambda: sentinel in self.log.read_text(errors="replace"), "the access log to catch up")
        found = []
        for line in self.log.read_text(errors="replace").splitlines():
            match = _LOG_LINE.match(line)
            if match:
                found.append(Request(match[1], match[2], int(match[3]), match[4]))
        return found

    def ours(self, since: int = 0, context: Any = None) -> list[Request]:
        """Our resolver's requests, from the ``since``-th logged request on."""
        return [r for r in self.requests(context)[since:] if r.agent == USER_AGENT]


def push(layout: Path, ref: str, target: str, *, docker_format: bool = False, creds: str | None = None) -> None:
    """``skopeo copy --all --preserve-digests`` (``--format v2s2`` converts to Docker types,
    which changes digests, so it goes without ``--preserve-digests``)."""
    cmd = ["skopeo", "copy", "-q", "--all", "--dest-tls-verify=false"]
    cmd += ["--format", "v2s2"] if docker_format else ["--preserve-digests"]
    if creds:
        cmd += ["--dest-creds", creds]
    subprocess.run([*cmd, f"oci:{layout}:{ref}", f"docker://{target}"], check=True, capture_output=True, timeout=120)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.server.owner.handle(self, "GET")

    def do_POST(self) -> None:
        self.server.owner.handle(self, "POST")

    def do_HEAD(self) -> None:
        self.server.owner.handle(self, "HEAD")


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: Any


class _Service:
    """An in-process HTTP service on a free loopback port, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        self.port = free_port()
        self.host = f"127.0.0.1:{self.port}"
        self.httpd = _Server(("127.0.0.1", self.port), _Handler)
        self.httpd.owner = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.seen: list[tuple[str, str, int]] = []
        self.lock = threading.Lock()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join()

    def reply(self, handler: _Handler, method: str, status: int, body: bytes, headers: dict[str, str]) -> None:
        with self.lock:
            self.seen.append((method, handler.path, status))
        handler.send_response(status)
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        if method != "HEAD":
            handler.wfile.write(body)

    def handle(self, handler: _Handler, method: str) -> None:
        raise NotImplementedError


class TokenServer(_Service):
    USERS: ClassVar[dict[str, str]] = {"alice": "secret"}
    REFRESH: ClassVar[dict[str, str]] = {"alice-refresh": "alice"}

    def __init__(self, root: Path, service: str = "test-registry", issuer: str = "test-issuer") -> None:
        super().__init__()
        self.service, self.issuer = service, issuer
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-token-issuer")])
        now = datetime.datetime.now(datetime.UTC)
        self.cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
                     .not_valid_after(now + datetime.timedelta(days=2))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                     .sign(self.key, hashes.SHA256()))
        self.cert_file = root / "token.crt"
        self.cert_file.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))

    def registry_auth(self) -> dict[str, Any]:
        return {"token": {"realm": f"http://{self.host}/token", "service": self.service, "issuer": self.issuer,
                          "rootcertbundle": str(self.cert_file)}}

    def handle(self, handler: _Handler, method: str) -> None:
        url = urllib.parse.urlsplit(handler.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        user: str | None = None
        if method == "POST":
            length = int(handler.headers.get("Content-Length", "0"))
            params.update(urllib.parse.parse_qsl(handler.rfile.read(length).decode()))
            user = self.REFRESH.get(params.get("refresh_token", ""))
            if params.get("grant_type") != "refresh_token" or user is None:
                return self._refuse(handler, method, "invalid refresh token")
        elif handler.headers.get("Authorization", "").startswith("Basic "):
            name, _, password = base64.b64decode(handler.headers["Authorization"][6:]).decode().partition(":")
            if self.USERS.get(name) != password:
                return self._refuse(handler, method, f"authentication failed for user {name}")
            user = name
        access = [self._grant(scope, user) for scope in params.get("scope", "").split(" ") if scope]
        token = self._sign(user or "", params.get("service", ""), [a for a in access if a["actions"]])
        body = {"token": token, "access_token": token, "expires_in": 300}
        self.reply(handler, method, 200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _refuse(self, handler: _Handler, method: str, why: str) -> None:
        body = json.dumps({"errors": [{"code": "UNAUTHORIZED", "message": why}]}).encode()
        self.reply(handler, method, 401, body, {"Content-Type": "application/json"})

    @staticmethod
    def _grant(scope: str, user: str | None) -> dict[str, Any]:
        kind, name, actions = (scope.split(":") + ["", "", ""])[:3]
        wanted = [a for a in actions.split(",") if a]
        allowed = wanted if user else [a for a in wanted if a == "pull" and name.startswith("public/")]
        return {"type": kind, "name": name, "actions": allowed}

    def _sign(self, subject: str, audience: str, access: list[dict[str, Any]]) -> str:
        now = int(time.time())
        claims = {"iss": self.issuer, "sub": subject, "aud": audience, "exp": now + 300, "nbf": now - 10, "iat": now,
                  "jti": uuid.uuid4().hex, "access": access}
        x5c = base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"x5c": [x5c]})


class Throttle(_Service):
    """Forwards to ``upstream``; a request whose path is in ``limits`` is answered ``429`` with
    ``Retry-After: retry_after`` as many times as its count says, then forwarded. Only the
    response headers named in ``keep`` are passed on."""

    def __init__(self, upstream: str, retry_after: str = "2") -> None:
        super().__init__()
        self.upstream, self.retry_after = upstream, retry_after
        self.limits: dict[str, int] = {}
        self.keep: tuple[str, ...] = ("content-type", "docker-content-digest", "www-authenticate", "location")

    def handle(self, handler: _Handler, method: str) -> None:
        with self.lock:
            left = self.limits.get(handler.path, 0)
            if left:
                self.limits[handler.path] = left - 1
        if left:
            body = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"slow down"}]}'
            return self.reply(handler, method, 429, body, {"Retry-After": self.retry_after})
        headers = {k: v for k, v in handler.headers.items() if k.lower() in ("accept", "authorization", "user-agent")}
        request = urllib.request.Request(f"http://{self.upstream}{handler.path}", method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                status, body, got = response.status, response.read(), response.headers
        except urllib.error.HTTPError as error:
            status, body, got = error.code, error.read(), error.headers
        self.reply(handler, method, status, body, {k: v for k, v in got.items() if k.lower() in self.keep})


class BlobRedirect(Throttle):
    """Forwards to ``upstream`` but answers blob requests ``307`` to ``target`` (another
    host:port of the same registry), as registries on object storage redirect blobs."""

    def __init__(self, upstream: str, target: str) -> None:
        super().__init__(upstream)
        self.target = target

    def handle(self, handler: _Handler, method: str) -> None:
        if "/blobs/" in handler.path:
            return self.reply(handler, method, 307, b"", {"Location": f"http://{self.target}{handler.path}"})
        return super().handle(handler, method)


class Endless(_Service):
    """A hostile registry: any manifest is an OCI index of ``size`` bytes, sent without
    ``Content-Length`` (``declare=False``, read until the connection closes) or declaring it."""

    def __init__(self, size: int, declare: bool) -> None:
        super().__init__()
        self.size, self.declare = size, declare

    def handle(self, handler: _Handler, method: str) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/vnd.oci.image.index.v1+json")
        handler.send_header("Docker-Content-Digest", "sha256:" + "a" * 64)
        if self.declare:
            handler.send_header("Content-Length", str(self.size))
        handler.end_headers()
        if method == "HEAD":
            return
        chunk = b" " * 65536
        try:
            for _ in range(self.size // len(chunk)):
                handler.wfile.write(chunk)
        except OSError:
            pass  # the client stopped reading at its cap


def make_ca(root: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate for 127.0.0.1, server key), PEM files in ``root``."""
    import ipaddress

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    now = datetime.datetime.now(datetime.UTC)
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca = (x509.CertificateBuilder().subject_name(name("throwaway test CA")).issuer_name(name("throwaway test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                       key_encipherment=False, data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (x509.CertificateBuilder().subject_name(name("127.0.0.1")).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    files = (root / "ca.crt", root / "server.crt", root / "server.key")
    files[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    return files
