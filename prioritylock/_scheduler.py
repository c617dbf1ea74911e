"""The threaded scheduler: one per process renews and watches every lease its ``Lock`` objects hold.

``Scheduler`` was called ``Heartbeat``; the old name stays, as an alias.

The scheduler keeps a heap of due times and runs each due task on a small worker pool, so the
renewals of different locks on a slow network store don't queue behind each other. A task
returns when it next wants to run (or None to stop); it never runs twice at once.

User callbacks (listeners, signal receivers) run on a separate notifier thread, never on the
scheduler's own threads, so a slow or raising receiver can't delay a renewal. A test can build a
``Scheduler(clock, threaded=False)`` and step it with :meth:`Scheduler.run_due`; callbacks then run
inline, deterministically.
"""

from __future__ import annotations

import logging
import math
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeAlias

from prioritylock import _due
from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._due import DueHeap

__all__ = ["Heartbeat", "ScheduledTask", "Scheduler", "default_scheduler"]

log = logging.getLogger("prioritylock")

#: Requests the default heartbeat keeps in flight at once. 1,000 leases renewed every 10 s and
#: watched every 5 s need about 200 requests a second; at 50 ms per request (a cloud store's
#: usual latency) 32 workers carry 640. Threads start only when there is work for them.
DEFAULT_WORKERS = 32

Task = Callable[[], "float | None"]


#: A handle on a task of this scheduler; cancel it with :meth:`Scheduler.cancel`.
ScheduledTask: TypeAlias = _due.ScheduledTask[Task]


