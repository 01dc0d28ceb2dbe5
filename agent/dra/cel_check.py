"""Check the DeviceClasses' CEL selectors before they reach a cluster (``validate``).

Each selector must compile, and must select a device of its own class that this driver
publishes and no device of another class or driver. The devices are built as the slice writer
builds them (``agent.dra.slices.device_attributes``), so a selector that names an attribute the
writer does not publish fails here, not as a class that silently matches nothing.

Why cel-python: it is the one pure-Python CEL implementation on PyPI, and the tests already use
it for the admission policies. It implements CEL's core language, not Kubernetes' extension
libraries (``semver()``, ``quantity()``), which the generated selectors do not use; a selector
that needs them is reported as not compiling. It needs a newer google-re2 than 32-bit Arm can
install (pyproject), so it is not installed there: ``available()`` is False and ``validate``
says the CEL was not checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.deviceplugin.model import PluginDevice
from agent.dra.names import DRIVER
from agent.dra.slices import device_attributes


def available() -> bool:
    try:
        import celpy  # noqa: F401
    except ImportError:
        return False
    return True


def _device(resource: str, driver: str = DRIVER) -> Any:
    """A published device of ``resource`` as the CEL environment sees it: ``device.driver`` and
    ``device.attributes[<domain>].<name>`` (names without a domain are the driver's)."""
    from celpy.adapter import json_to_cel

    sample = PluginDevice("pci-0000:01:00.0", numa_node=0,
                          attributes=(("address", "0000:01:00.0"), ("bus", "pci"), ("pcie_root", "pci0000:00")))
    domains: dict[str, dict[str, Any]] = {}
    for name, value in device_attributes(resource, sample, 0).items():
        domain, _, ident = name.rpartition("/")
        domains.setdefault(domain or driver, {})[ident] = next(iter(value.values()))
    return json_to_cel({"driver": driver, "attributes": domains})


def _selects(program: Any, device: Any) -> bool:
    from celpy.evaluation import CELEvalError

    try:
        return bool(program.evaluate({"device": device}))
    except CELEvalError:  # a missing attribute: the class does not select this device
        return False


def _expression(selector: Any) -> str | None:
    cel = selector.get("cel") if isinstance(selector, Mapping) else None
    expression = cel.get("expression") if isinstance(cel, Mapping) else None
    return expression if isinstance(expression, str) and expression.strip() else None


def _check(env: Any, name: str, index: int, expression: str, resource: str, resources: list[str]) -> list[str]:
    """One selector: it compiles, selects its own class's device, and nothing else."""
    try:
        program = env.program(env.compile(expression))
    except Exception as exc:  # noqa: BLE001 - CELParseError, or the library failing on odd input
        return [f"{name}: selectors[{index}] does not compile: {exc}"]
    found = []
    if resource and not _selects(program, _device(resource)):
        found.append(f"{name}: selectors[{index}] does not select a {resource} device this driver publishes")
    others = [(r, DRIVER) for r in resources if r and r != resource]
    if resource:
        others.append((resource, "other.example.com"))
    for other, driver in others:
        if _selects(program, _device(other, driver)):
            found.append(f"{name}: selectors[{index}] also selects {other} devices of driver {driver}")
    return found


def problems(classes: Iterable[Mapping[str, Any]], known: Mapping[str, str] | None = None) -> list[str]:
    """``<class>: <why>`` for every selector that does not compile or selects the wrong devices.

    A class's resource is its ``extendedResourceName``, or (a ``v1beta1`` class has none) the
    resource ``known`` maps its name to (``agent.dra.classes.class_name``); a class with
    neither is only checked for what it must not select."""
    import celpy

    classes = list(classes)
    known = known or {}
    resources = [str((c.get("spec") or {}).get("extendedResourceName")
                     or known.get(str((c.get("metadata") or {}).get("name")), "")) for c in classes]
    found: list[str] = []
    env = celpy.Environment()
    for device_class, resource in zip(classes, resources, strict=True):
        name = (device_class.get("metadata") or {}).get("name", "?")
        for index, selector in enumerate((device_class.get("spec") or {}).get("selectors") or []):
            expression = _expression(selector)
            if expression is None:
                found.append(f"{name}: selectors[{index}].cel.expression is not a non-empty string")
            else:
                found += _check(env, name, index, expression, resource, resources)
    return found
