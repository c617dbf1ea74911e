"""MemoryStore: the in-process store, thread-safe, with the same guarantees as every other store."""

from __future__ import annotations

import itertools
import threading
import urllib.parse

from prioritylock._errors import ConditionFailed, ConfigError
from prioritylock.stores._base import (
    NOT_MODIFIED,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    Versioned,
    validate_key,
    validate_prefix,
)
from prioritylock.stores._log import logged
from prioritylock.stores._url import redact_url

__all__ = ["MemoryStore", "store_from_url"]

# Versions come from one process-wide counter, so a key deleted and created again never gets a
# version it had before (no ABA across delete/create).
_versions = itertools.count(1)


class MemoryStore:
    """Objects in a dict behind one lock; shared by every thread of this process that holds it.

    ``open_store("memory://NAME")`` returns the same instance for the same name.
    """

    def __init__(self, name: str = "") -> None:
        self.name = name
        self._lock = threading.Lock()
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._stats = StoreStats()

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share objects."""
        return f"memory:{id(self)}"

    @property
    def stats(self) -> StoreStats:
        return self._stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(
            shared_across_processes=False, shared_across_hosts=False, conditional_delete=True
        )

    @logged("read")
    def read(self, key: str) -> Versioned | None:
        with self._lock:
            found = self._objects.get(key)
        if found is None:
            validate_key(key)  # only an absent key can be invalid (checked at its create)
        self._stats.count("reads")
        return None if found is None else Versioned(found[0], found[1])

    @logged("read_if_changed")
    def read_if_changed(self, key: str, version: str) -> ReadResult:
        with self._lock:
            found = self._objects.get(key)
        if found is None:
            validate_key(key)  # only an absent key can be invalid (checked at its create)
        self._stats.count("reads")
        if found is None:
            return None
        if found[1] == version:
            self._stats.count_not_modified()
            return NOT_MODIFIED
        return Versioned(found[0], found[1])

    @logged("create")
    def create(self, key: str, data: bytes) -> str:
        validate_key(key)
        self._stats.count("creates")
        with self._lock:
            if key in self._objects:
                raise ConditionFailed(key, "already exists")
            version = str(next(_versions))
            self._objects[key] = (bytes(data), version)
        return version

    @logged("replace")
    def replace(self, key: str, data: bytes, version: str) -> str:
        with self._lock:
            found = self._objects.get(key)
            if found is None:
                validate_key(key)  # only an absent key can be invalid (checked at its create)
            self._stats.count("replaces")
            if found is None:
                raise ConditionFailed(key, "absent")
            if found[1] != version:
                raise ConditionFailed(key, "version changed")
            new_version = str(next(_versions))
            self._objects[key] = (bytes(data), new_version)
        return new_version

    @logged("delete")
    def delete(self, key: str, version: str) -> None:
        validate_key(key)
        self._stats.count("deletes")
        with self._lock:
            found = self._objects.get(key)
            if found is None:
                raise ConditionFailed(key, "absent")
            if found[1] != version:
                raise ConditionFailed(key, "version changed")
            del self._objects[key]

    @logged("list")
    def list(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        self._stats.count("lists")
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def close(self) -> None:
        """Nothing to release; the objects stay for other holders of this instance."""

    def __repr__(self) -> str:
        return f"MemoryStore(name={self.name!r})"


_named: dict[str, MemoryStore] = {}
_named_lock = threading.Lock()


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> MemoryStore:
    """``memory://NAME``: the process-wide store called NAME; ``memory://``: a new, private one.

    :raises ConfigError: a path or options in the URL.
    """
    if parts.path not in ("", "/") or options:
        raise ConfigError(
            f"memory store URL takes only a name: memory://NAME, got {redact_url(parts.geturl())!r}"
        )
    name = parts.netloc
    if not name:
        return MemoryStore()
    with _named_lock:
        return _named.setdefault(name, MemoryStore(name))
