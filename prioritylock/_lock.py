"""The synchronous lock: drives the flows in ``_flows`` on threads.

Everything that does no I/O is in ``_driver.LockBase``, shared with ``AsyncLock``; this module
keeps what threads do (:class:`ThreadRunner`, which Hudi's ``HudiTableLock`` runs on too): store
calls on the calling thread under the object's ``_io`` lock (so the heartbeat and the user's own
calls never interleave their compare-and-swaps), pauses between attempts to acquire that let go
of it, and callbacks and signals run outside it (on the scheduler's notifier thread, or a thread
of their own for a holder's cleanup).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator
from types import TracebackType
from typing import Any, ClassVar

import attrs

from prioritylock import _effects as effects
from prioritylock import _flows as flows
from prioritylock import signals
from prioritylock._config import LockConfig
from prioritylock._driver import LockBase, cleanup_notice
from prioritylock._errors import NotLockOwner, StoreUnavailable
from prioritylock._info import LockInfo
from prioritylock._lease import new_lock_id
from prioritylock._runner import CallPool, Done, FlowRunner, News, StoreCall, T, call_pool
from prioritylock._scheduler import ScheduledTask, Scheduler, Task, default_scheduler
from prioritylock._wake import ThreadWaiter, Waiter

__all__ = ["Lock", "ThreadRunner"]


class ThreadRunner(FlowRunner):
    """The threaded driver of any flow (a lease's, Hudi's): store calls on the calling thread
    under the object's ``_io`` lock (so the heartbeat and the user's own calls never interleave
    their compare-and-swaps), bounded in time on a worker thread for a network store; pauses
    between attempts to acquire that let go of it; scheduled tasks on the process's scheduler;
    news told on its notifier thread."""

    _hb: Scheduler
    _io: threading.RLock
    _cancel: threading.Event | None  # the running acquire's cancel event

    def _init_threads(self, scheduler: Scheduler | None) -> None:
        self._hb = scheduler or default_scheduler()
        self._io = threading.RLock()
        self._cancel = None
        self._straight = not self._calls.bounded  # ``_store_call`` would make them here too

    def _run(self, flow: Generator[Any, Any, T]) -> T:
        """Drive ``flow`` to its end: perform each effect it yields, send back the result (or
        throw in the store's error). The caller holds ``_io``; pauses let go of it."""
        if type(flow) is Done:  # already at its end: its outcome, without a StopIteration
            return flow.value  # type: ignore[no-any-return]
        # ``FlowRun``, spelled out: this loop runs for every effect of every flow.
        perform = self._perform
        value: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    effect = flow.send(value) if error is None else flow.throw(error)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                try:
                    value, error = perform(effect), None
                except Exception as exc:
                    value, error = None, exc
        finally:
            flow.close()

    def _perform(self, effect: Any) -> Any:
        return self._perform_effect(effect)

    def _store_call(self, call: StoreCall) -> Any:
        if call.by is None:  # no time bound (a store of this machine): made straight
            return self._call_here(call)
        return self._call_here(call, lambda: self._bounded(call))

    def _bounded(self, call: StoreCall) -> Any:
        """Make ``call`` here if it has no time bound; else on a worker thread, waited for at
        most the time it has left, then let run on to its end unwatched (``_gave_up``) while
        ``StoreUnavailable`` is raised."""
        if (left := self._time_left(call)) is None:
            return call()
        future = _call_pool().submit(call)
        try:
            return future.result(left)
        except Exception:
            if future.done():
                # What the call itself returned or raised: it may have ended just as the wait
                # ran out, and then its answer, not the wait's TimeoutError, is the outcome.
                return future.result()
        if future.cancel():  # it never started: nothing was sent
            raise StoreUnavailable(f"{self._key!r}: no time left for a store call")
        error = self._gave_up(call, future, left)
        self._after_write_when_done(call, future)
        raise error

    def _sleep(self, seconds: float) -> None:
        self._clock.sleep(seconds)

    def _new_waiter(self) -> Waiter:
        return ThreadWaiter(self)

    def _pause(self, seconds: float, woken: bool, wake: Waiter | None) -> bool:
        """Wait between attempts without holding ``_io``, woken early by a notice (a release in
        this process) if ``woken``. True when the wait is to end: cancelled, or this object
        closed."""
        cancel = self._cancel
        if self._closed or (cancel is not None and cancel.is_set()):
            return True
        self._io.release()  # acquire() runs at the top level: this lets go of it
        try:
            event = None if not isinstance(wake, ThreadWaiter) else wake.event
            end = self._clock.monotonic() + seconds
            # Three things can end this wait: a notice (wake, if woken), close() (which sets the
            # event too) and the caller's event. A thread waits on one event, so with a cancel
            # event the wait goes in short slices.
            while not self._closed and not (cancel is not None and cancel.is_set()):
                left = end - self._clock.monotonic()
                if left <= 0:
                    break
                if event is not None and event.is_set():
                    if woken:
                        break
                    event.clear()  # a notice, not for us: wait on
                    continue  # close() marks the object closed before it sets the event
                step = left if cancel is None else min(left, _CANCEL_SLICE)
                if event is None:
                    self._clock.sleep(step)
                else:
                    self._clock.wait(event, step)  # close() sets it too
                if cancel is None and (woken or event is None):
                    break
            self._rearm()
        finally:
            self._io.acquire()
        return self._closed or (cancel is not None and cancel.is_set())

    def _task(self, make: Callable[[], Generator[Any, Any, T]]) -> Callable[[], T]:
        def run() -> T:
            with self._io:
                return self._run(make())

        return run

    def _schedule(self, task: Task, when: float, name: str, **how: Any) -> ScheduledTask:
        return self._hb.schedule(task, when, name, **how)

    def _unschedule(self, entry: ScheduledTask) -> None:
        self._hb.cancel(entry)

    def _bring_forward(self, entry: ScheduledTask, when: float | None = None) -> None:
        self._hb.reschedule(entry, self._clock.monotonic() if when is None else when)

    def _tell(self, news: News) -> None:
        self._hb.dispatch(lambda: self._tell_now(news))


class Lock(ThreadRunner, LockBase):
    """A distributed lock on one lease document. Build it with :class:`~prioritylock.LockBuilder`.

    One lock object is one client, on every store: not reentrant (``lock()`` while it holds the
    lock raises :class:`~prioritylock.LockHeld`), and not shared between threads that contend (a
    second thread's ``lock()`` while one waits or holds raises ``LockHeld`` too): threads that
    contend build one object each. Any thread may call the other methods.
    """

    _kind: ClassVar[str] = "Lock"
    _who: ClassVar[str] = "thread"

    def __init__(self, config: LockConfig) -> None:
        LockBase.__init__(self, config)
        self._init_threads(config.heartbeat)

    # -- public API ------------------------------------------------------------------------------

    def try_lock(self) -> bool:
        """Take the lock if that can be done now; return whether this object holds it.

        A client whose priority is strictly higher than the holder's records a request and waits
        for the handover (at most min(its waiting timeout, the holder's cleanup timeout)); equal
        or lower priority returns False at once.

        It waits for no failing store either: it stops retrying a store operation after
        min(store timeout, 2 s), so a store that refuses connections or fails raises
        ``StoreUnavailable`` within 2 s; a request the store never answers is given up at the
        store timeout.

        :raises LockHeld: this lock object already holds the lock.
        :raises PreemptionTimeout: a non-forceful request's wait ran out; it was withdrawn.
        :raises ConditionFailed: an emergency override's guard no longer matches the lease.
        :raises CorruptLease: the lease document can't be trusted; it was left untouched.
        :raises StoreError: the store failed, or could not be reached, within the bound above.
        """
        self._check_not_held()
        return self._acquire(blocking=False, deadline=None, cancel=None)

    def lock(self, timeout: float | None = None, *, cancel: threading.Event | None = None) -> None:
        """Wait until this object holds the lock.

        :param timeout: seconds to wait (None: forever).
        :param cancel: set it (from any thread) to end the wait: ``lock`` then raises
            :class:`~prioritylock.LockCancelled`, with nothing left claimed. :meth:`close` ends a
            wait the same way.
        :raises LockTimeout: not acquired within ``timeout``, whatever the store does: also when
            the store could not be reached until then (its ``__cause__`` is the last
            ``StoreUnavailable``).
        :raises LockCancelled: the wait was cancelled, or the lock object closed meanwhile.
        :raises LockHeld: this lock object already holds the lock, or another thread is
            acquiring with it.
        :raises CorruptLease: the lease document can't be trusted.
        :raises StoreError: the store failed for a whole store timeout before the deadline.
        """
        deadline = self._deadline(timeout)
        if not self._acquire(blocking=True, deadline=deadline, cancel=cancel):
            raise self._timed_out(timeout)

    def acquire(
        self, timeout: float | None = None, *, cancel: threading.Event | None = None
    ) -> _Acquired:
        """Wait for the lock now (as :meth:`lock`), and return a context manager whose exit
        releases it, in the manner of filelock::

            with lock.acquire(timeout=5):
                ...

        :raises LockTimeout: see :meth:`lock`, like every error it raises.
        """
        self.lock(timeout, cancel=cancel)
        return _Acquired(self)

    def renew(self) -> None:
        """Renew the lease now (the heartbeat also does this on its own).

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it.
        """
        with self._io:
            self._run(self._renew_flow())

    def unlock(self) -> None:
        """Release the lock; with a higher-priority request pending, pass it to the requestor.

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it before this call.
        :raises StoreUnavailable: the release could not land within the store timeout; it is
            retried in the background until it lands or the lease is no longer ours.
        """
        with self._io:
            released = self._run(self._start_release())
        if released is not None and (news := self._released_news(released)) is not None:
            self._announce(news)

    def info(self) -> LockInfo | None:
        """The lease as stored now (one read), or None if the lock was never taken.

        :raises CorruptLease: the document can't be trusted.
        :raises StoreError: the store failed.
        """
        with self._io:
            seen = self._run(flows.read(self._st))
        return None if seen.lease is None else LockInfo.from_lease(seen.lease)

    def force_unlock(
        self,
        message: str,
        *,
        by: str | None = None,
        overwrite_corrupt: bool = False,
        if_fence: int | None = None,
        if_owner: str | None = None,
    ) -> LockInfo | None:
        """Free the lock whoever holds it (break-glass; recorded with ``message``; next fence).

        :param if_fence: act only while the lease still shows this fence (what you saw in
            ``info()``); checked and written as one compare-and-swap.
        :param if_owner: act only while the lease is still held by this owner.
        :param overwrite_corrupt: also replace a corrupt or foreign document with a free lease.
            Its fence is then unknown, so the new fence is the wall clock in milliseconds (or
            the old fence + 1 if that can still be read and is larger): far beyond any fence
            reached by counting, so fencing tokens keep growing.
        :returns: the lease as it was before, or None if the lock was never taken (or the
            document was corrupt).
        :raises ConfigError: no message, or a guard that is not a fence / an owner.
        :raises ConditionFailed: a guard is given and the lease shows something else; nothing
            was written.
        :raises CorruptLease: the document is corrupt and ``overwrite_corrupt`` is false.
        """
        flow = self._force_unlock_flow(message, by, overwrite_corrupt, if_fence, if_owner)
        with self._io:
            before = self._run(flow)
        return None if before is None else LockInfo.from_lease(before)

    def close(self) -> None:
        """Release the lock if held and stop renewing; the object is not used afterwards.

        A wait for the lock in another thread (``lock()``) ends with
        :class:`~prioritylock.LockCancelled`, leaving nothing claimed.
        """
        if self._begin_close():
            self._unlock_if_held()

    def __enter__(self) -> Lock:
        self.lock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self.unlock()
        except Exception as error:
            self._leaving_with(error, exc)

    # -- the driver --------------------------------------------------------------------------------

    # -- acquiring ---------------------------------------------------------------------------------

    def _acquire(
        self, *, blocking: bool, deadline: float | None, cancel: threading.Event | None
    ) -> bool:
        self._begin_acquire()  # (``_acquisition()``, spelled out: two calls the less)
        lock_id, got = new_lock_id(), False
        try:
            with self._io:
                self._cancel = cancel
                try:
                    got = self._run(self._start_acquire(lock_id, blocking, deadline))
                finally:
                    self._armed = self._cancel = None
                    if not got:
                        self._acquire_ended(lock_id)
            if got and (self._closed or (cancel is not None and cancel.is_set())):
                # Closed (or cancelled) while the last write was on its way: never hold on.
                self._unlock_if_held()
                raise self._cancelled()
        finally:
            self._acquiring = False
        if got and (news := self._acquired_news()) is not None:
            self._announce(news)
        return got

    def _unlock_if_held(self) -> None:
        with contextlib.suppress(NotLockOwner):
            self.unlock()

    # -- holding -----------------------------------------------------------------------------------

    def _start_cleanup(self, cleanup: effects.Cleanup) -> None:
        notice = cleanup_notice(self, cleanup)
        listener = self._cfg.listener
        hand_over = self._task(lambda: self._handover_flow(cleanup.holding))

        def cleanup_then_hand_over() -> None:
            self._announce(News(signals.cleanup_requested, {"notice": notice}))
            if listener is not None:
                self._call_cleanup(listener.on_cleanup_notification, notice)
            self._announce(self._released_news(hand_over()))

        self._hb.spawn(cleanup_then_hand_over, f"prioritylock-cleanup {self._key}")

    _perform = LockBase._perform_effect

    #: Tell now, on this thread (the caller's, or the cleanup's).
    _announce = LockBase._tell_now


#: Threads that make the store calls a lock waits for only so long (network stores): a call that
#: outlives its wait keeps its thread until the store's own timeouts end it.
CALL_WORKERS = 32


def _call_pool() -> CallPool:
    return call_pool("prioritylock-call", CALL_WORKERS)


#: How often a wait with a ``cancel`` event looks at it (a notice in this process still wakes
#: the wait at once).
_CANCEL_SLICE = 0.05


@attrs.frozen
class _Acquired:
    """What :meth:`Lock.acquire` returns: leaving its ``with`` block releases the lock."""

    lock: Lock

    def __enter__(self) -> Lock:
        return self.lock

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.lock.__exit__(exc_type, exc, tb)
