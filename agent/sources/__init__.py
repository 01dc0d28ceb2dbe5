"""Discovery sources, one module each, all with the same tiny shape.

Each module ``agent/sources/<name>.py`` defines ``NAME``, its own ``Config`` (a frozen
dataclass with its defaults: its section of nfd-worker.conf, see ``_config``) and
``discover(host: HostFS, config: Config = Config()) -> SourceResult``.  A source never
imports the runner (``agent.discovery``); the runner hands each source its section.  A source reads the host
only through the seam, never calls Kubernetes, and reports what it could not read as
``SourceError`` entries instead of raising.
"""

SOURCE_NAMES = (
    "cpu",
    "devicetree",
    "kernel",
    "local",
    "memory",
    "network",
    "pci",
    "storage",
    "system",
    "usb",
)
"""Every source, in NFD's order (sorted by name); ``--sources`` picks a subset."""


def feature_vocabulary() -> dict[str, "frozenset[str] | None"]:
    """Every feature a source can produce, ``<source>.<feature>`` -> its element names (each
    source's ``FEATURES``; ``None``: an open set)."""
    import importlib

    vocabulary: dict[str, frozenset[str] | None] = {}
    for name in SOURCE_NAMES:
        module = importlib.import_module(f"agent.sources.{name}")
        for feature, elements in module.FEATURES.items():
            vocabulary[f"{name}.{feature}"] = elements
    return vocabulary
