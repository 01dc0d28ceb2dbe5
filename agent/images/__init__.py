"""Which platforms (os/architecture/variant) an image can run on, asked of its registry.

A library with no knowledge of pods or of Kubernetes: it takes an image reference and the
*contents* of pull secrets, and answers with the platforms the registry states for the image.
Its public face is this module; everything else in the package is internal.

    from agent.images import Keyring, Resolver, parse_dockerconfigjson
    resolver = Resolver()                      # one per process; thread-safe
    keyring = Keyring([parse_dockerconfigjson(secret_bytes)])
    answer = resolver.resolve("nginx:1.27", keyring, pull_always=False)
    answer.platforms  # (Platform("linux", "amd64"), Platform("linux", "arm64", "v8"), ...)

Errors are :class:`ImageError` subclasses, each one line quoting the registry's own words,
with ``transient`` telling whether asking again later may help.
"""

from agent.images.counters import CounterSnapshot
from agent.images.credentials import (
                                      Credential,
                                      Keyring,
                                      PullSecretError,
                                      parse_dockercfg,
                                      parse_dockerconfigjson,
                                      parse_pull_secret,
)
from agent.images.errors import (
                                      ImageError,
                                      InvalidManifestError,
                                      InvalidReferenceError,
                                      NotFoundError,
                                      PlainHttpRegistryError,
                                      RateLimitedError,
                                      RegistryError,
                                      RegistryUnavailableError,
                                      UnauthorizedError,
)
from agent.images.platforms import ImagePlatforms, Platform, SkippedEntry
from agent.images.reference import ImageReference, parse_reference
from agent.images.resolver import Resolver, ResolverConfig

__all__ = [
    "CounterSnapshot", "Credential", "ImageError", "ImagePlatforms", "ImageReference", "InvalidManifestError",
    "InvalidReferenceError", "Keyring", "NotFoundError", "PlainHttpRegistryError", "Platform", "PullSecretError", "RateLimitedError",
    "RegistryError", "RegistryUnavailableError", "Resolver", "ResolverConfig", "SkippedEntry", "UnauthorizedError",
    "parse_dockercfg", "parse_dockerconfigjson", "parse_pull_secret", "parse_reference",
]
