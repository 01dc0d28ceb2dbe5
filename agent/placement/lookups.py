"""The cluster objects a pod's resolution depends on, read with a short cache: the pod's pull
secrets (as kubelet uses them) and its namespace's ``placement-on-error`` choice.

Pull secrets: the pod's ``imagePullSecrets`` in order (the ServiceAccount's are copied into
the pod at admission by the ServiceAccount admission plugin, so the pod lists them all).
``kubernetes.io/dockerconfigjson`` and ``kubernetes.io/dockercfg`` are read as kubelet reads
them; a secret that is missing, unreadable (RBAC) or malformed is skipped with one log line,
as kubelet goes on without it. Each secret and namespace is cached for ``ttl`` seconds, so a
burst of pods from one Deployment costs one GET each.
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

    def keyring(self, pod: Mapping[str, Any]) -> Keyring:
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace", ""))
        configs = []
        for ref in (pod.get("spec") or {}).get("imagePullSecrets") or []:
            name = ref.get("name") if isinstance(ref, Mapping) else None
            if isinstance(name, str) and name:
                config = self._secret(namespace, name)
                if config:
                    configs.append(config)
        return Keyring(configs)

    def _secret(self, namespace: str, name: str) -> Mapping[str, Credential] | None:
        key, now = (namespace, name), self._clock()
        with self._lock:
            cached = self._secrets.get(key)
        if cached and cached[0] > now:
            return cached[1]
        config = self._read_secret(namespace, name)
        with self._lock:
            self._secrets[key] = (now + self.ttl, config)
        return config

    def _read_secret(self, namespace: str, name: str) -> Mapping[str, Credential] | None:
        try:
            secret = self.api.get_secret(namespace, name)
        except Exception as exc:  # noqa: BLE001 - kubelet goes on without a secret it cannot read
            log.warning("pull secret %s/%s not read (%s); resolving without it", namespace, name,
                        " ".join(str(exc).split())[:200])
            return None
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

    def on_error(self, namespace: str) -> OnError:
        now = self._clock()
        with self._lock:
            cached = self._policies.get(namespace)
        if cached and cached[0] > now:
            return cached[1]
        try:
            annotations = (self.api.get_namespace(namespace).get("metadata") or {}).get("annotations") or {}
            policy = parse_on_error(annotations)
        except Exception as exc:  # noqa: BLE001 - an unreadable namespace means the default
            log.warning("namespace %s not read (%s); on-error policy ungate", namespace, " ".join(str(exc).split())[:200])
            policy = OnError()
        with self._lock:
            self._policies[namespace] = (now + self.ttl, policy)
        return policy
