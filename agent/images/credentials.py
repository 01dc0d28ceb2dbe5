"""Registry credentials from pull secrets, looked up the way kubelet looks them up.

Input is plain data: the *contents* of a ``kubernetes.io/dockerconfigjson`` secret's
``.dockerconfigjson`` (``{"auths": {key: entry}}``) or of a legacy ``kubernetes.io/dockercfg``
secret's ``.dockercfg`` (``{key: entry}``). An entry gives ``auth`` (base64 of
``user:password``, padded or not) or ``username``/``password``, and optionally
``identitytoken`` (an OAuth2 refresh token; kubelet passes none, containers/image and
containerd use it with the token server).

Matching is kubelet's (kubernetes/kubernetes ``pkg/credentialprovider/keyring.go``,
``BasicDockerKeyring.Add``/``Lookup``, ``URLsMatch``, ``isDefaultRegistryMatch``; its
``keyring_test.go`` cases are our tests' expected values):

- a key may carry a scheme, a path, a port; ``/v1/`` and ``/v2/`` path prefixes are dropped;
- keys are tried in reverse lexical order, so ``quay.io/coreos`` comes before ``quay.io``,
  and *every* matching key's credentials are returned, most specific first (kubelet tries
  them in that order until a pull succeeds);
- a key matches when the ports are equal, the host has as many dot-separated parts, each
  part matches as a Go ``filepath.Match`` glob (``*.example.com``), and the key's path is a
  string prefix of the image's path;
- when nothing matched, an image on Docker Hub gets the ``index.docker.io`` key's credentials.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

DEFAULT_REGISTRY_KEY = "index.docker.io"


class PullSecretError(ValueError):
    """Pull secret contents that cannot be used (not JSON, a malformed ``auth``): one line."""


@dataclass(frozen=True)
class Credential:
    """One set of credentials for a registry; ``repr`` hides the secrets."""

    username: str = ""
    password: str = field(default="", repr=False)
    identity_token: str = field(default="", repr=False)

    @property
    def identity(self) -> str:
        """A stable digest of the credential, used to key caches (never the secret itself)."""
        raw = f"{self.username}\0{self.password}\0{self.identity_token}".encode()
        return hashlib.sha256(raw).hexdigest()[:32]


def parse_dockerconfigjson(data: bytes | str) -> dict[str, Credential]:
    """The ``auths`` map of a ``.dockerconfigjson`` (a missing ``auths`` is an empty map, as
    kubelet reads it)."""
    document = _load(data)
    auths = document.get("auths", {})
    if not isinstance(auths, dict):
        raise PullSecretError("pull secret: 'auths' is not an object")
    return _entries(auths)


def parse_dockercfg(data: bytes | str) -> dict[str, Credential]:
    """A legacy ``.dockercfg``: the top-level object is the map of keys to entries."""
    return _entries(_load(data))


def parse_pull_secret(data: bytes | str) -> dict[str, Credential]:
    """Either form: an object with ``auths`` is a ``.dockerconfigjson`` (as is a Docker CLI
    ``config.json``), anything else a ``.dockercfg``."""
    document = _load(data)
    if "auths" in document:
        return parse_dockerconfigjson(data)
    return _entries(document)


def _load(data: bytes | str) -> dict[str, object]:
    try:
        document = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PullSecretError(f"pull secret is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise PullSecretError("pull secret is not a JSON object")
    return document


def _entries(auths: Mapping[str, object]) -> dict[str, Credential]:
    out: dict[str, Credential] = {}
    for key, entry in auths.items():
        if not isinstance(entry, dict):
            raise PullSecretError(f"pull secret entry {key!r} is not an object")
        fields = {name: entry.get(name, "") for name in ("username", "password", "auth", "identitytoken")}
        if not all(isinstance(value, str) for value in fields.values()):
            raise PullSecretError(f"pull secret entry {key!r}: username, password, auth and identitytoken must be strings")
        username, password = str(fields["username"]), str(fields["password"])
        if fields["auth"]:
            username, password = _decode_auth(key, str(fields["auth"]))
        out[key] = Credential(username, password, str(fields["identitytoken"]))
    return out


def _decode_auth(key: str, field_value: str) -> tuple[str, str]:
    """``base64(user:password)``, padded or unpadded (kubelet's decodeDockerConfigFieldAuth)."""
    text = field_value.strip()
    try:
        padded = text if text.endswith("=") else text + "=" * (-len(text) % 4)
        decoded = base64.b64decode(padded, validate=True).decode()
    except (binascii.Error, ValueError):
        raise PullSecretError(f"pull secret entry {key!r}: 'auth' is not base64") from None
    username, sep, password = decoded.partition(":")
    if not sep:
        raise PullSecretError(f"pull secret entry {key!r}: 'auth' must be base64(username:password)")
    return username, password


class Keyring:
    """Credentials from any number of pull secrets, in the order given (a pod's
    ``imagePullSecrets`` order). Immutable once built; safe to share between threads."""

    def __init__(self, configs: Iterable[Mapping[str, Credential]] = ()) -> None:
        creds: dict[str, list[Credential]] = {}
        for config in configs:
            for location, credential in config.items():
                key = _keyring_key(location)
                if key is not None:
                    creds.setdefault(key, []).append(credential)
        self._creds = {key: tuple(values) for key, values in creds.items()}
        self._index = sorted(self._creds, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._index)

    def lookup(self, image: str) -> tuple[Credential, ...]:
        """Credentials for ``image`` (``domain/repository``, e.g. ``docker.io/library/nginx``),
        most specific key first; empty when none apply (anonymous)."""
        found: list[Credential] = []
        for key in self._index:
            if urls_match(key, image):
                found.extend(self._creds[key])
        if not found and is_default_registry_match(image):
            found.extend(self._creds.get(DEFAULT_REGISTRY_KEY, ()))
        return tuple(found)


def _keyring_key(location: str) -> str | None:
    value = location if location.startswith(("https://", "http://")) else "https://" + location
    try:
        parsed = urlsplit(value)
        host = parsed.netloc.rpartition("@")[2]
    except ValueError:
        return None
    path = parsed.path
    if path.startswith(("/v2/", "/v1/")):
        path = path[3:]
    return host + path if path and path != "/" else host


def is_default_registry_match(image: str) -> bool:
    """Whether ``image`` would be pulled from Docker Hub, judged from its name alone."""
    first, sep, _ = image.partition("/")
    if not first:
        return False
    if not sep or first in ("docker.io", "index.docker.io"):
        return True
    return not any(c in first for c in ".:")


def urls_match(glob: str, target: str) -> bool:
    """kubelet's ``URLsMatchStr``: globs in host parts only; ports equal; path a prefix."""
    try:
        glob_url, target_url = urlsplit("https://" + glob), urlsplit("https://" + target)
    except ValueError:
        return False
    glob_parts, glob_port = _split_host(glob_url.netloc)
    target_parts, target_port = _split_host(target_url.netloc)
    if glob_port != target_port or len(glob_parts) != len(target_parts):
        return False
    if not target_url.path.startswith(glob_url.path):
        return False
    return all(_glob_match(g, t) for g, t in zip(glob_parts, target_parts, strict=True))


def _split_host(netloc: str) -> tuple[list[str], str]:
    """Go's ``net.SplitHostPort``, falling back to (whole, "") as kubelet does on error."""
    host, port = netloc, ""
    match = re.fullmatch(r"\[([^\]]*)\]:([^:]*)|([^:\[\]]*):([^:]*)", netloc)
    if match:
        host = match.group(1) if match.group(1) is not None else match.group(3)
        port = match.group(2) if match.group(2) is not None else match.group(4)
    return host.split("."), port


def _glob_match(pattern: str, name: str) -> bool:
    """Go's ``path/filepath.Match`` on one host part (no separators in either): ``*``, ``?``,
    ``[...]`` with ``^`` negation and ranges, ``\\`` escapes; a malformed pattern matches
    nothing (Go returns ErrBadPattern, which kubelet treats as no match)."""
    regex = _glob_regex(pattern)
    return regex is not None and re.fullmatch(regex, name, re.DOTALL) is not None


def _glob_regex(pattern: str) -> str | None:
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "\\":
            if i + 1 == len(pattern):
                return None
            i += 1
            out.append(re.escape(pattern[i]))
        elif char == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1:i + 2] == "^" else i + 1)
            if end < 0:
                return None
            body = pattern[i + 1:end]
            negate = body.startswith("^")
            body = body[1:] if negate else body
            if not body:
                return None
            escaped = "".join(c if c == "-" else re.escape(c) for c in body)
            out.append(f"[{'^' if negate else ''}{escaped}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)
