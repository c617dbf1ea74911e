"""FaultyStore: wrap any store and make chosen requests fail the ways real stores fail.

Faults (each applies to one request):

- ``"unavailable"``: the request fails before reaching the store (429, 503, a 5xx, a refused
  connection): :class:`~prioritylock.StoreUnavailable`, nothing changed.
- ``"lost_response"``: a write lands, then its response is lost (a timeout):
  ``StoreUnavailable(outcome_unknown=True)``, the object *did* change.
- ``"precondition_after_success"``: a write lands, the SDK retries it, and the retry answers
  412: :class:`~prioritylock.ConditionFailed`, the object *did* change.

Queue faults for the next requests of one kind with :meth:`FaultyStore.inject`, or give a
``rate`` and a seeded ``random.Random`` to fail requests at random.
"""

from __future__ import annotations

import collections
import collections.abc
import random
import threading

from prioritylock._errors import ConditionFailed, StoreUnavailable
from prioritylock.stores._base import (
    NOT_MODIFIED,
    ConditionalReader,
    ObjectStore,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    Versioned,
)

__all__ = ["FAULTS", "FaultyStore"]

FAULTS = ("unavailable", "lost_response", "precondition_after_success")
_WRITE_FAULTS = FAULTS
_READ_FAULTS = ("unavailable",)


class FaultyStore:
    """A store that passes requests to ``inner`` and fails the ones it is told to."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        rate: float = 0.0,
        rng: random.Random | None = None,
        faults: tuple[str, ...] = FAULTS,
    ) -> None:
        self.inner = inner
        self.rate = rate
        self.rng = rng or random.Random(0)
        self.faults = faults
        self.injected: collections.Counter[str] = collections.Counter()
        self._queued: dict[str, collections.deque[str]] = collections.defaultdict(collections.deque)
        self._lock = threading.Lock()
        self._stats = StoreStats()

    @property
    def stats(self) -> StoreStats:
        return self._stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self.inner.capabilities

    def inject(self, op: str, fault: str, times: int = 1) -> None:
        """Fail the next ``times`` requests of ``op`` (read, create, replace, delete, list)."""
        if fault not in FAULTS:
            raise ValueError(f"unknown fault {fault!r}; choose from {FAULTS}")
        with self._lock:
            self._queued[op].extend([fault] * times)

    def clear(self) -> None:
        """Forget queued faults and stop failing at random."""
        with self._lock:
            self._queued.clear()
            self.rate = 0.0

    def _fault(self, op: str) -> str | None:
        allowed = _READ_FAULTS if op in ("read", "list") else _WRITE_FAULTS
        fault: str | None
        with self._lock:
            if self._queued[op]:
                fault = self._queued[op].popleft()
            elif self.rate and self.rng.random() < self.rate:
                choices = [f for f in self.faults if f in allowed]
                fault = self.rng.choice(choices) if choices else None
            else:
                fault = None
            if fault is not None and fault not in allowed:
                fault = "unavailable"
            if fault is not None:
                self.injected[fault] += 1
        return fault

    def _write(self, op: str, key: str, do: collections.abc.Callable[[], str]) -> str:
        self._stats.count(op + "s" if op != "replace" else "replaces")
        fault = self._fault(op)
        if fault == "unavailable":
            raise StoreUnavailable(f"injected: {op} {key!r} throttled (503)")
        result = do()
        if fault == "lost_response":
            raise StoreUnavailable(f"injected: {op} {key!r} response lost", outcome_unknown=True)
        if fault == "precondition_after_success":
            raise ConditionFailed(key, "injected: 412 on an SDK retry of a write that landed")
        return result

    def read(self, key: str) -> Versioned | None:
        self._stats.count("reads")
        if self._fault("read") is not None:
            raise StoreUnavailable(f"injected: read {key!r} throttled (429)")
        return self.inner.read(key)

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        """The inner store's conditional read (a full read and compare if it has none)."""
        self._stats.count("reads")
        if self._fault("read") is not None:
            raise StoreUnavailable(f"injected: read {key!r} throttled (429)")
        if isinstance(self.inner, ConditionalReader):
            found = self.inner.read_if_changed(key, version)
        else:
            found = self.inner.read(key)
            if found is not None and found.version == version:
                found = NOT_MODIFIED
        if found is NOT_MODIFIED:
            self._stats.count_not_modified()
        return found

    def create(self, key: str, data: bytes) -> str:
        return self._write("create", key, lambda: self.inner.create(key, data))

    def replace(self, key: str, data: bytes, version: str) -> str:
        return self._write("replace", key, lambda: self.inner.replace(key, data, version))

    def delete(self, key: str, version: str) -> None:
        def do() -> str:
            self.inner.delete(key, version)
            return ""

        self._write("delete", key, do)

    def list(self, prefix: str) -> list[str]:
        self._stats.count("lists")
        if self._fault("list") is not None:
            raise StoreUnavailable(f"injected: list {prefix!r} throttled (503)")
        return self.inner.list(prefix)

    def close(self) -> None:
        self.inner.close()

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r}, rate={self.rate})"
