"""Store wrappers that watch what the lock does with its store, the lock none the wiser.

- :class:`StoreTimer`: time spent inside store calls, per thread (so an operation's time splits
  into the store's and the library's own), and each call's duration while ``recording``.
- :class:`TallyStore`: each request noted with the label of the thread that made it.

Both are :class:`~prioritylock.testing.DelegatingStore` s: they keep the inner store's
``namespace``, ``stats`` and ``capabilities`` (and offer ``replace_unsynced`` only where the inner
store has it), so in-process wakeups, request counts and the lock's choices are those of the bare
store; each observes requests in one method.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from _harness import T

from prioritylock.stores import ObjectStore
from prioritylock.testing import DelegatingStore


class StoreTimer(DelegatingStore):
    """A store wrapper that adds up the time this thread spends inside store calls, so a lock
    operation's time splits into the store's and the library's own; while ``recording``, it
    also keeps every call's duration (``durations_s``, from any thread). ``namespace`` and
    ``stats`` are the inner store's, so in-process wakeups and request counts are unchanged."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._local = threading.local()
        self._mutex = threading.Lock()
        self.recording = False
        self.durations_s: list[float] = []

    def spent_ns(self) -> int:
        """Time this thread has spent inside store calls so far."""
        return int(getattr(self._local, "spent", 0))

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        t0 = time.perf_counter_ns()
        try:
            return call()
        finally:
            elapsed = time.perf_counter_ns() - t0
            self._local.spent = self.spent_ns() + elapsed
            if self.recording:
                with self._mutex:
                    self.durations_s.append(elapsed / 1e9)

    def _call_async(self, op: str, *args: Any) -> Awaitable[Any] | None:
        """The inner store's native async call (as ``AsyncLock`` would make it), timed."""
        entry = getattr(self.inner, "_call_async", None)
        pending = entry(op, *args) if callable(entry) else None
        return None if pending is None else self._timed(pending)

    async def _timed(self, pending: Awaitable[T]) -> T:
        t0 = time.perf_counter_ns()
        try:
            return await pending
        finally:
            if self.recording:
                with self._mutex:
                    self.durations_s.append((time.perf_counter_ns() - t0) / 1e9)


# -- per-client request tally ----------------------------------------------------------------------

#: The tally's name for each kind of request.
_KINDS = {
    "read": "reads",
    "read_if_changed": "reads",
    "create": "creates",
    "replace": "replaces",
    "replace_unsynced": "replaces",
    "delete": "deletes",
    "list": "lists",
}


class TallyStore(DelegatingStore):
    """A store wrapper that notes each request with the label of the thread that made it.

    Locks that share one ``TallyStore`` share its identity, so in-process wakeups (keyed on the
    store object) still work between them. ``stats`` is the inner store's, untouched.
    """

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._labels: dict[int, str] = {}
        self._lock = threading.Lock()
        self.events: list[tuple[str, str, float]] = []  # (label, kind, monotonic time)

    def label_thread(self, label: str) -> None:
        self._labels[threading.get_ident()] = label

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        label = self._labels.get(threading.get_ident(), "other")
        with self._lock:
            self.events.append((label, _KINDS[op], time.monotonic()))
        return call()

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
