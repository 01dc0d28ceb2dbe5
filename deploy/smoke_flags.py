"""Translate the DaemonSet in daemonset.yaml into ``docker run`` flags, for deploy/smoke-image.sh.

The smoke test must run the image *as the manifest says* (its UID, read-only root, dropped
capabilities, no-new-privileges, exactly its mounts and arguments), not as someone remembers
it, so every flag here is read from the manifest. What Docker cannot express is refused or
listed in ``notes`` (and printed by the smoke run), never silently dropped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import yaml


class ManifestError(ValueError):
    """The manifest asks for something the smoke run must not paper over."""


@dataclass(frozen=True)
class DockerRun:
    flags: tuple[str, ...]  # everything between ``docker run`` and the image
    args: tuple[str, ...]  # the container's args (the DaemonSet's ``args``)
    user: str
    notes: tuple[str, ...] = field(default=())


def daemonset(manifest_text: str) -> dict[str, Any]:
    (ds,) = [d for d in yaml.safe_load_all(manifest_text) if d and d.get("kind") == "DaemonSet"]
    return ds


def render_configmap(manifest_text: str, name: str, directory: str) -> str:
    """Write ConfigMap ``name``'s data from the manifest into ``directory`` (one file a key,
    as kubelet projects a ConfigMap volume without ``items``) and return the directory."""
    (configmap,) = [d for d in yaml.safe_load_all(manifest_text)
                    if d and d.get("kind") == "ConfigMap" and d["metadata"]["name"] == name]
    os.makedirs(directory, exist_ok=True)
    for key, value in (configmap.get("data") or {}).items():
        with open(os.path.join(directory, key), "w", encoding="utf-8") as out:
            out.write(value)
    return directory


def _security_flags(merged: dict[str, Any]) -> tuple[str, list[str]]:
    """The user and the docker flags for the pod's and container's merged securityContext."""
    if merged.get("privileged"):
        raise ManifestError("the container is privileged: the hardening the smoke test proves is not there")
    if "runAsUser" not in merged:
        raise ManifestError("no runAsUser: the image's USER would decide, not the manifest")
    user = f"{merged['runAsUser']}:{merged.get('runAsGroup', merged['runAsUser'])}"
    flags: list[str] = ["--user", user]
    if merged.get("readOnlyRootFilesystem"):
        flags.append("--read-only")
    caps = merged.get("capabilities") or {}
    for cap in caps.get("drop") or []:
        flags += ["--cap-drop", cap]
    for cap in caps.get("add") or []:
        flags += ["--cap-add", cap]
    if merged.get("allowPrivilegeEscalation") is False:
        flags += ["--security-opt", "no-new-privileges"]
    seccomp = (merged.get("seccompProfile") or {}).get("type", "RuntimeDefault")
    if seccomp == "Unconfined":
        flags += ["--security-opt", "seccomp=unconfined"]
    elif seccomp != "RuntimeDefault":
        raise ManifestError(f"seccomp profile {seccomp!r} has no docker equivalent here")
    # Docker's default profile is the runtime default, as containerd's is for RuntimeDefault.
    return user, flags


def _env_flags(container: dict[str, Any], fields: dict[str, str]) -> list[str]:
    """The container's environment: values as written, field references from ``fields``."""
    flags: list[str] = []
    for var in container.get("env") or []:
        if "value" in var:
            flags += ["-e", f"{var['name']}={var['value']}"]
        else:
            path = var["valueFrom"]["fieldRef"]["fieldPath"]
            flags += ["-e", f"{var['name']}={fields[path]}"]
    return flags


def docker_run(manifest_text: str, *, node_name: str, catalogue_dir: str, host_root: str = "/",
               pod_name: str = "smoke", namespace: str = "node-feature-agent",
               drop_missing_files: bool = False, configmap_root: str | None = None) -> DockerRun:
    """``docker run`` flags equivalent to the DaemonSet's pod on this host (``host_root`` is
    where the host's ``/`` is seen; ``catalogue_dir`` stands in for the catalogue ConfigMap,
    the one mounted where ``--rules`` points; any other ConfigMap is rendered from the manifest
    under ``configmap_root``).
    A ``type: File``/``Directory`` hostPath missing here is a ``ManifestError`` (kubelet would
    not start the pod), unless ``drop_missing_files``: then it is left out, with a note, as an
    operator would remove that mount for such nodes."""
    pod = daemonset(manifest_text)["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    user, flags = _security_flags({**(pod.get("securityContext") or {}), **(container.get("securityContext") or {})})
    notes: list[str] = []
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        target = mount["mountPath"]
        if "hostPath" in volume:
            if not mount.get("readOnly"):
                raise ManifestError(f"hostPath {volume['hostPath']['path']} is mounted writable")
            source = os.path.join(host_root, volume["hostPath"]["path"].lstrip("/"))
            kind = volume["hostPath"].get("type", "")
            if kind == "File" and not os.path.isfile(source):
                if not drop_missing_files:
                    raise ManifestError(f"{source} is not a file: kubelet would refuse to start the pod")
                notes.append(f"{source} is missing on this host: kubelet would refuse the pod; mount left out")
                continue
            if kind == "Directory" and not os.path.isdir(source):
                raise ManifestError(f"{source} is not a directory: kubelet would refuse to start the pod")
            if not os.path.exists(source):  # untyped / DirectoryOrCreate: kubelet makes a directory
                notes.append(f"{source} does not exist here; mounted as an empty directory, as kubelet would")
                source = None
            if mount.get("recursiveReadOnly") == "IfPossible":
                notes.append(f"{target}: recursiveReadOnly IfPossible is not available in this docker; plain read-only bind")
            flags += ["--mount", f"type=bind,source={source},target={target},readonly"] if source else \
                ["--mount", f"type=tmpfs,target={target},tmpfs-size=1m"]
        elif "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit", "16Mi").replace("Mi", "m")
            flags += ["--tmpfs", f"{target}:size={size}"]
        elif "configMap" in volume:
            source = catalogue_dir
            if not any(arg == f"--rules={target}" for arg in container.get("args") or ()):
                if configmap_root is None:
                    raise ManifestError(f"volume {mount['name']}: a ConfigMap other than the catalogue needs configmap_root")
                name = volume["configMap"]["name"]
                source = render_configmap(manifest_text, name, os.path.join(configmap_root, name))
            flags += ["--mount", f"type=bind,source={source},target={target},readonly"]
        else:
            raise ManifestError(f"volume {mount['name']}: no docker equivalent in the smoke run")
    # the pod's IP: on the host network (how the smoke test runs it), loopback serves the probes
    fields = {"spec.nodeName": node_name, "metadata.name": pod_name, "metadata.namespace": namespace,
              "status.podIP": "127.0.0.1"}
    flags += _env_flags(container, fields)
    if not pod.get("hostNetwork"):
        notes.append("the pod has its own network namespace; the smoke run uses the host's, so the container "
                     "reaches the test API server on 127.0.0.1 (dockerd runs here without a bridge)")
    flags += ["--network", "host"]
    return DockerRun(flags=tuple(flags), args=tuple(container.get("args") or ()), user=user, notes=tuple(notes))
