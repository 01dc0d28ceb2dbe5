"""NodeFeature objects for this node joined to discovery's own features and labels, as
nfd-master merges them (``pkg/nfd-master/nfd-master.go`` ``getAndMergeNodeFeatures``,
``api/nfd/v1alpha1/feature.go`` ``MergeInto``).

Discovery's result plays the part of NFD's own worker object and comes first; the node's
objects in NFD's own namespace follow (``RuleOptions.nfd_namespace``, ``--nfd-namespace``), then
the others, each group sorted by name, then namespace (nfd-master's sort). A later object adds flags, overrides an
attribute of the same name, appends instances, and overrides a label of the same key.
Unprefixed label keys get ``feature.node.kubernetes.io/``, a prefixed key in the same object
winning over the unprefixed one (``addNsToMapKeys``); the labels then go through the same
namespace policy and validation as discovery's (``desired_state``). What each object contributed
remembers it (``NodeFeature/<namespace>/<name>``) for ``explain``.

Objects come from other agents and are hostile until checked: a part that is not the CRD's
shape is skipped with a problem naming the object and field, the rest still counts. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agent.desired import Problem
from agent.features import NFD_PREFIX, Feature, Instance

NODE_NAME_LABEL = "nfd.node.kubernetes.io/node-name"
PROVENANCE = "NodeFeature"


@dataclass(frozen=True)
class NodeFeatureObject:
    """The parts of one NodeFeature that count: where it is, its features, its labels."""

    namespace: str
    name: str
    features: Mapping[str, Feature] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def origin(self) -> str:
        return f"{PROVENANCE}/{self.namespace}/{self.name}"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _strings(value: Any, where: str, problems: list[Problem], origin: str) -> dict[str, str] | None:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        problems.append(Problem(f"{origin}:{where}", "NodeFeature", "not a map of strings; skipped"))
        return None
    return dict(value)


def _feature_sets(kind: str, sets: Any, origin: str, problems: list[Problem]) -> dict[str, Feature]:
    out: dict[str, Feature] = {}
    if sets is None:
        return out
    if not isinstance(sets, Mapping):
        problems.append(Problem(f"{origin}:spec.features.{kind}", "NodeFeature", "not a map; skipped"))
        return out
    for name, body in sets.items():
        where = f"spec.features.{kind}[{name!r}].elements"
        elements = _mapping(body).get("elements")
        if kind == "flags" and isinstance(elements, Mapping):
            out[str(name)] = Feature(flags=[str(k) for k in elements], origin=origin)
        elif kind == "attributes" and (attrs := _strings(elements, where, problems, origin)) is not None:
            out[str(name)] = Feature(attributes=attrs, origin=origin)
        elif kind == "instances" and isinstance(elements, list):
            instances = []
            for index, item in enumerate(elements):
                attrs = _strings(_mapping(item).get("attributes"),
                                 f"{where}[{index}].attributes", problems, origin)
                if attrs is not None:
                    instances.append(Instance(attrs, origin))
            out[str(name)] = Feature(instances=instances, origin=origin)
        elif kind != "attributes":
            problems.append(Problem(f"{origin}:{where}", "NodeFeature", f"not the CRD's {kind} shape; skipped"))
    return out


def parse_node_feature(obj: Mapping[str, Any]) -> tuple[NodeFeatureObject, list[Problem]]:
    metadata = _mapping(obj.get("metadata"))
    found = NodeFeatureObject(str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
    origin = found.origin
    problems: list[Problem] = []
    spec = _mapping(obj.get("spec"))
    raw = spec.get("features")
    features: dict[str, Feature] = {}
    if isinstance(raw, Mapping):
        for kind in ("flags", "attributes", "instances"):
            for name, feature in _feature_sets(kind, raw.get(kind), origin, problems).items():
                features[name] = _merge(features.get(name), feature)
    labels = _strings(spec.get("labels") or {}, "spec.labels", problems, origin) or {}
    return NodeFeatureObject(found.namespace, found.name, features, prefixed(labels)), problems


def prefixed(labels: Mapping[str, str]) -> dict[str, str]:
    """NFD's ``addNsToMapKeys``: unprefixed keys get ``feature.node.kubernetes.io/``, unless
    the object also holds that prefixed key (which wins)."""
    out = {k: v for k, v in labels.items() if "/" in k}
    for key, value in labels.items():
        if "/" not in key and NFD_PREFIX + key not in labels:
            out[NFD_PREFIX + key] = value
    return out


def _merge(base: Feature | None, extra: Feature) -> Feature:
    """``extra`` merged into ``base`` (``MergeInto``): flags added, attributes overridden,
    instances appended; the kinds of both."""
    if base is None:
        return extra
    origins = dict(base.element_origins)
    origins.update(dict.fromkeys((*extra.flags, *extra.attributes), extra.origin))
    return Feature(flags=base.flags | extra.flags, attributes={**base.attributes, **extra.attributes},
                   instances=(*base.instances, *extra.instances), origin=base.origin,
                   element_origins=origins, kinds=base.kinds | extra.kinds)


def join_node_features(features: Mapping[str, Feature], labels: Mapping[str, str], label_origins: Mapping[str, str],
                       objects: Iterable[NodeFeatureObject], nfd_namespace: str = "node-feature-discovery",
                       ) -> tuple[dict[str, Feature], dict[str, str], dict[str, str]]:
    """Discovery's features, labels and label origins with the node's objects merged in, in
    NFD's order (``nfd_namespace``'s first); discovery's own answer is untouched where no
    object speaks."""
    joined, all_labels, origins = dict(features), dict(labels), dict(label_origins)
    for obj in sorted(objects, key=lambda o: (o.namespace != nfd_namespace, o.name, o.namespace)):
        for name, feature in obj.features.items():
            joined[name] = _merge(joined.get(name), feature)
        for key, value in obj.labels.items():
            all_labels[key] = value
            origins[key] = obj.origin
    return joined, all_labels, origins
