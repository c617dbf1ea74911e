"""What a command acts on: the store its URL names and the lock its PATH names."""

from __future__ import annotations

import argparse
import contextlib
import getpass
import os
import socket
import urllib.parse
from collections.abc import Iterator

from prioritylock._builder import LockBuilder
from prioritylock._errors import ConfigError, StoreAccessError
from prioritylock.stores import ObjectStore, open_store
from prioritylock.stores._cloud import DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT
from prioritylock.stores._registry import SCHEMES
from scopes import LockScope

__all__ = [
    "builder",
    "missing_directory",
    "opened",
    "operator",
    "public_url",
    "scope",
    "the_store",
]


def scope(path: str) -> LockScope:
    """PATH as a scope: a scope key when it starts with ``v1/``, else a lock path."""
    try:
        return LockScope.from_key(path) if path.startswith("v1/") else LockScope.path(path)
    except ValueError as exc:
        raise ConfigError(f"lock path: {exc}", option="path") from None


def public_url(url: str) -> str:
    """The URL without user-info, query or fragment: where, never how to get in."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return ""
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


@contextlib.contextmanager
def opened(url: str, *, create: bool, store_timeout: float | None = None) -> Iterator[ObjectStore]:
    """The store; commands that only look must not create a missing store directory. With
    ``store_timeout``, a network store's own request timeouts are capped by it (unless the URL
    sets them), so that no request outlives the call that waits for it."""
    if store_timeout is not None:
        url = capped(url, store_timeout)
    missing = None if create else missing_directory(url)
    if missing is not None:
        raise StoreAccessError(
            f"store directory {missing!r} does not exist: no lock was ever taken there (a lock,"
            " and its store directory, is created by its first holder)"
        )
    try:
        store = open_store(url)
    except ConfigError as exc:
        hint = _file_url(url)
        if hint is None or hint in str(exc):
            raise
        raise ConfigError(f"{exc}; did you mean {hint!r}?", option=exc.option) from None
    try:
        yield store
    finally:
        store.close()


def missing_directory(url: str) -> str | None:
    """The directory of a ``file:///`` store URL if it does not exist (else None)."""
    if not url.lower().startswith("file:"):
        return None
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return None
    path = urllib.parse.unquote(parts.path)
    # file://relative/dir names a host: open_store explains the file:/// form.
    if parts.netloc in ("", "localhost") and path.startswith("/") and path != "/":
        return None if os.path.isdir(path) else path
    return None


def capped(url: str, store_timeout: float) -> str:
    """A network store's URL with ``connect_timeout`` and ``read_timeout`` at most
    ``store_timeout`` (those the URL gives are kept)."""
    try:
        parts = urllib.parse.urlsplit(url)
        scheme = SCHEMES.get(parts.scheme.lower())
        query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return url  # open_store explains it
    if scheme is None or scheme.extra is None:
        return url  # this machine's stores (memory, a directory) have no request timeouts
    given = {name for name, _ in query}
    for name, default in (
        ("connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        ("read_timeout", DEFAULT_READ_TIMEOUT),
    ):
        if name not in given:
            query.append((name, f"{min(default, store_timeout):g}"))
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def the_store(args: argparse.Namespace) -> str:
    """What a command waits for when the store is slow to answer, in words for the user."""
    return f"the store at {public_url(args.url)} (store timeout {args.store_timeout:g} s)"


def _file_url(url: str) -> str | None:
    """``file:///var/locks`` for a store given as the bare path ``/var/locks`` (else None)."""
    path = url.split("?", 1)[0].split("#", 1)[0]
    if "://" in url or not path.startswith("/") or path.strip("/") == "":
        return None
    return "file://" + path


def builder(store: ObjectStore, lock_scope: LockScope, args: argparse.Namespace) -> LockBuilder:
    """A builder for the lock, with the options every command takes."""
    if args.store_timeout <= 0:
        raise ConfigError("--store-timeout: must be positive", option="store_timeout")
    return LockBuilder().store(store).scope(lock_scope).store_timeout(args.store_timeout)


def operator() -> str:
    """``user@host``: who an operator's override or force-unlock is recorded as."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
