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


@pytest.mark.parametrize("ran_out", [False, True], ids=["kept", "kept-then-ran-out"])
def test_a_heartbeat_kept_past_brief_holdings_still_renews_the_next(ran_out: bool) -> None:
    """A lock object in a try_lock/unlock loop keeps one scheduled run for its next holding
    (``_driver.LockBase._end_heartbeat``) rather than one per holding; the holding that stays
    is renewed all the same, by the kept run or (once that ran and found nothing held) a new
    one."""
    clock = FakeClock()
    hb = Heartbeat(clock, threaded=False)
    lock = make(MemoryStore("kept"), clock=clock, heartbeat=hb)
    cfg = lock.config
    for _ in range(10):  # brief holdings: no time passes
        assert lock.try_lock()
        lock.unlock()
    assert hb.pending == 1  # kept for the next holding, not one per holding
    if ran_out:
        clock.advance(2 * cfg.watch_interval)
        hb.run_due()  # the kept run finds nothing held, and ends
        assert hb.pending == 0
    assert lock.try_lock()
    start, renewals = clock.monotonic(), set()
    while clock.monotonic() < start + 3 * cfg.lease_timeout:
        clock.advance(cfg.watch_interval / 2)
        hb.run_due()
        assert lock.is_current_owner()
        info = lock.info()
        assert info is not None
        renewals.add(info.renewed_at)
    assert len(renewals) >= 3 * cfg.lease_timeout / cfg.renew_interval - 2
    lock.unlock()


def test_a_holder_after_brief_holdings_hears_another_locks_write_at_once() -> None:
    """The kept heartbeat keeps its notice interest too (an in-process store): a force unlock
    by another lock object of the process brings the new holding's watch forward, with no time
    passing, and the holder learns it lost the lock."""
    clock = FakeClock()
    hb = Heartbeat(clock, threaded=False)
    store = MemoryStore("kept-notices")
    lock = make(store, clock=clock, heartbeat=hb)
    for _ in range(10):
        assert lock.try_lock()
        lock.unlock()
    assert lock.try_lock()
    make(store, owner="operator", clock=clock, heartbeat=hb).force_unlock("test")
    hb.run_due()  # due at once: the notice brought it forward
    assert not lock.is_current_owner()
