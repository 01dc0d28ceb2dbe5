"""``explain``: why a label, extended resource, annotation or taint is (or is not) desired.

Names the rule or label file (file:line), the expression that matched, the feature instance
and the host file that supplied the value; for an absent item, the condition that failed.
Exit status: 0 when every argument was explained, 1 when some name is produced by nothing in
the catalogue, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from agent.commands.plan import add_plan_arguments, compute
from agent.config import rule_options
from agent.features import NFD_PREFIX
from agent.sources.cpu_config import DEFAULT_CPUID_BLACKLIST

HELP = "explain where a label / extended resource / taint comes from (file:line, expression, feature instance, host file) or why it is absent"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="+", metavar="LABEL_OR_RESOURCE", help="label key, extended resource name, annotation key or taint key")
    add_plan_arguments(parser)
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")


def hidden_cpuid_label(args: argparse.Namespace, features: Mapping[str, Any], name: str) -> str | None:
    """The setting that hides raw label ``name`` when it is ``cpu-cpuid.<FLAG>`` of a flag
    discovery found: NFD's cpuid label filter (``source/cpu/cpu.go`` ``keyFilter``), the
    ``cpu.cpuid`` feature keeping every flag."""
    from agent.config import discovery_config
    from agent.sources import cpu

    base = name.removeprefix(NFD_PREFIX)
    flag = base.removeprefix("cpu-cpuid.")
    cpuid = features.get("cpu.cpuid")
    if base == flag or cpuid is None or flag not in cpuid.flags:
        return None
    config = discovery_config(args).section("cpu", cpu)
    if config.labelled_cpuid_flags([flag]):
        return None
    if config.cpuid_attribute_whitelist:
        return (f"sources.cpu.cpuid.attributeWhitelist, which does not list {flag} (a non-empty whitelist "
                "replaces the blacklist); the cpu.cpuid feature still has it for rules")
    default = " (NFD's default)" if flag in DEFAULT_CPUID_BLACKLIST else ""
    return (f"sources.cpu.cpuid.attributeBlacklist{default}, which lists {flag}; the cpu.cpuid feature still has "
            f"it for rules (match cpu.cpuid {flag}: {{op: Exists}})")


def with_devices(args: argparse.Namespace, claims: Mapping[str, Any], explanation: Any) -> Any:
    """For a resource the catalogue declares ``devices:`` for: the devices the device plugin
    (and DRA) would serve on this host, their nodes, what each ID is built from, and the /dev
    matches refused or left unread."""
    claim = claims.get(explanation.target)
    if claim is None:
        return explanation
    import dataclasses

    from agent.deviceplugin.resolve import resolve_claim
    from agent.hostfs import HostFS

    resolved = resolve_claim(HostFS(args.host_root), claim)
    lines = [f"  devices:    {len(resolved.devices)} (with --device-plugin=on or DRA; {resolved.origin})"]
    for device in resolved.devices:
        nodes = " ".join(n.host_path if n.host_path == n.container_path else f"{n.host_path} as {n.container_path}"
                         for n in device.nodes) or "-"
        state = f"Unhealthy: {device.why}" if device.why else "Healthy"
        shared = f", shared {resolved.shares} ways" if resolved.shares > 1 else ""
        lines.append(f"    {device.id}  {state}{shared}  {nodes}")
        lines.append(f"      ID from {device.id_basis}")
    lines += [f"    refused: {note}" for note in resolved.notes]
    if resolved.undetermined:
        lines.append(f"    undetermined, held: {resolved.undetermined}")
    return dataclasses.replace(explanation, lines=(*explanation.lines, *lines))


def run(args: argparse.Namespace) -> int:
    from agent.rules.explain import explain

    result, _ = compute(args)
    options = rule_options(args)
    explanations = [with_devices(args, result.state.device_claims,
                                 explain(result, name, options, hidden_cpuid_label(args, result.features, name)))
                    for name in args.names]
    dra = {name: dra_lines(args, result.state, name) for name in args.names if name in result.state.device_claims}
    if args.format == "json":
        json.dump([{"name": e.target, "present": e.present, "known": e.known, "lines": list(e.lines),
                    **({"dra": dra[e.target]} if e.target in dra else {})} for e in explanations],
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print("\n\n".join(e.text() + ("\n" + "\n".join(dra[e.target]) if e.target in dra else "")
                          for e in explanations))
    return 0 if all(e.known for e in explanations) else 1


def dra_lines(args: argparse.Namespace, state: Any, resource: str) -> list[str]:
    """In DRA mode (``run --dra``): each device's DRA name, its DeviceClass and the slice of this
    node's pool it is in (as the writer splits them), or why it is left out."""
    from agent.deviceplugin.resolve import resolve_claims
    from agent.dra.classes import class_name
    from agent.dra.names import DRIVER
    from agent.dra.slices import chunks, dropped_text, published_devices
    from agent.hostfs import HostFS

    resolved = resolve_claims(HostFS(args.host_root), state.device_claims)
    lines = [f"  DRA (run --dra): DeviceClass {class_name(resource)}, driver {DRIVER}, pool = the node's name"]
    for taints, api in ((False, "without device taints (before 1.36)"), (True, "with device taints (1.36+)")):
        published = published_devices(resolved, taints=taints)
        slices = chunks(published.devices)
        lines.append(f"    {api}: {len(slices)} slice(s)")
        for index, chunk in enumerate(slices):
            for device in chunk:
                if published.where.get(device["name"]) == resource:
                    taint = " (tainted not-ready)" if device.get("taints") else ""
                    lost = published.dropped.get(device["name"])
                    without = f"; without attribute(s) {dropped_text(lost)}" if lost else ""
                    lines.append(f"      {device['name']}: slice {index + 1} of {len(slices)}{taint}{without}")
        for name, why in sorted(published.left_out.items()):
            if published.where.get(name) == resource:
                lines.append(f"      {name}: left out: {why}")
    state = resolved.get(resource)
    if state is not None and state.shares > 1 and state.devices:
        one = published_devices({resource: state}, taints=True, consumable=True)
        lines.append(f"    shared {state.shares} ways: where the API server has consumable capacity (1.36+) one "
                     f"device each, allowMultipleAllocations and capacity shares={state.shares} ("
                     + ", ".join(d["name"] for d in one.devices) + "); elsewhere the replicas above")
    return lines
