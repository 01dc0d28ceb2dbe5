"""The cpu source's section of nfd-worker.conf, ``sources.cpu``, and NFD's cpuid label filter.

Kept apart from the cpu source's discovery logic: the filter decides which ``cpu.cpuid``
flags become ``cpu-cpuid.<FLAG>`` labels and nothing else (NFD ``source/cpu/cpu.go``:
``newDefaultConfig``, ``initCpuidFilter``, ``keyFilter.unmask``).  The ``cpu.cpuid`` feature
keeps every flag whatever the filter says, as in NFD.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agent.sources._config import nfd_option

#: NFD's default ``attributeBlacklist`` (source/cpu/cpu.go newDefaultConfig)
DEFAULT_CPUID_BLACKLIST = (
    "AVX10", "BMI1", "BMI2", "CLMUL", "CMOV", "CX16", "ERMS", "F16C", "HTT", "LZCNT",
    "MMX", "MMXEXT", "NX", "POPCNT", "RDRAND", "RDSEED", "RDTSCP", "SGX", "SGXLC", "SSE",
    "SSE2", "SSE3", "SSE4", "SSE42", "SSSE3", "TDX_GUEST",
)


@dataclass(frozen=True)
class Config:
    """``sources.cpu``: ``cpuid.attributeBlacklist`` / ``cpuid.attributeWhitelist`` (a
    non-empty whitelist replaces the blacklist; names are exact)."""

    cpuid_attribute_blacklist: tuple[str, ...] = nfd_option("cpuid.attributeBlacklist", DEFAULT_CPUID_BLACKLIST)
    cpuid_attribute_whitelist: tuple[str, ...] = nfd_option("cpuid.attributeWhitelist", ())

    def labelled_cpuid_flags(self, flags: Iterable[str]) -> list[str]:
        """The ``flags`` NFD's ``keyFilter.unmask`` keeps (the whitelist if any, else all but the
        blacklisted; exact names), in their order; the list checked as one set (a pass labels
        some 60 of 130 flags against the 26 names of the blacklist)."""
        if self.cpuid_attribute_whitelist:
            kept = frozenset(self.cpuid_attribute_whitelist)
            return [flag for flag in flags if flag in kept]
        dropped = frozenset(self.cpuid_attribute_blacklist)
        return [flag for flag in flags if flag not in dropped]
