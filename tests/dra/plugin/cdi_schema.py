"""Validate a CDI spec against the recorded CDI JSON schema (tests/data/cdi/README.md), plus
the name rules SPEC.md states in prose (the schema leaves them out): ``kind`` is
``vendor/class`` with a DNS-subdomain vendor and a class of at most 63 of ``[A-Za-z0-9_.-]``
starting and ending alphanumeric; a device name starts and ends alphanumeric with
``[A-Za-z0-9_.:-]`` between."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

HERE = Path(__file__).resolve().parents[2] / "data" / "cdi"
_VENDOR = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_CLASS = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")


def _validator() -> jsonschema.Draft7Validator:
    defs = json.loads((HERE / "defs.json").read_text())
    registry = Registry().with_resource("defs.json", Resource.from_contents(defs, default_specification=DRAFT7))
    return jsonschema.Draft7Validator(json.loads((HERE / "schema.json").read_text()), registry=registry)


def problems(spec: dict) -> list[str]:
    found = [e.message for e in _validator().iter_errors(spec)]
    vendor, _, klass = str(spec.get("kind", "")).partition("/")
    if not (_VENDOR.fullmatch(vendor) and len(vendor) <= 253 and _CLASS.fullmatch(klass)):
        found.append(f"kind {spec.get('kind')!r} is not vendor/class")
    found += [f"device name {d.get('name')!r}" for d in spec.get("devices", []) if not _NAME.fullmatch(d.get("name", ""))]
    return found
