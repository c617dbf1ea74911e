"""Many ``AsyncLock`` leases on one loop: the small version of ``benchmarks/scale.py --async
--leases 100000``.

There, full collections of the garbage collector stalled the loop for seconds: each walks every
object the collector tracks, and each held lease kept 33 of them (closures for its heartbeat and
its notices among them). What a held lease keeps is counted here, on a fake clock, through two
renewal intervals, none lost.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from prioritylock import AsyncLock, LockBuilder, signals
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
