"""asyncio: workers of one event loop share a lock, and a cleanup listener is ``async def``.

Shows: ``LockBuilder.build_async()``, ``async with lock:`` (waits, renews in the loop's one
scheduler, releases on exit, also when the task is cancelled), ``await lock.try_lock()``,
fencing tokens growing by one per holder, and preemption with an ``async def``
``on_cleanup_notification``: when it returns, the lock passes to the higher priority.

Run: ``python examples/async_worker.py [STORE_URL]`` (default: a fresh temporary directory).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from prioritylock import AsyncLock, CleanupNotice, LockBuilder, LockListener


def client(url: str, owner: str, **options: float) -> LockBuilder:
    builder = LockBuilder().store(url).path("jobs/reindex").owner(owner).lease_timeout(30)
    for name, value in options.items():
        getattr(builder, name)(value)
    return builder


async def worker(url: str, name: str, fences: list[int]) -> None:
    lock = client(url, name, poll_interval=0.05).build_async()
    async with lock:  # waits its turn; a release in this process wakes it at once
        fences.append(lock.fencing_token)
        await asyncio.sleep(0.01)  # the work, guarded by the token


class Tidy(LockListener):
    """A batch job that, asked to hand over, stops at a safe point first."""

    def __init__(self) -> None:
        self.steps_rolled_back = 0

    async def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        print(
            f"batch: {notice.requestor_owner!r} (priority {notice.requestor_priority}) asks; "
            f"{notice.seconds_left():.0f} s to clean up"
        )
        await asyncio.sleep(0.05)  # roll back what is not committed
        self.steps_rolled_back = 2
        print("batch: rolled back 2 steps, handing over")


async def main(url: str) -> None:
    fences: list[int] = []
    await asyncio.gather(*(worker(url, f"worker-{i}", fences) for i in range(5)))
    print(f"5 workers took turns, fences {fences}")
    assert fences == sorted(fences) and len(set(fences)) == 5

    tidy = Tidy()
    batch: AsyncLock = (
        client(url, "batch", cleanup_timeout=10, watch_interval=0.05).listener(tidy).build_async()
    )
    assert await batch.try_lock()
    urgent = client(url, "urgent", waiting_timeout=10).priority(5).build_async()
    before = batch.fencing_token
    assert await urgent.try_lock()  # records its request, then waits for the handover
    print(f"urgent try_lock() -> True, fence {before} -> {urgent.fencing_token}")
    print(f"batch still believes it holds the lock: {batch.is_current_owner()}")
    await urgent.unlock()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        asyncio.run(main(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as directory:
            asyncio.run(main(f"file://{directory}"))
