"""The one way every command builds its Kubernetes client: from a kubeconfig file, or from the
in-cluster service account when none is named.

A configuration that cannot be used (a missing file, text that is not a kubeconfig, no current
context, no service account outside a cluster) is a :class:`ClientConfigError` whose message is
one line naming where it looked and why; the command line turns it into ``error: ...`` on
stderr and exit status 2, as every other configuration error (``agent.cli``). The Kubernetes
client is imported only when a client is built, so commands that never talk to a cluster stay
fast.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubernetes.client import Configuration
    from kubernetes.client.api_client import ApiClient

IN_CLUSTER = "in-cluster service account"
MAX_REASON = 300  # characters of the client's own explanation kept in the one line


class ClientConfigError(Exception):
    """The client configuration cannot be loaded; ``str()`` is one line."""


def load_configuration(kubeconfig: str | None) -> Configuration:
    """The client ``Configuration`` from ``kubeconfig`` (a path, or several joined by ``:`` as
    in ``$KUBECONFIG``), or the in-cluster service account when it is empty. urllib3's own
    retries are off: each caller's backoff is its single retry policy (and request counts in
    tests are exact)."""
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config

    if kubeconfig:
        paths = [path for path in kubeconfig.split(os.pathsep) if path]
        if not any(os.path.isfile(os.path.expanduser(path)) for path in paths):
            raise ClientConfigError(f"--kubeconfig {kubeconfig!r}: no such file")
    configuration = k8s_client.Configuration()
    try:
        # kubernetes.config carries no annotations (the generated client does)
        if kubeconfig:
            k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except Exception as exc:  # whatever the loader raises (YAML, decoding, missing keys), the file is unusable
        reason = " ".join(str(exc).split()) or type(exc).__name__
        where = kubeconfig or IN_CLUSTER
        raise ClientConfigError(f"cannot load Kubernetes client configuration ({where}): {reason[:MAX_REASON]}") from exc
    configuration.retries = False
    return configuration


def api_client(kubeconfig: str | None) -> ApiClient:
    """An ``ApiClient`` (the official client's auth, TLS, proxies and connection pool) on
    :func:`load_configuration`; the agent's and the controller's API classes wrap it."""
    from kubernetes.client.api_client import ApiClient

    return ApiClient(load_configuration(kubeconfig))
