"""NodeFeatureRule objects read from the cluster, evaluated exactly as rule files.

An object (``nfd.k8s-sigs.io/v1alpha1``, cluster-scoped) goes through the same parser as a
file (``nfr_parser.parse_rule_file``): it is written out as YAML, one key or list item a line,
and every line is mapped back to its field path, so a problem or an ``explain`` provenance
reads ``NodeFeatureRule/<name>:spec.rules[2].matchFeatures[0]`` where a file says
``path:line``. Pure: objects in, rule sets and problems out; the watch is
``agent.runtime.cluster_watch``.

Files and objects together: an object named as a file's rule set replaces it (so a cluster
admin updates a vendor's rules, e.g. a newer Intel NodeFeatureRule, without rebuilding the
image); the override is reported once, never silent.

An object is tenant input, a rule file the admin's: an object's templates render within the
cluster budget (``agent.rules.budget``), and its taints count only with ``taints=True``
(``run --enable-taints``), as nfd-master applies NodeFeatureRule taints only with
``-enable-taints`` (off by default; ``pkg/nfd-master/nfd-master.go``, ``if m.config.EnableTaints``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from agent.desired import Problem
from agent.rules.budget import TEMPLATE_OUTPUT_CHARS, TEMPLATE_STEPS
from agent.rules.model import Catalogue, RuleOptions, RuleSet, TemplateSpec
from agent.rules.nfr_parser import API_VERSION, KIND, parse_rule_file
from agent.rules.static_checks import static_problems
from agent.rules.vocabulary import engine_vocabulary, vocabulary_problems

PROVENANCE = "NodeFeatureRule"
MAX_OBJECT_BYTES = 1024 * 1024  # as a rule file (agent.rules.loader.MAX_RULE_FILE_BYTES)
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]+")
# libyaml where PyYAML was built with it: the same document, written and read ~10x faster (the
# line map is built from this read; the rule parser reads the text again, as it reads a file)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def object_origin(name: str) -> str:
    """What stands where a file's path would: ``NodeFeatureRule/<metadata.name>``."""
    return f"{PROVENANCE}/{name}"


def _step(path: str, key: str) -> str:
    if _PLAIN_KEY.fullmatch(key) and "." not in key:
        return f"{path}.{key}" if path else key
    return f"{path}[{yaml.safe_dump(key, default_style=chr(34)).strip()}]"


def _walk(node: yaml.Node, path: str, lines: dict[int, str]) -> None:
    """Each line -> the outermost field that starts on it (a list item before its first key)."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = _step(path, str(key.value))
            lines.setdefault(key.start_mark.line + 1, child)
            _walk(value, child, lines)
    elif isinstance(node, yaml.SequenceNode):
        for index, value in enumerate(node.value):
            child = f"{path}[{index}]"
            lines.setdefault(value.start_mark.line + 1, child)
            _walk(value, child, lines)


def _document(obj: Mapping[str, Any]) -> str:
    """The object as the parser reads a file: only what a rule file holds (no managedFields,
    no status), one key or item a line."""
    metadata: Mapping[str, Any] = obj["metadata"] if isinstance(obj.get("metadata"), Mapping) else {}
    doc = {"apiVersion": obj.get("apiVersion", API_VERSION), "kind": obj.get("kind", KIND),
           "metadata": {"name": metadata.get("name")}, "spec": obj.get("spec")}
    return yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, default_flow_style=False, width=1 << 30, allow_unicode=True)


def parse_rule_object(obj: Mapping[str, Any], options: RuleOptions | None = None, *,
                      taints: bool = False) -> tuple[RuleSet | None, list[Problem]]:
    """One NodeFeatureRule object -> its rule set (bad rules skipped) and problems, each
    located by the object's name and the field path: the parser's, then the load-time
    checks a rule file gets (``static_checks``, ``vocabulary``; a third-party feature is no
    problem here, a NodeFeature object may provide it). Its templates carry the cluster
    budget; without ``taints`` its rules' taints are dropped (``ignored_taints`` names them)."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    origin = object_origin(name)
    text = _document(obj)
    if len(text.encode()) > MAX_OBJECT_BYTES:
        return None, [Problem(f"{origin}:spec", "object", f"larger than {MAX_OBJECT_BYTES} bytes as YAML; skipped")]
    lines: dict[int, str] = {1: "metadata.name"}  # the rule set itself
    root = yaml.compose(text, Loader=_LOADER)
    if root is not None:
        _walk(root, "", lines)
    rule_sets, problems = parse_rule_file(origin, text, locate=lambda line: lines.get(line, "metadata.name"))
    if not rule_sets:
        return None, problems
    single = Catalogue(rule_sets=(rule_sets[0],))
    unknown, _third_party = vocabulary_problems(single, engine_vocabulary())
    return _as_tenant_input(rule_sets[0], taints), problems + static_problems(single, options or RuleOptions()) + unknown


def _budgeted(template: TemplateSpec | None) -> TemplateSpec | None:
    if template is None:
        return None
    return dataclasses.replace(template, max_steps=TEMPLATE_STEPS, max_output=TEMPLATE_OUTPUT_CHARS)


def _as_tenant_input(rule_set: RuleSet, taints: bool) -> RuleSet:
    rules = tuple(dataclasses.replace(rule, labels_template=_budgeted(rule.labels_template),
                                      vars_template=_budgeted(rule.vars_template),
                                      taints=rule.taints if taints else ())
                  for rule in rule_set.rules)
    return dataclasses.replace(rule_set, rules=rules)


def ignored_taints(obj: Mapping[str, Any]) -> list[str]:
    """The taints (``key=value:Effect``) an object's rules ask for, read from the raw object:
    what ``run`` without ``--enable-taints`` does not apply."""
    spec = obj.get("spec")
    rules = spec.get("rules") if isinstance(spec, Mapping) else None
    found = []
    for rule in rules if isinstance(rules, list) else ():
        for taint in (rule.get("taints") if isinstance(rule, Mapping) else None) or ():
            if isinstance(taint, Mapping):
                value = f"={taint.get('value')}" if taint.get("value") else ""
                found.append(f"{taint.get('key')}{value}:{taint.get('effect')}")
    return found


def with_cluster_rules(files: Catalogue, objects: Iterable[RuleSet], problems: Iterable[Problem] = ()) -> Catalogue:
    """The files' catalogue plus the cluster's rule sets, all in NFD order (``metadata.name``).
    An object named as a file's rule set replaces it; each override is one of the catalogue's
    warnings (after the files' own)."""
    objects = list(objects)
    file_names = {r.name: r.origin for r in files.rule_sets}
    overrides = [Problem(f"{object_origin(r.name)}:metadata.name", r.name,
                         f"overrides the rule file's NodeFeatureRule {r.name} ({file_names[r.name]}): the object is "
                         "evaluated, the file is not")
                 for r in objects if r.name in file_names]
    replaced = {p.item for p in overrides}
    ordered = sorted((*(r for r in files.rule_sets if r.name not in replaced), *objects), key=lambda r: r.name)
    return dataclasses.replace(files, rule_sets=tuple(ordered), problems=files.problems + tuple(problems),
                               warnings=files.warnings + tuple(overrides))