class Scheduler:
    """Runs scheduled tasks at their due times on the given clock."""

    def __init__(
        self,
        clock: Clock = SYSTEM_CLOCK,
        *,
        threaded: bool = True,
        workers: int = DEFAULT_WORKERS,
        name: str = "prioritylock-heartbeat",
    ) -> None:
        self.clock = clock
        self.threaded = threaded
        self._name = name
        # Entered by its lock where nothing waits on it: ``Condition.__enter__`` is Python, and
        # every acquire schedules a heartbeat, every release cancels one.
        self._mutex = threading.RLock()
        self._cond = threading.Condition(self._mutex)
        self._heap: DueHeap[ScheduledTask] = DueHeap()
        self._closed = False
        # While the loop sleeps: the due time it sleeps until (inf: no task); None: awake.
        self._sleeping_until: float | None = None
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._workers = workers
        self._notices: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._notifier: threading.Thread | None = None

    # -- scheduling ----------------------------------------------------------------------------

    def schedule(
        self,
        task: Task,
        when: float,
        name: str = "task",
        *,
        inline: bool = False,
        tolerance: float = 0.0,
    ) -> ScheduledTask:
        """Run ``task`` at ``when`` (monotonic seconds on this heartbeat's clock).

        ``inline`` tasks are quick (no network): they run on the scheduler's own thread.
        ``tolerance`` lets a task run up to that much *later* than asked: its times are rounded
        up to a grid of that step, so thousands of leases share wakeups instead of waking the
        scheduler one by one.
        """
        # The class itself: calling the generic alias costs a microsecond (per acquire).
        entry: ScheduledTask = _due.ScheduledTask(task, when, name, inline, tolerance)
        with self._mutex:
            if self._closed:
                raise RuntimeError("heartbeat is closed")
            self._push(entry, when)
            if self._thread is None:
                self._start_locked()
        return entry

    def reschedule(self, entry: ScheduledTask, when: float) -> None:
        """Run ``entry`` at ``when`` (exactly, not on its tolerance's grid) instead, if that is
        sooner than planned. Any thread may call it; a run in progress is left alone (the task
        itself tells when it wants to run again)."""
        with self._cond:
            if entry.cancelled or entry.running or when >= entry.when:
                return
            self._push(entry, when, exact=True)

    def cancel(self, entry: ScheduledTask) -> None:
        """Stop ``entry`` from running again (a run in progress finishes)."""
        with self._mutex:
            self._heap.cancel(entry)

    def _push(self, entry: ScheduledTask, when: float, *, exact: bool = False) -> None:
        when = self._heap.push(entry, when, exact=exact)
        # Wake the loop only if it sleeps past this entry's time: waking it costs the caller
        # the GIL, on every acquire.
        if self._sleeping_until is None or when < self._sleeping_until:
            self._cond.notify_all()

    def _pop_due_locked(self, now: float) -> ScheduledTask | None:
        return self._heap.pop_due(now)

    def _next_due_locked(self) -> float | None:
        return self._heap.next_due()

    def _run(self, entry: ScheduledTask) -> None:
        try:
            nxt = entry.task()
        except Exception:
            # A task is expected to handle its own failures; if one escapes, try again soon
            # rather than let a lease go unrenewed silently.
            log.exception("prioritylock: heartbeat task %s failed; retrying in 0.1 s", entry.name)
            nxt = self.clock.monotonic() + 0.1
        with self._cond:
            entry.running = False
            if nxt is not None and not entry.cancelled and not self._closed:
                # A task that asks to run again now (a holder told again while it read) waits
                # for no grid.
                self._push(entry, nxt, exact=nxt <= self.clock.monotonic())

    def run_due(self) -> float | None:
        """Run every task that is due now (manual mode); return the next due time, if any."""
        while True:
            with self._cond:
                entry = self._pop_due_locked(self.clock.monotonic())
                if entry is None:
                    return self._next_due_locked()
            self._run(entry)

    @property
    def pending(self) -> int:
        """How many tasks are scheduled."""
        with self._cond:
            return self._heap.pending()

    # -- threads -------------------------------------------------------------------------------

    def _start_locked(self) -> None:
        if not self.threaded or self._thread is not None:
            return
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix=f"{self._name}-worker")
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        assert self._pool is not None
        while True:
            with self._cond:
                if self._closed:
                    return
                entry = self._pop_due_locked(self.clock.monotonic())
                if entry is None:
                    nxt = self._next_due_locked()
                    timeout = None if nxt is None else max(0.0, nxt - self.clock.monotonic())
                    self._sleeping_until = math.inf if nxt is None else nxt
                    self._cond.wait(timeout)
                    self._sleeping_until = None
                    continue
            if entry.inline:
                self._run(entry)
                continue
            try:
                self._pool.submit(self._run, entry)
            except RuntimeError:  # pool shut down at interpreter exit
                return

    # -- callbacks -----------------------------------------------------------------------------

    def dispatch(self, callback: Callable[[], None]) -> None:
        """Run a user callback off the scheduler's threads (inline in manual mode)."""
        if not self.threaded:
            _safely(callback)
            return
        with self._cond:
            if self._notifier is None:
                self._notifier = threading.Thread(
                    target=self._notify_loop, name=f"{self._name}-notifier", daemon=True
                )
                self._notifier.start()
        self._notices.put(callback)

    def spawn(self, callback: Callable[[], None], name: str) -> None:
        """Run a long callback (a holder's cleanup) on its own thread (inline in manual mode)."""
        if not self.threaded:
            _safely(callback)
            return
        threading.Thread(target=_safely, args=(callback,), name=name, daemon=True).start()

    def _notify_loop(self) -> None:
        while True:
            callback = self._notices.get()
            if callback is None:
                return
            _safely(callback)

    def close(self) -> None:
        """Stop the threads; scheduled tasks no longer run."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            pool = self._pool
        self._notices.put(None)
        if pool is not None:
            pool.shutdown(wait=False)


def _safely(callback: Callable[[], None]) -> None:
    try:
        callback()
    except Exception:
        log.exception("prioritylock: a listener or signal receiver raised; ignored")


_default: Scheduler | None = None
_default_lock = threading.Lock()


def default_scheduler() -> Scheduler:
    """The process-wide scheduler, started on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Scheduler()
        return _default


def _after_fork() -> None:
    # A forked child inherits the parent's heartbeat object but none of its threads.
    global _default, _default_lock
    _default = None
    _default_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


#: The former name of :class:`Scheduler`.
Heartbeat = Scheduler
