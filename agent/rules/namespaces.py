"""Which label/annotation/resource/taint namespaces the agent may write, as nfd-master decides.

NFD (``pkg/apis/nfd/validate``, ``filterFeatureLabel``): ``kubernetes.io`` and its subdomains
are denied except ``feature.node.kubernetes.io`` and ``profile.node.kubernetes.io`` (and their
subdomains); the deny list is checked for every namespace (``*suffix`` is a suffix
wildcard); ``extra_label_ns`` re-allows an exact namespace.  We also refuse ``k8s.io``
(Kubernetes-reserved, as nodepool-labels-operator does), never allow
``node-restriction.kubernetes.io`` (reserved for admins; the NodeRestriction admission
plugin forbids kubelets setting it) and never let a rule write our ownership annotations.
"""

from __future__ import annotations

from agent.desired import OWNER_DOMAIN, OWNERSHIP_ANNOTATIONS
from agent.features import NFD_PREFIX
from agent.k8s_validation import label_namespace, reserved_namespace_problem
from agent.rules.model import RuleOptions

DEFAULT_NAMESPACE = NFD_PREFIX.rstrip("/")

_RESERVED = ("kubernetes.io", "k8s.io")
_ALLOWED_RESERVED = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
_NEVER = ("node-restriction.kubernetes.io",)


def _in_domain(namespace: str, domain: str) -> bool:
    return namespace == domain or namespace.endswith("." + domain)


def autoprefix(key: str, options: RuleOptions) -> str:
    """NFD auto-prefix: an unprefixed key becomes ``feature.node.kubernetes.io/<key>``."""
    if "/" in key or not options.autoprefix:
        return key
    return NFD_PREFIX + key


def _denied_by_list(namespace: str, options: RuleOptions) -> str | None:
    for entry in options.deny_label_ns:
        if entry.startswith("*"):
            if namespace.endswith(entry[1:]):
                return f"namespace {namespace!r} is denied by deny_label_ns entry {entry!r}"
        elif namespace == entry:
            return f"namespace {namespace!r} is denied by deny_label_ns"
    return None


def namespace_problem(key: str, options: RuleOptions, what: str = "label") -> str | None:
    """Why the agent must not write ``key``, or None when its namespace is allowed."""
    namespace = label_namespace(key)
    if not namespace:
        return f"{what} key has no namespace (prefix/name required)"
    if any(_in_domain(namespace, d) for d in _NEVER):
        return f"namespace {namespace!r} is reserved for cluster administrators and never written"
    if namespace in options.extra_label_ns:
        return None
    reserved = any(_in_domain(namespace, d) for d in _RESERVED)
    if reserved and not any(_in_domain(namespace, d) for d in _ALLOWED_RESERVED):
        return (
            f"namespace {namespace!r} is reserved by Kubernetes (only feature.node.kubernetes.io and "
            "profile.node.kubernetes.io are allowed; add it to extra_label_ns to override)"
        )
    return _denied_by_list(namespace, options)


def annotation_problem(key: str, options: RuleOptions) -> str | None:
    """Annotations follow the label policy, and our own ownership records are off limits."""
    if key in OWNERSHIP_ANNOTATIONS or (label_namespace(key) == OWNER_DOMAIN and key.split("/", 1)[1].startswith("owned-")):
        return "annotation is the agent's own ownership record; rules may not write it"
    return namespace_problem(key, options, "annotation")


def _nfd_only(key: str, what: str) -> str | None:
    """NFD's ``validate.ExtendedResource`` and ``validate.Taint``: of ``kubernetes.io`` only
    ``feature.node.kubernetes.io`` and its subdomains (not ``profile.node``, which labels get)."""
    namespace = label_namespace(key)
    if _in_domain(namespace, "kubernetes.io") and not _in_domain(namespace, DEFAULT_NAMESPACE):
        return f"{what} namespace {namespace!r} is reserved by Kubernetes (only feature.node.kubernetes.io is allowed)"
    return None


def resource_problem(name: str, options: RuleOptions) -> str | None:
    """Extended resources: the kubernetes.io rule applies (NFD); the label deny list too; and,
    as for every item the agent owns on its Node, no Kubernetes-reserved namespace
    (``reserved_namespace_problem``), which ``extra_label_ns`` does not re-allow."""
    return (namespace_problem(name, options, "extended resource") or _nfd_only(name, "extended resource")
            or reserved_namespace_problem(name))


def taint_problem(key: str, options: RuleOptions) -> str | None:
    """Taint keys must be prefixed (never auto-prefixed) and outside kubernetes.io."""
    return namespace_problem(key, options, "taint") or _nfd_only(key, "taint")
