"""The errors the resolver raises: one base class, each kind with the registry's own words.

A caller (the placement controller, ``explain-image``) needs three things from an error:
whose fault it is (the reference, the registry, the network), whether asking again later can
help (:attr:`ImageError.transient`), and the one line to show a user. A registry's own error
(``MANIFEST_UNKNOWN: manifest unknown``, a token server's body) is kept verbatim in
:attr:`RegistryError.registry_message` and quoted in the message, so an Event or a terminal
line says what the registry said, not our paraphrase of it.
"""

from __future__ import annotations


class ImageError(Exception):
    """Base class: the platforms of ``reference`` could not be determined.

    ``str(error)`` is one line naming the reference and the reason. ``transient`` is True when
    the same question may succeed later unchanged (timeouts, refused connections, 5xx, 429);
    False when only a change of reference, credentials or registry content can help.
    """

    transient: bool = False

    def __init__(self, reference: str, message: str) -> None:
        super().__init__(f"{reference}: {message}")
        self.reference = reference
        self.reason = message


class InvalidReferenceError(ImageError):
    """The reference is not a valid image reference (the distribution reference grammar)."""


class RegistryError(ImageError):
    """The registry answered with an HTTP error status.

    ``status`` is the HTTP status, ``host`` the registry (or token server) that answered,
    ``registry_message`` its own error text (the ``errors[].code``/``message`` of a
    distribution error body, or the first line of another body; empty when it gave none).
    """

    def __init__(self, reference: str, host: str, status: int, registry_message: str) -> None:
        said = f": {registry_message}" if registry_message else ""
        super().__init__(reference, f"registry {host} answered HTTP {status}{said}")
        self.host = host
        self.status = status
        self.registry_message = registry_message
        self.transient = status == 429 or status >= 500


class UnauthorizedError(RegistryError):
    """401 or 403 after the credentials (or anonymous access) were tried: not retried."""


class NotFoundError(RegistryError):
    """404: the repository, tag or digest is not in the registry: not retried."""


class RateLimitedError(RegistryError):
    """429 again after honouring ``Retry-After`` once (or a wait longer than the time bound)."""


class RegistryUnavailableError(ImageError):
    """No answer: connection refused, TLS failure, timeout, or the time bound ran out."""

    transient = True


class PlainHttpRegistryError(RegistryUnavailableError):
    """The registry answered a TLS handshake in plain HTTP: it is reached over HTTPS because no
    ``--insecure-registry`` entry names it. Not transient: only that flag (or the registry's
    configuration) changes the answer."""

    transient = False


class InvalidManifestError(ImageError):
    """The registry answered, but with something unusable: a body whose sha256 is not its
    digest, over a size or entry cap, not JSON, an unknown media type, or an image whose
    platform has no os or architecture (never read as "any platform")."""
