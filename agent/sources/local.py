"""local source: NFD's feature files (``features.d``), read through the host seam.

Format as ``source/local/local.go``: one ``key[=value]`` a line (value defaults to
``true``), ``#`` comments, and directives ``# +expiry-time=<RFC3339>`` (until the next one),
``# +no-label`` and ``# +no-feature`` (next feature line only; such a line also deletes the
key's earlier label / feature *from the same file*).  Files are read in name
order, hidden files and anything but regular files (after links) are skipped, files over
64 KiB are refused, and a later file overrides an earlier one's key.  Labels keep the key as
written; an unprefixed key gets ``feature.node.kubernetes.io/`` as nfd-master would add.

Unlike NFD, a line whose key or value Kubernetes would reject is reported with file:line and
its label left out (NFD drops it later, at publication); its raw feature is kept as NFD keeps it.
A directory or file that could not be read (not absent: permissions, I/O) could have named any
label: both features and every label this source gives are undetermined this pass, and the
caller keeps its earlier answer.
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from agent.features import NFD_PREFIX, ElementNames, Feature, SourceError, SourceResult
from agent.hostfs import HostFileError, HostFS
from agent.k8s_validation import label_value_errors, qualified_name_errors
from agent.sources._config import STRING, agent_option

NAME = "local"
FEATURES: Mapping[str, ElementNames] = {"label": None, "feature": None}
"""The features this source can produce and their element names (``agent.features.ElementNames``)."""
LOCAL_FEATURES_DIR = "/etc/kubernetes/node-feature-discovery/features.d"
#: what an unreadable features.d or feature file decides: any feature, any label
_UNDETERMINED: Mapping[str, tuple[str, ...]] = {"label": ("*",), "feature": ()}
MAX_FEATURE_FILE_SIZE = 65536
DIRECTIVE_PREFIX = "# +"

log = logging.getLogger(__name__)

_RFC3339 = re.compile(r"^(\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_PRINTABLE_KEY = re.compile(r"^[^\s=#]+$")


@dataclass(frozen=True)
class ParsedFile:
    """One feature file's result: label and feature maps, and what was wrong (line, message)."""

    labels: dict[str, str] = field(default_factory=dict)
    features: dict[str, str] = field(default_factory=dict)
    problems: list[tuple[int, str]] = field(default_factory=list)


def parse_rfc3339(text: str) -> datetime:
    """Go's ``time.Parse(time.RFC3339, ...)``; ``ValueError`` for anything else."""
    match = _RFC3339.match(text)
    if not match:
        raise ValueError(f"not an RFC3339 time: {text[:40]!r}")
    base, fraction, zone = match.groups()
    fraction = (fraction or "")[:7]  # Python keeps microseconds
    zone = "+00:00" if zone in ("Z", "z") else zone
    return datetime.fromisoformat(base.replace("t", "T") + fraction + zone)


def label_key(key: str) -> str:
    """The Node label a feature-file key becomes (nfd-master adds the NFD namespace)."""
    return key if "/" in key else NFD_PREFIX + key


def parse_feature_file(text: str, now: datetime) -> ParsedFile:
    """Pure parse of one file's text at time ``now`` (timezone-aware), as NFD's
    ``parseFeatureFile``: a ``+no-label`` / ``+no-feature`` line also *deletes* an earlier
    label / feature of the same key from this file (NFD's ``delete(labels, key)``), and an
    expired line is skipped before the one-line directives are reset, so a ``+no-label``
    above an expired line carries on to the next live one, exactly as NFD does."""
    result = ParsedFile()
    expiry: datetime | None = None
    skip_label = skip_feature = False
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if not line.startswith(DIRECTIVE_PREFIX):
                continue
            name, has_value, value = line[len(DIRECTIVE_PREFIX):].partition("=")
            if name == "no-label":
                skip_label = True
            elif name == "no-feature":
                skip_feature = True
            elif name == "expiry-time":
                try:
                    if not has_value:
                        raise ValueError("expiry-time needs =<RFC3339 time>")
                    expiry = parse_rfc3339(value.strip())
                except ValueError as exc:
                    result.problems.append((number, f"bad expiry-time directive: {exc}"))
            else:
                result.problems.append((number, f"unknown directive {name!r} ignored"))
            continue
        if expiry is not None and expiry < now:
            continue  # NFD: before the directives are reset (see docstring)
        _apply_line(result, number, line, skip_label=skip_label, skip_feature=skip_feature)
        skip_label = skip_feature = False  # a directive covers the next feature line only
    return result


