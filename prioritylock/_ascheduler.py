"""One scheduler per event loop: renews and watches every ``AsyncLock`` lease held in that loop.

The asyncio counterpart of ``_scheduler.Scheduler``: a heap of due times and one runner task per
loop (not a task, thread or timer per lock). Due tasks of leases on in-process stores (memory)
run one after another inside the runner; the others run as short-lived tasks, so a slow network
store doesn't hold up the renewals of other leases. Due times are rounded up to a grid of the
task's tolerance so that thousands of leases share wakeups. A task returns when it next wants to
run (or None to stop); it never runs twice at once.

A test drives a ``AsyncScheduler(clock, manual=True)`` with ``await scheduler.run_due()``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeAlias

from prioritylock import _due
from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._due import DueHeap

__all__ = ["AsyncScheduler", "ScheduledAsyncTask", "loop_scheduler"]

log = logging.getLogger("prioritylock")

AsyncTask = Callable[[], Awaitable["float | None"]]

#: Longest run (CPU seconds of the loop's thread) of in-process (inline) tasks, or of starting
#: others, before the runner lets the other tasks of the loop run ...
_INLINE_SLICE = 0.005
#: ... unless the runner is behind (it ran an inline task over :data:`_LATE` seconds after its
#: due time): it then takes up to this much per turn of the loop. One slice per turn is all the
#: runner gets, so when the loop's other work grows (thousands of streams, a burst of requests)
#: a 5 ms slice no longer keeps up with the renewals due, and leases expire: a loop lagging 50 ms
#: loses nothing, a renewal 20 s late loses a lease. Slices are CPU time, not wall time: on a
#: machine short of CPU, a slice of wall time is mostly time the process was not running at all.
_BEHIND_SLICE = 0.05
_LATE = 0.1

#: Tasks (renewals and watches on network or disk stores) running at once per loop.
MAX_RUNNING = 64


#: A handle on a task of an event loop's scheduler; cancel it with :meth:`AsyncScheduler.cancel`.
ScheduledAsyncTask: TypeAlias = _due.ScheduledTask[AsyncTask]


class AsyncScheduler:
    """Runs scheduled coroutines at their due times on ``clock``, in one event loop."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, *, manual: bool = False) -> None:
        self.clock = clock
        self.manual = manual
        self._heap: DueHeap[ScheduledAsyncTask] = DueHeap()
        self._wake: asyncio.Event | None = None
        self._sleeping_until: float | None = None
        self._runner: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False

    def schedule(
        self,
        task: AsyncTask,
        when: float,
        name: str = "task",
        *,
        inline: bool = False,
        tolerance: float = 0.0,
    ) -> ScheduledAsyncTask:
        """Run ``task`` at ``when`` (monotonic seconds on this scheduler's clock); call from the
        scheduler's loop."""
        if self._closed:
            raise RuntimeError("scheduler is closed")
        # The class itself: calling the generic alias costs a microsecond (per acquire).
        entry: ScheduledAsyncTask = _due.ScheduledTask(task, when, name, inline, tolerance)
        self._push(entry, when)
        if not self.manual and self._runner is None:
            self._runner = asyncio.get_running_loop().create_task(self._loop(), name="prioritylock")
        return entry

    def reschedule(self, entry: ScheduledAsyncTask, when: float) -> None:
        """Run ``entry`` at ``when`` (exactly, not on its tolerance's grid) instead, if that is
        sooner than planned; call from the scheduler's loop. A run in progress is left alone."""
        if entry.cancelled or entry.running or when >= entry.when:
            return
        self._push(entry, when, exact=True)

    def cancel(self, entry: ScheduledAsyncTask) -> None:
        """Stop ``entry`` from running again (a run in progress finishes)."""
        self._heap.cancel(entry)

    @property
    def pending(self) -> int:
        """How many tasks are scheduled."""
        return self._heap.pending()

    def _push(self, entry: ScheduledAsyncTask, when: float, *, exact: bool = False) -> None:
        when = self._heap.push(entry, when, exact=exact)
        if self._wake is not None and (self._sleeping_until is None or when < self._sleeping_until):
            self._wake.set()

    def _pop_due(self, now: float) -> ScheduledAsyncTask | None:
        return self._heap.pop_due(now)

    def _next_due(self) -> float | None:
        return self._heap.next_due()

    async def _run(self, entry: ScheduledAsyncTask) -> None:
        try:
            nxt = await entry.task()
        except asyncio.CancelledError:
            entry.running = False
            raise
        except Exception:
            log.exception("prioritylock: heartbeat task %s failed; retrying in 0.1 s", entry.name)
            nxt = self.clock.monotonic() + 0.1
        entry.running = False
        if nxt is not None and not entry.cancelled and not self._closed:
            # A task that asks to run again now (a holder told again while it read) waits
            # for no grid.
            self._push(entry, nxt, exact=nxt <= self.clock.monotonic())

    async def run_due(self) -> float | None:
        """Run every task that is due now (manual mode); return the next due time, if any."""
        while True:
            entry = self._pop_due(self.clock.monotonic())
            if entry is None:
                return self._next_due()
            await self._run(entry)

    async def _loop(self) -> None:
        self._wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        cpu, monotonic, pop_due = time.thread_time, self.clock.monotonic, self._heap.pop_due
        last_yield = cpu()
        try:
            while not self._closed:
                now = monotonic()
                entry = pop_due(now)
                if entry is None:
                    nxt = self._next_due()
                    if nxt is None and not self._tasks:
                        return  # nothing left: a later schedule() starts a new runner
                    self._sleeping_until = math.inf if nxt is None else nxt
                    self._wake.clear()
                    timeout = None if nxt is None else max(0.0, nxt - self.clock.monotonic())
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), timeout)
                    self._sleeping_until = None
                    last_yield = cpu()
                    continue
                if entry.inline:
                    turn = _BEHIND_SLICE if now - entry.when > _LATE else _INLINE_SLICE
                    await self._run(entry)
                    # In-process renewals take microseconds each, but thousands fall due on the
                    # same grid tick: let the loop breathe every few milliseconds of them.
                    if cpu() - last_yield > turn:
                        await asyncio.sleep(0)
                        last_yield = cpu()
                    continue
                if len(self._tasks) >= MAX_RUNNING:
                    # The store's thread pool can't take more anyway: starting a thousand
                    # renewals at once would only stall the loop while they queue.
                    await asyncio.wait(set(self._tasks), return_when=asyncio.FIRST_COMPLETED)
                task = loop.create_task(self._run(entry))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                # Started tasks take their own turns of the loop: no larger slice when behind.
                if cpu() - last_yield > _INLINE_SLICE:
                    await asyncio.sleep(0)
                    last_yield = cpu()
        finally:
            self._runner = None
            self._wake = None

    async def aclose(self) -> None:
        """Stop: scheduled tasks no longer run; running ones are cancelled."""
        self._closed = True
        runner, self._runner = self._runner, None
        for task in [*self._tasks, *([runner] if runner is not None else [])]:
            task.cancel()
        for task in [*self._tasks, *([runner] if runner is not None else [])]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task  # stopping: what a cancelled renewal raised no longer matters


_schedulers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, AsyncScheduler]] = (
    weakref.WeakKeyDictionary()
)


def loop_scheduler(clock: Clock = SYSTEM_CLOCK) -> AsyncScheduler:
    """The running loop's scheduler for ``clock`` (one per loop and clock), made on first use."""
    per_clock = _schedulers.setdefault(asyncio.get_running_loop(), {})
    scheduler = per_clock.get(id(clock))  # the scheduler keeps its clock alive: ids stay unique
    if scheduler is None:
        scheduler = per_clock[id(clock)] = AsyncScheduler(clock)
    return scheduler
