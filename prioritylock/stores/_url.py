"""open_store(url): one place that turns a store URL into a store."""

from __future__ import annotations

import importlib
import threading
import urllib.parse
from typing import Protocol

from prioritylock._errors import ConfigError
from prioritylock.stores._base import ObjectStore
from prioritylock.stores._local import LocalStore
from prioritylock.stores._memory import MemoryStore

__all__ = ["open_store"]

_named_memory: dict[str, MemoryStore] = {}
_named_lock = threading.Lock()

# scheme -> (module, extra) for the stores whose SDK is optional.
_CLOUD = {
    "s3": ("prioritylock.stores._s3", "s3"),
    "gs": ("prioritylock.stores._gcs", "gcs"),
    "az": ("prioritylock.stores._azure", "azure"),
}


class _FromUrl(Protocol):
    def __call__(self, url: urllib.parse.SplitResult, options: dict[str, str]) -> ObjectStore: ...


def open_store(url: str) -> ObjectStore:
    """Open the store a URL names.

    - ``memory://NAME``: the process-wide in-memory store called NAME (``memory://`` alone: a new,
      private one).
    - ``file:///ABSOLUTE/PATH[?durable=false]``: a :class:`LocalStore` in that directory
      (created if missing); ``durable=false`` skips fsync (see :class:`LocalStore`).
    - ``s3://bucket/prefix?endpoint=...&region=...``, ``gs://bucket/prefix``,
      ``az://container/prefix?account=...``: the cloud stores (optional extras).

    :raises ConfigError: malformed URL, unknown scheme, or a missing optional dependency.
    """
    if not isinstance(url, str) or not url.strip():
        shown = repr(url) if not isinstance(url, str) else "an empty string"
        raise ConfigError(f"store URL must be a non-empty string, got {shown}")
    try:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    except ValueError as exc:
        raise ConfigError(f"malformed store URL {_redact(url)!r}: {exc}") from exc
    options: dict[str, str] = {}
    for name, values in query.items():
        if len(values) != 1:
            raise ConfigError(f"store URL option {name!r} is given {len(values)} times")
        options[name] = values[0]
    scheme = parts.scheme.lower()
    if not scheme or "://" not in url:
        raise ConfigError(
            f"store URL {_redact(url)!r} has no scheme; use memory://, file://, s3://, gs:// or az://"
        )
    if scheme == "memory":
        if parts.path not in ("", "/") or options:
            raise ConfigError(
                f"memory store URL takes only a name: memory://NAME, got {_redact(url)!r}"
            )
        name = parts.netloc
        if not name:
            return MemoryStore()
        with _named_lock:
            return _named_memory.setdefault(name, MemoryStore(name))
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ConfigError(
                f"file store URL must be file:///ABSOLUTE/PATH (no host), got {_redact(url)!r}"
            )
        path = urllib.parse.unquote(parts.path)
        if not path.startswith("/") or path == "/":
            raise ConfigError(
                f"file store URL needs an absolute directory path, got {_redact(url)!r}"
            )
        durable = options.pop("durable", "true").lower()
        if durable not in ("true", "false"):
            raise ConfigError("file store URL option durable must be true or false")
        if options:
            raise ConfigError(
                f"file store URL takes only the option durable, got {sorted(options)}"
            )
        return LocalStore(path, durable=durable == "true")
    if scheme in _CLOUD:
        module_name, extra = _CLOUD[scheme]
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"{scheme}:// stores need an optional dependency: "
                f"pip install 'prioritylock[{extra}]' ({exc})"
            ) from exc
        from_url: _FromUrl = module.store_from_url
        return from_url(parts, options)
    raise ConfigError(
        f"unknown store URL scheme {parts.scheme!r} in {_redact(url)!r}; "
        "use memory://, file://, s3://, gs:// or az://"
    )


def _redact(url: str) -> str:
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