def _apply_line(result: ParsedFile, number: int, line: str, *, skip_label: bool, skip_feature: bool) -> None:
    """One ``key[=value]`` line into ``result``; a skipped kind deletes the key's earlier entry."""
    key, has_value, value = line.partition("=")
    value = value if has_value else "true"
    feature_problem = "" if skip_feature else _feature_problem(key, value)
    label_problem = "" if skip_label else _label_problem(key, value)
    if label_problem or feature_problem:  # one report a line; the label's says more
        result.problems.append((number, label_problem or feature_problem))
    if skip_feature:
        result.features.pop(key, None)
    elif not feature_problem:
        result.features[key] = value
    if skip_label:
        result.labels.pop(key, None)
    elif not label_problem:
        result.labels[key] = value


def _label_problem(key: str, value: str) -> str:
    reasons = qualified_name_errors(label_key(key)) + label_value_errors(value)
    return f"{key[:60]!r}={value[:60]!r} is not a valid label: {'; '.join(reasons)}" if reasons else ""


def _feature_problem(key: str, value: str) -> str:
    if not _PRINTABLE_KEY.match(key) or not key.isprintable() or not value.isprintable():
        return f"{key[:60]!r} is not a usable feature key/value"
    return ""


@dataclass(frozen=True)
class Config:
    """NFD's local source has an empty section; where the files are is our addition
    (``nodeFeatureAgent.sources.local.featuresDir``; NFD hard-codes the same default)."""

    features_dir: str = agent_option("featuresDir", LOCAL_FEATURES_DIR, STRING)


def discover(host: HostFS, config: Config = Config(), now: datetime | None = None) -> SourceResult:
    now = now or datetime.now(UTC)
    directory = config.features_dir
    errors: list[SourceError] = []
    labels: dict[str, str] = {}
    features: dict[str, str] = {}
    label_origins: dict[str, str] = {}
    element_origins: dict[str, str] = {}
    try:
        names = host.listdir(directory)
    except HostFileError as exc:
        return SourceResult(NAME, errors=(SourceError(NAME, directory, f"unlistable: {exc.reason}"),),
                            undetermined=_UNDETERMINED)
    unread = False
    for name in names:
        path = posixpath.join(directory, name)
        try:
            text = _feature_file(host, path, errors) if not name.startswith(".") else None
        except HostFileError as exc:
            errors.append(SourceError(NAME, path, f"unreadable: {exc.reason}"))
            unread = True
            continue
        if text is None:
            continue
        parsed = parse_feature_file(text, now)
        errors += [SourceError(NAME, f"{path}:{line}", message) for line, message in parsed.problems]
        for key, value in parsed.labels.items():
            if key in labels and labels[key] != value:
                log.info("local: %s overrides %s=%s with %s", path, key, labels[key], value)
            labels[key] = value
            label_origins[label_key(key)] = path
        for key, value in parsed.features.items():
            features[key] = value
            element_origins[key] = path
    node_labels = {label_key(k): v for k, v in labels.items()}
    return SourceResult(NAME, _features(directory, labels, label_origins, features, element_origins), node_labels,
                        errors, label_origins, _UNDETERMINED if unread else {})


def _features(directory: str, labels: dict[str, str], label_origins: dict[str, str], features: dict[str, str],
              element_origins: dict[str, str]) -> dict[str, Feature]:
    """``local.label`` and ``local.feature``, each where the files gave any."""
    found: dict[str, Feature] = {}
    if labels:
        found["label"] = Feature(attributes=labels, origin=directory,
                                 element_origins={k: label_origins[label_key(k)] for k in labels})
    if features:
        found["feature"] = Feature(attributes=features, origin=directory, element_origins=element_origins)
    return found


def _feature_file(host: HostFS, path: str, errors: list[SourceError]) -> str | None:
    """The feature file's text; ``None`` when it is no regular file (after links), unusable
    (with an error) or gone since it was listed; ``HostFileError`` when it could not be read."""
    if not host.is_file(path):
        log.info("local: %s is not a regular file; skipped", path)
        return None
    try:
        data = host.read_bytes(path, MAX_FEATURE_FILE_SIZE + 1)
    except HostFileError as exc:
        if exc.missing:  # a file deleted between listing and reading is simply gone
            return None
        raise
    if len(data) > MAX_FEATURE_FILE_SIZE:
        errors.append(SourceError(NAME, path, f"larger than {MAX_FEATURE_FILE_SIZE} bytes; file skipped"))
        return None
    if b"\x00" in data:
        errors.append(SourceError(NAME, path, "binary content (NUL byte); file skipped"))
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        errors.append(SourceError(NAME, path, f"not UTF-8 text ({exc.reason} at byte {exc.start}); file skipped"))
        return None
