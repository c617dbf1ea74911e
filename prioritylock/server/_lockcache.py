"""Idle ``AsyncLock`` objects kept for the next request on the same lock with the same options.

Building a lock object costs more than a request to the memory store (its config checked, the
store's abilities looked up); the full lock API builds one per lock request and per lease read.
A request takes an idle object out (:meth:`LockCache.take`) and has it to itself until it gives
it back (:meth:`LockCache.give`) once it holds nothing: two requests never share one, so a
holding is never shared between two owners, and a concurrent request on the same lock builds
its own. Only an object that a user could take the lock with again is kept: open, not
acquiring, holding nothing, no store call left unwatched. At most one idle object per key, at
most :data:`MAX_IDLE` in all (the least recently given go first), none idle over
:data:`IDLE_SECONDS`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Hashable

from prioritylock._alock import AsyncLock

__all__ = ["IDLE_SECONDS", "MAX_IDLE", "LockCache", "reusable"]

#: Idle lock objects kept at most ...
MAX_IDLE = 4096
#: ... and for at most this long.
IDLE_SECONDS = 60.0


def reusable(lock: AsyncLock) -> bool:
    """Whether another request may take ``lock`` over as it is now."""
    holding = lock._st.holding
    return (
        not lock._closed
        and not lock._acquiring
        and not lock._late
        and lock._inflight is None
        and (holding is None or holding.ended or holding.lost is not None)
        and (holding is None or not holding.cleaning)
    )


class LockCache:
    """Idle lock objects by key (a lock's name and everything its config was built from)."""

    def __init__(
        self,
        size: int = MAX_IDLE,
        idle: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._size, self._idle, self._clock = size, idle, clock
        self._items: collections.OrderedDict[Hashable, tuple[float, AsyncLock]]
        self._items = collections.OrderedDict()
        #: Lock objects built (counted by the caller: :meth:`built_one`); for tests and figures.
        self.built = 0

    def __len__(self) -> int:
        return len(self._items)

    def take(self, key: Hashable) -> AsyncLock | None:
        """The idle object for ``key``, now the caller's alone; None: build one
        (and say so with :meth:`built_one`)."""
        self._expire()
        item = self._items.pop(key, None)
        return None if item is None else item[1]

    def built_one(self) -> None:
        self.built += 1

    def give(self, key: Hashable, lock: AsyncLock) -> None:
        """``lock``, built for ``key``, is no longer used by its request: keep it if it can be
        taken over, unless an idle one for ``key`` is kept already."""
        self._expire()
        if key in self._items or not reusable(lock):
            return
        self._items[key] = (self._clock(), lock)
        while len(self._items) > self._size:
            self._items.popitem(last=False)

    def _expire(self) -> None:
        items, oldest = self._items, self._clock() - self._idle
        while items:
            since, _ = next(iter(items.values()))
            if since > oldest:
                return
            items.popitem(last=False)
