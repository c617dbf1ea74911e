"""Store wrappers that watch what the lock does with its store, the lock none the wiser.

Both are :class:`~prioritylock.testing.DelegatingStore` s: they keep the inner store's ``stats``
and ``capabilities``, so request counts and the lock's choices are those of the bare store.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from _harness import T

from prioritylock.stores import ObjectStore
from prioritylock.testing import DelegatingStore


class StoreTimer(DelegatingStore):
    """Adds up the time this thread spends inside store calls, so a lock operation's time
    splits into the store's and the library's own."""

    _local = threading.local()

    def spent_ns(self) -> int:
        """Time this thread has spent inside store calls so far."""
        return int(getattr(self._local, "spent", 0))

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        t0 = time.perf_counter_ns()
        try:
            return call()
        finally:
            self._local.spent = self.spent_ns() + time.perf_counter_ns() - t0


#: The tally's name for each kind of request.
_KINDS = {"read": "reads", "read_if_changed": "reads", "create": "creates", "replace": "replaces"}
_KINDS |= {"replace_unsynced": "replaces", "delete": "deletes", "list": "lists"}


class TallyStore(DelegatingStore):
    """Notes each request with the label of the thread that made it (:meth:`label_thread`).
    Its ``namespace`` is hidden: locks on one ``TallyStore`` share its identity instead, and
    make no cached reads."""

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
        out = dict.fromkeys(("reads", "creates", "replaces", "deletes", "lists"), 0)
        with self._lock:
            events = list(self.events)
        for who, kind, at in events:
            if since <= at <= until and (label is None or who == label):
                out[kind] += 1
        return out

    @property
    def namespace(self) -> str:
        raise AttributeError("namespace")
