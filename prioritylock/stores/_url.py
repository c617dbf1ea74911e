"""open_store(url): one place that turns a store URL into a store."""

from __future__ import annotations

import difflib
import os
import re
import urllib.parse

from prioritylock._errors import ConfigError
from prioritylock.stores._base import ObjectStore
from prioritylock.stores._registry import SCHEMES

__all__ = ["open_store", "redact_url"]


def open_store(url: str) -> ObjectStore:
    """Open the store a URL names.

    - ``memory://NAME``: the process-wide in-memory store called NAME (``memory://`` alone: a new,
      private one).
    - ``file:///ABSOLUTE/PATH[?durable=false]``: a :class:`LocalStore` in that directory
      (created if missing); ``durable=false`` skips fsync (see :class:`LocalStore`).
    - ``s3://bucket/prefix?endpoint=...&region=...``, ``gs://bucket/prefix``,
      ``az://container/prefix?account=...``: the cloud stores (optional extras).

    :raises ConfigError: malformed URL (a bare path among them: use ``file:///ABSOLUTE/PATH``),
        unknown scheme, or a missing optional dependency.
    """
    if not isinstance(url, str) or not url.strip():
        shown = repr(url) if not isinstance(url, str) else "an empty string"
        raise ConfigError(f"store URL must be a non-empty string, got {shown}")
    if "://" not in url:
        raise ConfigError(_no_scheme(url))
    try:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    except ValueError as exc:
        raise ConfigError(f"malformed store URL {redact_url(url)!r}: {exc}") from None
    options: dict[str, str] = {}
    for name, values in query.items():
        if len(values) != 1:
            raise ConfigError(f"store URL option {name!r} is given {len(values)} times")
        options[name] = values[0]
    scheme = parts.scheme.lower()
    if not scheme:
        raise ConfigError(f"store URL {redact_url(url)!r} has no scheme; use {_known()}")
    if scheme not in SCHEMES:
        near = _nearest(scheme)
        meant = None if near is None else redact_url(f"{near}:{url.partition(':')[2]}")
        hint = "use" if meant is None else f"did you mean {meant!r}? Stores:"
        raise ConfigError(
            f"unknown store URL scheme {parts.scheme!r} in {redact_url(url)!r}; {hint} {_known()}"
        )
    return SCHEMES[scheme].opener(scheme)(parts, options)


def _known() -> str:
    return ", ".join(f"{scheme}://" for scheme in SCHEMES)


#: A known scheme's near-misses that difflib would not find.
_ALIASES = {"s3a": "s3", "s3n": "s3", "gcs": "gs"}

#: ``file:/tmp/x``, ``memory:x``, ``s3//bucket``: a scheme-like head, then ``:`` or ``//``.
_HEAD = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)(:/*|//)(.*)", re.DOTALL)


def _nearest(scheme: str) -> str | None:
    """The known scheme a typed one (lower case) is a near-miss of, if any."""
    if scheme in SCHEMES:
        return scheme
    if scheme in _ALIASES:
        return _ALIASES[scheme]
    close = difflib.get_close_matches(scheme, SCHEMES, n=1, cutoff=0.75)
    return close[0] if close else None


def _meant(url: str) -> str | None:
    """The store URL a URL with a mistyped ``://`` means (``file:/tmp/x``: ``file:///tmp/x``)."""
    found = _HEAD.fullmatch(url)
    if found is None:
        return None
    head, sep, rest = found.groups()
    scheme = _nearest(head.lower())
    if scheme is None:
        return None
    if scheme != "file":
        return f"{scheme}://{rest.lstrip('/')}"
    if sep == ":":  # file:locks: a path relative to the working directory
        return file_url(rest) if rest else None
    return "file:///" + rest.lstrip("/")


def _plain(url: str) -> bool:
    """Safe to repeat: nothing that may be a password, token or query."""
    return not any(mark in url for mark in "@?#") and all(ord(ch) >= 32 for ch in url)


def _no_scheme(url: str) -> str:
    """What to say of a URL without a scheme: a bare path gets the file URL it may mean, a
    mistyped ``://`` (``file:/tmp/x``, ``s3//bucket``) the URL it may mean."""
    meant = _meant(url)
    if meant is not None:
        shown = repr(url) if _plain(url) else "<a URL without '://'>"
        return (
            f"store URL {shown} has no '://' after its scheme: did you mean"
            f" {redact_url(meant)!r}? Stores: {_known()}"
        )
    if any(mark in url for mark in "@?#:") or any(ord(ch) < 32 for ch in url):
        # Not a plain path, and it may hold a secret: don't repeat it.
        return f"store URL {redact_url(url)!r} has no scheme; use {_known()}"
    return (
        f"store {url!r} is a path, not a URL (it has no scheme): for that directory use"
        f" {file_url(url)!r}; other stores: {_known()}"
    )


def file_url(path: str) -> str:
    """``file:///ABSOLUTE/PATH`` for a directory path (relative to the working directory)."""
    return "file://" + urllib.parse.quote(os.path.abspath(path))


def redact_url(url: str) -> str:
    """The URL with any user-info and query values hidden (they may hold credentials)."""
    if "://" not in url:
        return "<a URL without a scheme>"
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc.rsplit("@", 1)[-1]
    if "@" in parts.netloc:
        netloc = "***@" + netloc
    query = "&".join(f"{k}=***" for k in urllib.parse.parse_qs(parts.query, keep_blank_values=True))
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, ""))
