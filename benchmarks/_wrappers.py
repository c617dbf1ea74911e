"""Store wrappers that watch what the lock does with its store, the lock none the wiser.

- :class:`StoreTimer`: time spent inside store calls, per thread (so an operation's time splits
  into the store's and the library's own), and each call's duration while ``recording``.
- :class:`TallyStore`: each request noted with the label of the thread that made it.

Both keep the inner store's ``namespace``, ``stats`` and ``capabilities``, so in-process wakeups,
request counts and the lock's choices are those of the bare store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from _harness import T

from prioritylock.stores import (
    ConditionalReader,
    ObjectStore,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    UnsyncedWriter,
    Versioned,
)


def read_if_changed(store: ObjectStore, key: str, version: str) -> ReadResult:
    """The store's conditional read, so a wrapped store reads as the lock would read it bare."""
    if isinstance(store, ConditionalReader):
        return store.read_if_changed(key, version)
    return store.read(key)


def replace_unsynced(store: ObjectStore, key: str, data: bytes, version: str) -> str:
    """The store's unsynced replace where it has one (LocalStore), else its replace."""
    if isinstance(store, UnsyncedWriter):
        return store.replace_unsynced(key, data, version)
    return store.replace(key, data, version)


class StoreTimer:
    """A store wrapper that adds up the time this thread spends inside store calls, so a lock
    operation's time splits into the store's and the library's own; while ``recording``, it
    also keeps every call's duration (``durations_s``, from any thread). ``namespace`` and
    ``stats`` are the inner store's, so in-process wakeups and request counts are unchanged."""

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self._local = threading.local()
        self._mutex = threading.Lock()
        self.recording = False
        self.durations_s: list[float] = []

    def spent_ns(self) -> int:
        """Time this thread has spent inside store calls so far."""
        return int(getattr(self._local, "spent", 0))

    def _time(self, call: Callable[[], T]) -> T:
        t0 = time.perf_counter_ns()
        try:
            return call()
        finally:
            elapsed = time.perf_counter_ns() - t0
            self._local.spent = self.spent_ns() + elapsed
            if self.recording:
                with self._mutex:
                    self.durations_s.append(elapsed / 1e9)

    @property
    def namespace(self) -> str:
        return self._inner.namespace

    @property
    def stats(self) -> StoreStats:
        return self._inner.stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._inner.capabilities

    def read(self, key: str) -> Versioned | None:
        return self._time(lambda: self._inner.read(key))

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        return self._time(lambda: read_if_changed(self._inner, key, version))

    def create(self, key: str, data: bytes) -> str:
        return self._time(lambda: self._inner.create(key, data))

    def replace(self, key: str, data: bytes, version: str) -> str:
        return self._time(lambda: self._inner.replace(key, data, version))

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        return self._time(lambda: replace_unsynced(self._inner, key, data, version))

    def delete(self, key: str, version: str) -> None:
        self._time(lambda: self._inner.delete(key, version))

    def list(self, prefix: str) -> list[str]:
        return self._time(lambda: self._inner.list(prefix))

    def close(self) -> None:
        self._inner.close()


# -- per-client request tally ----------------------------------------------------------------------


class TallyStore:
    """A store wrapper that notes each request with the label of the thread that made it.

    Locks that share one ``TallyStore`` share its identity, so in-process wakeups (keyed on the
    store object) still work between them. ``stats`` is the inner store's, untouched.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self._inner = inner
        self._labels: dict[int, str] = {}
        self._lock = threading.Lock()
        self.events: list[tuple[str, str, float]] = []  # (label, kind, monotonic time)

    def label_thread(self, label: str) -> None:
        self._labels[threading.get_ident()] = label

    def _note(self, kind: str) -> None:
        label = self._labels.get(threading.get_ident(), "other")
        with self._lock:
            self.events.append((label, kind, time.monotonic()))

    def counts(self, label: str | None, since: float, until: float) -> dict[str, int]:
        """Requests by kind made by threads labelled ``label`` (None: all) in [since, until]."""
        out = {"reads": 0, "creates": 0, "replaces": 0, "deletes": 0, "lists": 0}
        with self._lock:
            events = list(self.events)
        for who, kind, at in events:
            if since <= at <= until and (label is None or who == label):
                out[kind] += 1
        return out

    @property
    def namespace(self) -> str:
        # None on purpose: locks on one TallyStore share its identity, and no cached reads.
        raise AttributeError("namespace")

    @property
    def stats(self) -> StoreStats:
        return self._inner.stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._inner.capabilities

    def read(self, key: str) -> Versioned | None:
        self._note("reads")
        return self._inner.read(key)

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        self._note("reads")
        return read_if_changed(self._inner, key, version)

    def create(self, key: str, data: bytes) -> str:
        self._note("creates")
        return self._inner.create(key, data)

    def replace(self, key: str, data: bytes, version: str) -> str:
        self._note("replaces")
        return self._inner.replace(key, data, version)

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        self._note("replaces")
        return replace_unsynced(self._inner, key, data, version)

    def delete(self, key: str, version: str) -> None:
        self._note("deletes")
        self._inner.delete(key, version)

    def list(self, prefix: str) -> list[str]:
        self._note("lists")
        return self._inner.list(prefix)

    def close(self) -> None:
        self._inner.close()
