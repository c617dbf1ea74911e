"""The scheduled task and the due-time heap that both schedulers keep (threads: ``_scheduler``;
asyncio: ``_ascheduler``).

Entries are pushed with the time they are due, rounded *up* to their tolerance (so thousands of
leases share wakeups); a cancelled entry, one that is running, or one pushed again sooner is
skipped lazily when it reaches the top. Cancellations are compacted away once they are most of
the heap, so a process that takes thousands of short locks a second keeps a small heap.
"""

from __future__ import annotations

import heapq
import itertools
import math
from typing import Generic, Protocol, TypeVar

__all__ = ["COMPACT_MIN", "DueHeap", "Entry", "ScheduledTask"]

#: Cancellations below which the heap is never compacted.
COMPACT_MIN = 1024


class Entry(Protocol):
    """What the heap needs of a scheduled task."""

    when: float
    tolerance: float
    cancelled: bool
    running: bool


E = TypeVar("E", bound=Entry)
F = TypeVar("F")


class ScheduledTask(Generic[F]):
    """A handle on a scheduled task (``task`` is what the scheduler calls: a function, or one
    returning an awaitable); cancel it with its scheduler's ``cancel``."""

    __slots__ = ("cancelled", "inline", "name", "running", "task", "tolerance", "when")

    def __init__(
        self, task: F, when: float, name: str, inline: bool = False, tolerance: float = 0.0
    ) -> None:
        self.task = task
        self.when = when
        self.name = name
        self.inline = inline
        self.tolerance = tolerance
        self.cancelled = False
        self.running = False


class DueHeap(Generic[E]):
    """Entries by due time. Not thread-safe: the threaded scheduler holds its lock around it."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, E]] = []
        self._seq = itertools.count()
        # Cancellations since the heap was last compacted (an upper bound of the dead entries).
        self._cancelled = 0

    def push(self, entry: E, when: float, *, exact: bool = False) -> float:
        """Schedule ``entry`` at ``when`` rounded up to its tolerance (unless ``exact``: a run
        brought forward by a notice waits for no grid); returns that time."""
        if entry.tolerance > 0 and not exact:
            when = math.ceil(when / entry.tolerance) * entry.tolerance
        entry.when = when
        heapq.heappush(self._heap, (when, next(self._seq), entry))
        return when

    def pop_due(self, now: float) -> E | None:
        """The first entry due by ``now``, marked running; None if none is due."""
        heap = self._heap
        while heap:
            when, _, entry = heap[0]
            if entry.cancelled or entry.running or when != entry.when:
                heapq.heappop(heap)  # cancelled, running, or superseded by a sooner push
                continue
            if when > now:
                return None
            heapq.heappop(heap)
            entry.running = True
            return entry
        return None

    def next_due(self) -> float | None:
        """When the next live entry is due, if any."""
        heap = self._heap
        while heap:
            when, _, entry = heap[0]
            if entry.cancelled or entry.running or when != entry.when:
                heapq.heappop(heap)
                continue
            return when
        return None

    def cancel(self, entry: E) -> None:
        """Stop ``entry`` from running again (a run in progress finishes)."""
        if entry.cancelled:
            return
        entry.cancelled = True  # skipped lazily when it reaches the top
        self._cancelled += 1
        # Every release cancels a renewal due a renew interval later: drop the dead entries
        # once they are most of the heap (each compaction is paid for by as many cancellations
        # as it scans, so the cost per cancel stays constant).
        if self._cancelled > COMPACT_MIN and 2 * self._cancelled > len(self._heap):
            self._heap = [
                item
                for item in self._heap
                if not item[2].cancelled and not item[2].running and item[0] == item[2].when
            ]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def __len__(self) -> int:
        return len(self._heap)

    def pending(self) -> int:
        """How many live entries are scheduled."""
        return len({id(e) for _, _, e in self._heap if not e.cancelled})
