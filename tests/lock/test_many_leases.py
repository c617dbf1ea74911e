"""Many ``AsyncLock`` leases on one loop: the small version of ``benchmarks/scale.py --async
--leases 100000``.

There, full collections of the garbage collector stalled the loop for seconds: each walks every
object the collector tracks, and each held lease kept 33 of them (closures for its heartbeat and
its notices among them). What a held lease keeps is counted here, on a fake clock, through two
renewal intervals, none lost. And leases acquired in one burst renewed in that burst for as long
as they were held: here they are acquired at one instant, and their renewals spread out.
"""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from itertools import pairwise
from typing import Any

import pytest

from prioritylock import AsyncLock, LockBuilder, signals
from prioritylock import _protocol as proto
from prioritylock._ascheduler import AsyncScheduler
from prioritylock._clock import FakeClock
from prioritylock.stores import MemoryStore

LEASES = 2000
#: Objects the collector tracks per held lease, found with ``gc.get_objects()``: 21.5 at 2,000
#: leases since issue 28 (the lock, its config, scope, state, holding, lease document, heartbeat
#: entry, notice interest, guard...), 33.5 before.
MAX_TRACKED_PER_LEASE = 24


def _tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


async def _hold_and_renew(clock: FakeClock) -> tuple[list[AsyncLock], float, float, list[Any]]:
    scheduler = AsyncScheduler(clock, manual=True)
    builder = LockBuilder().store(MemoryStore()).clock(clock)
    lost: list[Any] = []

    def on_lost(sender: object, **kwargs: Any) -> None:
        lost.append((sender, kwargs.get("reason")))

    signals.lock_lost.connect(on_lost, weak=False)
    try:
        before = _tracked()
        locks = [
            builder.path("many", str(i)).build_async(scheduler=scheduler) for i in range(LEASES)
        ]
        for lock in locks:
            assert await lock.try_lock()
        held = (_tracked() - before) / LEASES
        interval = locks[0].config.renew_interval
        step = interval / 20
        for _ in range(40):  # two renewal intervals
            clock.advance(step)
            await scheduler.run_due()
        renewed = (_tracked() - before) / LEASES
    finally:
        signals.lock_lost.disconnect(on_lost)
    ours = {id(lock) for lock in locks}  # the signal is process-wide: other tests' locks too
    return locks, held, renewed, [loss for loss in lost if id(loss[0]) in ours]


@pytest.mark.timeout(60)
def test_many_leases_keep_few_tracked_objects_and_every_lease() -> None:
    clock = FakeClock()
    locks, held, renewed, lost = asyncio.run(_hold_and_renew(clock))
    assert lost == []
    assert all(lock.is_current_owner() for lock in locks)
    beats = {lock._st.holding.lease.holder.beat for lock in locks}  # type: ignore[union-attr]
    assert min(beats) >= 2, beats  # renewed in each interval, not merely still in date
    assert held <= MAX_TRACKED_PER_LEASE, f"{held:.1f} tracked objects per held lease"
    assert renewed <= MAX_TRACKED_PER_LEASE, f"{renewed:.1f} tracked objects per lease, renewed"


async def _renewal_starts(
    clock: FakeClock, leases: int, renewals: int
) -> tuple[float, list[list[float]]]:
    """Acquire ``leases`` at one instant, then step the clock from due time to due time until
    each lease renewed ``renewals`` times; the renew interval, and when each renewal started
    (its acquisition first)."""
    scheduler = AsyncScheduler(clock, manual=True)
    builder = LockBuilder().store(MemoryStore()).clock(clock)
    locks = [builder.path("burst", str(i)).build_async(scheduler=scheduler) for i in range(leases)]
    for lock in locks:
        assert await lock.try_lock()
    timeout = locks[0].config.lease_timeout
    # A renewal moves the deadline to its start + lease timeout: read its start back from it.
    starts = [[lock._st.holding.deadline - timeout] for lock in locks]  # type: ignore[union-attr]
    while min(len(s) for s in starts) <= renewals:
        nxt = await scheduler.run_due()
        assert nxt is not None
        clock.advance(max(0.0, nxt - clock.monotonic()))
        await scheduler.run_due()
        for lock, seen in zip(locks, starts, strict=True):
            start = lock._st.holding.deadline - timeout  # type: ignore[union-attr]
            if start != seen[-1]:
                seen.append(start)
    for lock in locks:
        await lock.unlock()
    return locks[0].config.renew_interval, starts


@pytest.mark.timeout(30)
def test_leases_acquired_at_once_renew_spread_out_and_never_later() -> None:
    clock = FakeClock()
    interval, starts = asyncio.run(_renewal_starts(clock, leases=1000, renewals=2))
    tolerance = 0.05  # the heartbeat's grid (``_state.heartbeat_tolerance``)
    for seen in starts:
        gaps = [later - earlier for earlier, later in pairwise(seen)]
        # Never later than a renew interval after the last start; no earlier than the window.
        assert gaps[0] >= interval * (1 - proto.FIRST_RENEW_SPREAD), seen
        assert all(gap >= interval * (1 - proto.RENEW_SPREAD) for gap in gaps[1:]), seen
        assert all(gap <= interval + tolerance for gap in gaps), seen
    # The second renewals over tenths of the renew interval: at one instant without the
    # spread; 20% at most in a tenth with it (1,000 draws: a 30% bound leaves 7 sigmas).
    tenths = Counter(int((seen[2] - seen[0]) / (interval / 10)) for seen in starts)
    assert max(tenths.values()) <= 300, sorted(tenths.items())
    assert len(tenths) >= 5, sorted(tenths.items())
