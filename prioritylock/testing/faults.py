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
import random
import threading
from collections.abc import Callable
from typing import TypeVar

from prioritylock._errors import ConditionFailed, StoreUnavailable
from prioritylock.stores._base import NOT_MODIFIED, ObjectStore, StoreStats
from prioritylock.stores._delegate import DelegatingStore

__all__ = ["FAULTS", "FaultyStore"]

FAULTS = ("unavailable", "lost_response", "precondition_after_success")
_WRITE_FAULTS = FAULTS
_READ_FAULTS = ("unavailable",)
# The request kind each forwarded operation is faulted (and counted) as.
_KIND = {"read_if_changed": "read", "replace_unsynced": "replace"}

_T = TypeVar("_T")


class FaultyStore(DelegatingStore):
    """A store that passes requests to ``inner`` and fails the ones it is told to.

    Its :attr:`stats` count the requests it was asked for, failed ones included.
    """

    def __init__(
        self,
        inner: ObjectStore,
        *,
        rate: float = 0.0,
        rng: random.Random | None = None,
        faults: tuple[str, ...] = FAULTS,
    ) -> None:
        super().__init__(inner)
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

    def _forward(self, op: str, key: str, call: Callable[[], _T]) -> _T:
        kind = _KIND.get(op, op)
        self._stats.count(kind + "s")
        fault = self._fault(kind)
        if kind in ("read", "list"):
            if fault is not None:
                raise StoreUnavailable(f"injected: {kind} {key!r} throttled (429)")
            found = call()
            if found is NOT_MODIFIED:
                self._stats.count_not_modified()
            return found
        if fault == "unavailable":
            raise StoreUnavailable(f"injected: {op} {key!r} throttled (503)")
        result = call()
        if fault == "lost_response":
            raise StoreUnavailable(f"injected: {op} {key!r} response lost", outcome_unknown=True)
        if fault == "precondition_after_success":
            raise ConditionFailed(key, "injected: 412 on an SDK retry of a write that landed")
        return result

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

    def __repr__(self) -> str:
        return f"FaultyStore({self.inner!r}, rate={self.rate})"
