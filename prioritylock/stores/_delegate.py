"""DelegatingStore: a store that forwards the whole seam to another, for wrappers to build on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from prioritylock.stores._base import (
    NOT_MODIFIED,
    ConditionalReader,
    ObjectStore,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    UnsyncedWriter,
    Versioned,
)

__all__ = ["DelegatingStore"]

_T = TypeVar("_T")


class DelegatingStore:
    """Forwards every request to ``inner``: a wrapper overrides :meth:`_forward` (or a method).

    Each request goes through ``_forward(op, key, call)``, where ``op`` is the method's name
    (``read``, ``read_if_changed``, ``create``, ``replace``, ``replace_unsynced``, ``delete`` or
    ``list``), ``key`` the key (the prefix for ``list``) and ``call()`` sends it to ``inner``.
    So a wrapper that times, counts or fails requests is one method::

        class TimedStore(DelegatingStore):
            def _forward(self, op, key, call):
                started = time.perf_counter()
                try:
                    return call()
                finally:
                    self.durations.append(time.perf_counter() - started)

    ``stats``, ``capabilities`` and ``namespace`` are the inner store's, so a lock on the wrapper
    behaves as on the store. ``read_if_changed`` is always offered (the inner store's, or a read
    and a comparison: one request either way); ``replace_unsynced`` only when the inner store
    has it (:class:`~prioritylock.stores.UnsyncedWriter`), so the lock syncs what it would sync.

    An :class:`~prioritylock.AsyncLock` on a wrapper makes every request through ``_forward``, on
    its thread pool, even where the inner store has a native async client (S3 with obstore):
    ``_forward`` is synchronous, so a request can't pass through it without a thread.
    """

    def __new__(cls, inner: ObjectStore, *args: Any, **kwargs: Any) -> DelegatingStore:
        made = cls
        if isinstance(inner, UnsyncedWriter) and not issubclass(cls, _ForwardsUnsynced):
            made = _with_unsynced(cls)
        return super().__new__(made)

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    def _forward(self, op: str, key: str, call: Callable[[], _T]) -> _T:
        """Send one request; override to observe or change it."""
        return call()

    @property
    def stats(self) -> StoreStats:
        return self.inner.stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self.inner.capabilities

    @property
    def namespace(self) -> str:
        return self.inner.namespace

    def read(self, key: str) -> Versioned | None:
        return self._forward("read", key, lambda: self.inner.read(key))

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        return self._forward(
            "read_if_changed", key, lambda: read_if_changed(self.inner, key, version)
        )

    def create(self, key: str, data: bytes) -> str:
        return self._forward("create", key, lambda: self.inner.create(key, data))

    def replace(self, key: str, data: bytes, version: str) -> str:
        return self._forward("replace", key, lambda: self.inner.replace(key, data, version))

    def delete(self, key: str, version: str) -> None:
        self._forward("delete", key, lambda: self.inner.delete(key, version))

    def list(self, prefix: str) -> list[str]:
        return self._forward("list", prefix, lambda: self.inner.list(prefix))

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.inner!r})"


class _ForwardsUnsynced:
    """Mixed into a :class:`DelegatingStore` whose inner store can skip the sync."""

    inner: ObjectStore
    _forward: Callable[..., Any]

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        inner = self.inner
        assert isinstance(inner, UnsyncedWriter)
        result: str = self._forward(
            "replace_unsynced", key, lambda: inner.replace_unsynced(key, data, version)
        )
        return result


_made: dict[type[DelegatingStore], type[DelegatingStore]] = {}
_made_lock = threading.Lock()


def _with_unsynced(cls: type[DelegatingStore]) -> type[DelegatingStore]:
    """``cls`` with ``replace_unsynced``, under the same name (made once per class)."""
    with _made_lock:
        made = _made.get(cls)
        if made is None:
            made = type(cls.__name__, (cls, _ForwardsUnsynced), {"__module__": cls.__module__})
            made.__qualname__ = cls.__qualname__
            _made[cls] = made
        return made


def read_if_changed(store: ObjectStore, key: str, version: str) -> ReadResult:
    """The store's conditional read, or (for a store without one) a read and a comparison."""
    if isinstance(store, ConditionalReader):
        return store.read_if_changed(key, version)
    found = store.read(key)
    if found is not None and found.version == version:
        return NOT_MODIFIED
    return found
