"""Discovery sources, one module each, all with the same tiny shape.

Each module ``agent/sources/<name>.py`` defines ``NAME`` and
``discover(host: HostFS, config: DiscoveryConfig) -> SourceResult``.  A source reads the host
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
