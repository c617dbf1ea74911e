"""The heartbeat's heap stays small when most of what it scheduled is cancelled.

Every release cancels the renewal it had scheduled a renew interval ahead; cancelled entries
leave the heap lazily, when they reach its top. A process taking thousands of short locks a
second would otherwise hold a renew interval's worth of dead entries.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from prioritylock import FakeClock, Heartbeat
from prioritylock._due import COMPACT_MIN as _COMPACT_MIN
from prioritylock.stores import MemoryStore
from tests.lock.helpers import make

pytestmark = pytest.mark.timeout(60)


def test_cancelled_entries_are_dropped_and_live_ones_still_run() -> None:
    clock = FakeClock()
    hb = Heartbeat(clock, threaded=False)
    ran: list[int] = []
    live: list[int] = []

    def task(i: int) -> Callable[[], float | None]:
        def run() -> None:
            ran.append(i)

        return run

    for i in range(50_000):
        entry = hb.schedule(task(i), clock.monotonic() + 10 + i / 1e4)
        if i % 1_000 == 0:
            live.append(i)
        else:
            hb.cancel(entry)
        assert len(hb._heap) <= 2 * _COMPACT_MIN + 2 * len(live) + 2, i
    assert hb.pending == len(live)
    clock.advance(20)
    hb.run_due()
    assert ran == live


def test_short_locks_leave_no_pile_of_dead_renewals() -> None:
    clock = FakeClock()
    hb = Heartbeat(clock, threaded=False)
    store = MemoryStore("heap")
    for _ in range(5_000):
        lock = make(store, clock=clock, heartbeat=hb)
        assert lock.try_lock()
        lock.unlock()
    assert hb.pending == 0
    assert len(hb._heap) <= 2 * _COMPACT_MIN + 1, len(hb._heap)
