"""The cluster objects a pod's resolution depends on, read with a short cache: the pod's pull
secrets (as kubelet uses them) and its namespace's ``placement-on-error`` choice.

Pull secrets: the pod's ``imagePullSecrets`` in order (the ServiceAccount's are copied into
the pod at admission by the ServiceAccount admission plugin, so the pod lists them all).
``kubernetes.io/dockerconfigjson`` and ``kubernetes.io/dockercfg`` are read as kubelet reads
them; a secret that is missing, unreadable (RBAC) or malformed is skipped with one log line,
as kubelet goes on without it. Each secret and namespace read is cached for ``ttl`` seconds, so
a burst of pods from one Deployment costs one GET each; a read that failed is not cached (the
next pod asks again).

``until`` (on the lookups' clock): when the caller's decision is due. Each GET's timeout is
what is left of it, so a slow API server cannot push a pod's decision past its retry window.
"""

from __future__ import annotations

import base64
import binascii
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agent.images import (
    Credential,
    Keyring,
    PullSecretError,
    parse_dockercfg,
    parse_dockerconfigjson,
)
from agent.placement.kube import PlacementApi
from agent.placement.policy import OnError, parse_on_error

log = logging.getLogger(__name__)
SECRET_FIELDS = {"kubernetes.io/dockerconfigjson": ".dockerconfigjson", "kubernetes.io/dockercfg": ".dockercfg"}


class Lookups:
    def __init__(self, api: PlacementApi, ttl: float = 30.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.api, self.ttl, self._clock = api, ttl, clock
        self._lock = threading.Lock()
        self._secrets: dict[tuple[str, str], tuple[float, Mapping[str, Credential] | None]] = {}
        self._policies: dict[str, tuple[float, OnError]] = {}

    def _timeout(self, until: float | None) -> float | None:
        return None if until is None else max(0.001, until - self._clock())

    def keyring(self, pod: Mapping[str, Any], until: float | None = None) -> Keyring:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        configs = []
        for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []:
            name = ref.get("name") if isinstance(ref, Mapping) else None
            if isinstance(name, str) and name:
                config = self._secret(namespace, name, until)
                if config:
                    configs.append(config)
        return Keyring(configs)

    def _secret(self, namespace: str, name: str, until: float | None) -> Mapping[str, Credential] | None:
        key, now = (namespace, name), self._clock()
        with self._lock:
            cached = self._secrets.get(key)
        if cached and cached[0] > now:
            return cached[1]
        try:
            secret = self.api.get_secret(namespace, name, self._timeout(until))
        except Exception as exc:  # noqa: BLE001 - kubelet goes on without a secret it cannot read
            log.warning("pull secret %s/%s not read (%s); resolving without it", namespace, name,
                        " ".join(str(exc).split())[:200])
            return None
        config = self._pull_config(namespace, name, secret)
        with self._lock:
            self._secrets[key] = (now + self.ttl, config)
        return config

    @staticmethod
    def _pull_config(namespace: str, name: str, secret: Mapping[str, Any]) -> Mapping[str, Credential] | None:
        field = SECRET_FIELDS.get(str(secret.get("type", "")))
        raw = (secret.get("data") or {}).get(field or "")
        if not field or not isinstance(raw, str):
            log.warning("secret %s/%s is not a pull secret (type %r); ignored", namespace, name, secret.get("type"))
            return None
        try:
            data = base64.b64decode(raw, validate=True)
            return parse_dockerconfigjson(data) if field == ".dockerconfigjson" else parse_dockercfg(data)
        except (binascii.Error, PullSecretError) as exc:
            log.warning("pull secret %s/%s unusable (%s); resolving without it", namespace, name, exc)
            return None

    def on_error(self, namespace: str, until: float | None = None) -> OnError:
        now = self._clock()
        with self._lock:
            cached = self._policies.get(namespace)
        if cached and cached[0] > now:
            return cached[1]
        try:
            annotations = (self.api.get_namespace(namespace, self._timeout(until)).get("metadata") or {}).get("annotations") or {}
            policy = parse_on_error(annotations)
        except Exception as exc:  # noqa: BLE001 - an unreadable namespace means the default
            log.warning("namespace %s not read (%s); on-error policy ungate", namespace, " ".join(str(exc).split())[:200])
            return OnError()
        with self._lock:
            self._policies[namespace] = (now + self.ttl, policy)
        return policy
