"""Image references parsed as container runtimes parse them.

Parsing is docker-image-py's (PyPI ``docker-image-py``, a port of
github.com/distribution/reference, the package containerd, CRI-O's containers/image and the
Docker CLI all use): ``Reference.parse_normalized_named`` is distribution's
``ParseNormalizedNamed`` (default registry ``docker.io``, ``library/`` for one-component
names, ``index.docker.io`` folded into ``docker.io``, ports, IPv6 hosts, 64-hex names
refused). It was chosen over a parser of our own because the grammar has many corners
(separators, uppercase domains, digest algorithms) that its test cases pin; our tests run
distribution's own ``normalize_test.go`` and ``reference_test.go`` cases through it.

On top of the grammar, what the runtimes do before they pull: a reference with neither tag nor
digest gets ``:latest`` (distribution ``TagNameOnly``), and one with a digest is fetched by
the digest alone, its tag ignored (containerd's CRI ``ParseDockerRef`` drops it), since the
digest is what the node will pull. Docker Hub's API host is ``registry-1.docker.io``.
"""

from __future__ import annotations

from dataclasses import dataclass

from docker_image import reference as _distribution  # type: ignore[import-untyped]

from agent.images.errors import InvalidReferenceError

DEFAULT_DOMAIN = "docker.io"
DOCKER_HUB_API_HOST = "registry-1.docker.io"
DEFAULT_TAG = "latest"


@dataclass(frozen=True)
class ImageReference:
    """A parsed reference: ``domain`` (``docker.io``, ``127.0.0.1:5000``), ``repository``
    (``library/nginx``), ``tag`` ("" when a digest names the image), ``digest`` ("" when not
    given)."""

    domain: str
    repository: str
    tag: str
    digest: str

    @property
    def name(self) -> str:
        """``domain/repository``: the string kubelet's keyring matches credentials against."""
        return f"{self.domain}/{self.repository}"

    @property
    def api_host(self) -> str:
        """The host:port the registry API is reached at."""
        return DOCKER_HUB_API_HOST if self.domain == DEFAULT_DOMAIN else self.domain

    def __str__(self) -> str:
        """The canonical form: ``docker.io/library/nginx:latest`` or ``...@sha256:...``."""
        return f"{self.name}@{self.digest}" if self.digest else f"{self.name}:{self.tag}"


def parse_reference(text: str) -> ImageReference:
    """Parse ``text`` as a runtime does; :class:`InvalidReferenceError` quotes the grammar's
    complaint when it is not a reference."""
    if not text or text != text.strip():
        raise InvalidReferenceError(repr(text), "invalid reference format")
    try:
        named = _distribution.Reference.parse_normalized_named(text)
    except Exception as exc:  # the library raises its own InvalidReference and subclasses of Exception
        raise InvalidReferenceError(text, str(exc) or "invalid reference format") from exc
    domain, path = str(named.domain()), str(named.path())
    digest = str(named["digest"] or "")
    tag = "" if digest else str(named["tag"] or DEFAULT_TAG)
    return ImageReference(domain=domain, repository=path, tag=tag, digest=digest)
