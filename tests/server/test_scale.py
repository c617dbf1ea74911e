"""Held streams under load keep their leases: the small version of ``benchmarks/serve_scale.py
--holders 10000`` beside a CPU burner (where leases expired).

There, the loop's scheduler ran renewals for one 5 ms slice per turn of the event loop, and each
turn also carried every request and stream write that was ready: on a loaded machine a turn
took a quarter of a second, so the renewals due came to more than the slices could run, fell
behind by seconds and then by whole leases. Behind, the scheduler must take a larger share.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from prioritylock._ascheduler import AsyncScheduler
from prioritylock._clock import FakeClock

BEATS = 5000  # heartbeats, due together
BEAT_S = 0.0002


def _busy(seconds: float) -> None:
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass  # work on the loop (CPU time: a loaded machine doesn't shorten it)


async def _per_turn(late: float, turns: int) -> list[int]:
    """How many heartbeats due ``late`` seconds ago run in each of the loop's next ``turns``
    (the scheduler's clock stands still: only its slices, in CPU time, are real)."""
    scheduler = AsyncScheduler(FakeClock())
    beats = 0

    async def beat() -> None:
        nonlocal beats
        _busy(BEAT_S)
        beats += 1

    due = scheduler.clock.monotonic() - late
    for i in range(BEATS):
        scheduler.schedule(beat, due, f"beat-{i}", inline=True)
    counts: list[int] = []
    for _ in range(turns):  # another task of the loop: a request, a stream's write
        before = beats
        await asyncio.sleep(0)
        counts.append(beats - before)
    await scheduler.aclose()
    return counts


@pytest.mark.timeout(60)
def test_overdue_heartbeats_get_more_than_a_sliver_of_each_turn() -> None:
    """Heartbeats a second overdue run for up to 50 ms (of CPU) per turn of the loop, ten times
    the 5 ms slice of heartbeats that are on time (both measured here, in CPU time, so neither the
    machine's speed nor its load matters)."""
    on_time = asyncio.run(_per_turn(0.0, 1))[0]
    overdue = max(asyncio.run(_per_turn(1.0, 3)))
    assert overdue >= 3 * on_time, (overdue, on_time)
