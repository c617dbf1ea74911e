"""The asyncio lock: the same flows as ``Lock`` (``_flows``), awaited on an event loop.

Everything that does no I/O is in ``_driver.LockBase``, shared with ``Lock``; this module keeps
what the loop does. Store I/O never blocks the loop: how a lock calls its store is chosen once,
when it is built (a :class:`Route`): an in-process store (memory) is called inline; a store that
can tell beforehand that a call won't wait (LocalStore: no lock held by another, no sync) makes
that call on the loop; a store with a native async client makes its calls there; every other call
goes to a bounded thread pool shared by the process (32
threads for network stores, 4 for a store on this machine's disk), through the sync stores:
contract-tested on every server, with the same request budget. One ``AsyncScheduler`` per loop
renews and watches every lease held in it. Listeners may be plain or ``async def``: coroutines
are awaited on the loop, and a plain ``on_cleanup_notification`` runs on a worker thread so that
a long cleanup never stalls the loop.

Deadlines: a store call is awaited only until its effect's ``by`` (``asyncio.wait_for`` around the
shielded call; ``_runner.FlowRunner._gave_up``): it then runs on to its end unwatched.

Cancellation: a task cancelled inside ``lock()``/``try_lock()`` first lets the store calls in
flight finish, then settles what it may have written (``_flows.settle_abandoned``: a lease or a
request of its claim is released or withdrawn), shielded and bounded by the store timeout.
``unlock()`` and the exit of ``async with`` run shielded, so they complete even when the
surrounding task is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator
from concurrent.futures import Executor
from types import TracebackType
from typing import Any, ClassVar, Generic

from prioritylock import _effects as effects
from prioritylock import _flows as flows
from prioritylock import signals
from prioritylock._ascheduler import AsyncScheduler, AsyncTask, ScheduledAsyncTask, loop_scheduler
from prioritylock._clock import FakeClock
from prioritylock._config import LockConfig
from prioritylock._driver import LockBase, cleanup_notice
from prioritylock._errors import NotLockOwner
from prioritylock._info import LockInfo
from prioritylock._lease import new_lock_id
from prioritylock._runner import FlowRun, FlowRunner, News, StoreCall, T, call_pool, log, send
from prioritylock._wake import LoopWaiter, Waiter, on_loop
from prioritylock.stores._base import WOULD_BLOCK, ObjectStore

__all__ = ["AsyncLock", "LoopRunner", "shielded"]

#: Store calls in flight at once across the process: network stores wait on the network, so
#: many may be in flight; a store on this machine's disk answers in microseconds, and fewer
#: threads mean less contention for the GIL with the event loop.
NETWORK_WORKERS = 32
DISK_WORKERS = 4


def _io_pool(network: bool) -> Executor:
    if network:
        return call_pool("prioritylock-aio-net", NETWORK_WORKERS)
    return call_pool("prioritylock-aio-disk", DISK_WORKERS)


def _nowait_entry(store: object) -> Callable[..., object] | None:
    """The store's way to make a call on the loop without waiting, if it has one: a method
    ``_try_nowait(op, *args)`` (``stores._base.NonBlocking``, offered by LocalStore) that makes
    the call named ``op`` at once or returns ``WOULD_BLOCK`` having done nothing. Only the
    store's own: one that a wrapper passes on (``__getattr__``) would bypass the wrapper."""
    entry = getattr(store, "_try_nowait", None)
    return entry if callable(entry) and getattr(entry, "__self__", None) is store else None


def _native_entry(store: object) -> Callable[..., Awaitable[Any] | None] | None:
    """The store's way to make a call with native async I/O, if it has one: a method
    ``_call_async(op, *args)`` (``stores._base.NativeAsync``, offered by the cloud stores that
    have an async client) that returns an awaitable making the call named ``op``, or ``None``.
    Only the store's own, as for ``_nowait_entry``."""
    entry = getattr(store, "_call_async", None)
    return entry if callable(entry) and getattr(entry, "__self__", None) is store else None


class Route:
    """How an ``AsyncLock`` makes its store calls, chosen once when the lock is built
    (:func:`route_for`): :meth:`now` makes a call on the loop when the store can tell that it
    won't wait (``nowait``, LocalStore's quick path), else returns ``WOULD_BLOCK`` having done
    nothing; :meth:`later` makes it where it may wait: on the store's native async client if it
    has one for the call (``native``), else on the I/O thread pool."""

    __slots__ = ("_native", "_nowait", "_pool")

    def __init__(
        self,
        pool: Executor,
        nowait: Callable[..., object] | None = None,
        native: Callable[..., Awaitable[Any] | None] | None = None,
    ) -> None:
        self._pool, self._nowait, self._native = pool, nowait, native

    def now(self, call: StoreCall) -> Any:
        return WOULD_BLOCK if self._nowait is None else self._nowait(call.op, *call.args)

    def later(self, call: StoreCall) -> Awaitable[Any]:
        pending = None if self._native is None else self._native(call.op, *call.args)
        if pending is not None:
            return pending
        return asyncio.get_running_loop().run_in_executor(self._pool, call.fn, *call.args)


class InlineRoute(Route):
    """An in-process store (memory): every call inline, in microseconds."""

    __slots__ = ()

    def now(self, call: StoreCall) -> Any:
        return call()


#: The inline routes, by whether the store is shared across hosts: they keep nothing of a store.
_inline_routes: dict[bool, InlineRoute] = {}


def route_for(store: ObjectStore) -> Route:
    """The route for a lock on ``store`` (one for every lock on an in-process store)."""
    network = store.capabilities.shared_across_hosts
    if not store.capabilities.shared_across_processes:
        route = _inline_routes.get(network)
        if route is None:
            route = _inline_routes[network] = InlineRoute(_io_pool(network))
        return route
    return Route(_io_pool(network), _nowait_entry(store), _native_entry(store))


class LoopRunner(FlowRunner):
    """The asyncio driver of any flow (a lease's, Hudi's): store calls by the route chosen when
    the lock was built, awaited only until their effect's ``by``; a guard (an ``asyncio.Lock``)
    per object that pauses let go of; scheduled tasks on the loop's ``AsyncScheduler``. The
    effects it awaits are those deriving from ``_effects.Waits``."""

    def _init_loop(self, scheduler: AsyncScheduler | None) -> None:
        self._fake = isinstance(self._clock, FakeClock)
        self._scheduler = scheduler
        self._route = route_for(self._store)
        # Every call made inline, in microseconds: performed at once, never awaited (``_run``).
        self._inline = isinstance(self._route, InlineRoute)
        self._straight = self._inline
        self._io: asyncio.Lock | None = None
        self._guard_held = False  # acquire() holds the guard (its pauses let go of it)
        self._inflight: asyncio.Future[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _guard(self) -> asyncio.Lock:
        if self._io is None:
            self._io = asyncio.Lock()
        return self._io

    def _sched(self) -> AsyncScheduler:
        if self._scheduler is None:
            self._scheduler = loop_scheduler(self._clock)
        return self._scheduler

    async def _run(
        self, flow: Generator[Any, Any, T], cancelled: list[BaseException] | None = None
    ) -> T:
        """Drive ``flow`` to its end on this loop. The caller holds the guard; pauses let go.
        ``cancelled``: the flow goes on to its end through a cancellation of the task (an
        effect it awaited counts as done), which is put there for the caller to raise."""
        stepper = FlowRun(flow)
        inline = self._inline  # its store calls are made at once (``_store_call``): not awaited
        try:
            while (effect := stepper.next()) is not None:
                try:
                    if isinstance(effect, effects.Waits) and not (
                        inline and isinstance(effect, effects.StoreCall)
                    ):
                        stepper.value = await self._perform(effect)
                    else:  # done at once (most effects): no coroutine to make and await
                        stepper.value = self._perform_effect(effect)
                except Exception as exc:
                    stepper.error = exc
                except asyncio.CancelledError as exc:
                    if cancelled is None:
                        raise
                    cancelled.append(exc)
        finally:
            flow.close()
        return stepper.result

    async def _perform(self, effect: Any) -> Any:
        """Perform an effect to be waited for (a store call on a store not in-process, a
        sleep, a pause)."""
        return await self._perform_effect(effect)

    def _store_call(self, call: StoreCall) -> Any:
        """The store call's awaitable; on an in-process store (``_inline``), its result."""
        if self._inline:
            return self._call_here(call)
        return self._call(call)

    async def _call(self, call: StoreCall) -> Any:
        """A store call by the route chosen for this lock. If the task is cancelled meanwhile,
        the call still finishes (``_inflight``) before anything is settled."""
        done = self._call_here(call, lambda: self._route.now(call))
        if done is not WOULD_BLOCK:
            return done
        left = self._time_left(call)
        future = asyncio.ensure_future(self._route.later(call))
        self._after_write_when_done(call, future)  # even if this task is cancelled meanwhile
        self._inflight = future
        try:
            if left is None:
                return await asyncio.shield(future)
            return await asyncio.wait_for(asyncio.shield(future), left)
        except asyncio.TimeoutError:  # the builtin TimeoutError from Python 3.11 on
            if left is None:
                raise  # what the call itself raised
            if future.done():
                # It ended just as the wait ran out (the shield was cancelled first): its answer,
                # not the wait's TimeoutError, is the outcome (a bare TimeoutError reached a
                # caller of lock() in a loaded CI run on SeaweedFS).
                return future.result()
            raise self._gave_up(call, future, left) from None
        finally:
            if future.done():
                self._inflight = None

    async def _sleep(self, seconds: float) -> None:
        if self._fake:
            self._clock.sleep(seconds)  # a test clock: time moves at once
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(seconds)

    def _new_waiter(self) -> Waiter:
        return LoopWaiter(self)

    async def _pause(self, seconds: float, woken: bool, wake: Waiter | None) -> bool:
        """Wait between attempts without holding the guard, woken early by a notice (a release
        in this process) if ``woken``. True when the wait is to end (this object was closed)."""
        if self._closed:
            return True
        guard = self._guard()
        self._guard_held = False
        guard.release()
        try:
            event = wake.event if isinstance(wake, LoopWaiter) else None
            if event is not None and event.is_set() and not woken:
                event.clear()  # a notice, not for us
            if event is None or event.is_set():
                await self._sleep(0 if event is not None else seconds)
            elif self._fake:
                await self._sleep(seconds)
            else:
                end = asyncio.get_running_loop().time() + seconds
                while (left := end - asyncio.get_running_loop().time()) > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(event.wait(), left)  # aclose() sets it too
                    if woken or self._closed:
                        break
                    event.clear()  # a notice, not for us: wait on
            self._rearm()
        finally:
            await guard.acquire()  # cancelled here: not held, and _acquire knows it
            self._guard_held = True
        return self._closed

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        _background.add(task)
        task.add_done_callback(_background.discard)

    def _task(self, make: Callable[[], Generator[Any, Any, T]]) -> Callable[[], Awaitable[T]]:
        return _Guarded(self, make)

    def _schedule(self, task: AsyncTask, when: float, name: str, **how: Any) -> ScheduledAsyncTask:
        self._loop = asyncio.get_running_loop()  # where notices from other threads are sent
        return self._sched().schedule(task, when, name, **how)

    def _unschedule(self, entry: ScheduledAsyncTask) -> None:
        self._sched().cancel(entry)

    def _bring_forward(self, entry: ScheduledAsyncTask, when: float | None = None) -> None:
        scheduler, loop = self._sched(), self._loop
        if loop is not None:
            clock = self._clock

            def run() -> None:  # (the clock read on the loop: now, when the loop gets to it)
                scheduler.reschedule(entry, clock.monotonic() if when is None else when)

            on_loop(loop, run)

    def _tell(self, news: News) -> None:
        """Tell receivers and the listener now: plain callables run at once on the loop (they
        cannot wait on the lock's guard), an ``async def`` listener method as a task."""
        if news.method is None or not inspect.iscoroutinefunction(news.method):
            self._tell_now(news)
        else:
            news.send(self._sender)
            self._spawn(_call_listener(news.method, *news.args))


class _Guarded(Generic[T]):
    """``await task()`` runs the flow ``make()`` under ``runner``'s guard: a scheduler's task,
    one small object (a closure is four, kept for as long as the lease is held)."""

    __slots__ = ("make", "runner")

    def __init__(self, runner: LoopRunner, make: Callable[[], Generator[Any, Any, T]]) -> None:
        self.runner, self.make = runner, make

    async def __call__(self) -> T:
        async with self.runner._guard():
            return await self.runner._run(self.make())


class AsyncLock(LoopRunner, LockBase):
    """A distributed lock on one lease document, for asyncio. Build it with
    :meth:`LockBuilder.build_async() <prioritylock.LockBuilder.build_async>`.

    The same names, options, errors, signals and priorities as :class:`~prioritylock.Lock`, and
    the same lease documents: sync and async clients of one lock interoperate. Not reentrant;
    use one object per task that contends. Use it from one event loop.
    """

    _kind: ClassVar[str] = "AsyncLock"
    _who: ClassVar[str] = "task"

    def __init__(self, config: LockConfig, *, scheduler: AsyncScheduler | None = None) -> None:
        LockBase.__init__(self, config)
        self._init_loop(scheduler)

    # -- public API ------------------------------------------------------------------------------

    async def try_lock(self) -> bool:
        """Take the lock if that can be done now; return whether this object holds it.

        As :meth:`Lock.try_lock <prioritylock.Lock.try_lock>`: a strictly higher priority
        records a request and waits for the handover; a store that refuses or fails raises
        ``StoreUnavailable`` within min(store timeout, 2 s), one that never answers within the
        store timeout.

        :raises LockHeld: this lock object already holds the lock.
        :raises PreemptionTimeout: a non-forceful request's wait ran out; it was withdrawn.
        :raises ConditionFailed: an emergency override's guard no longer matches the lease.
        :raises CorruptLease: the lease document can't be trusted; it was left untouched.
        :raises StoreError: the store failed, or could not be reached, within the bound above.
        """
        self._check_not_held()
        return await self._acquire(blocking=False, deadline=None)

    async def lock(self, timeout: float | None = None) -> None:
        """Wait until this object holds the lock.

        :param timeout: seconds to wait (None: forever).
        :raises LockTimeout: not acquired within ``timeout``, whatever the store does: also when
            the store could not be reached until then (its ``__cause__`` is the last
            ``StoreUnavailable``).
        :raises LockHeld: this lock object already holds the lock.
        :raises CorruptLease: the lease document can't be trusted.
        :raises StoreError: the store failed for a whole store timeout before the deadline.
        """
        if not await self._acquire(blocking=True, deadline=self._deadline(timeout)):
            raise self._timed_out(timeout)

    async def renew(self) -> None:
        """Renew the lease now (the scheduler also does this on its own).

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it.
        """
        async with self._guard():
            await self._run(self._renew_flow())

    async def unlock(self) -> None:
        """Release the lock; with a higher-priority request pending, pass it to the requestor.

        Completes even if the calling task is cancelled meanwhile (shielded; bounded by the
        store timeout).

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it before this call.
        :raises StoreUnavailable: the release could not land within the store timeout; it is
            retried in the background until it lands or the lease is no longer ours.
        """
        guard = self._guard()
        if self._inline and self._cfg.listener is None and not guard.locked():
            await self._unlock_here(guard)
        else:
            await shielded(self._unlock())

    async def _unlock_here(self, guard: asyncio.Lock) -> None:
        """:meth:`_unlock` without the task ``shielded`` runs it in (and its two turns of the
        loop), where nothing in it waits: the guard free, every store call made inline, no
        listener to await. Only a pause between attempts on a failing store can; the release
        goes on through a cancellation there, and the caller is told of it at the end, as
        ``shielded`` does."""
        cancelled: list[BaseException] = []
        try:
            async with guard:  # (free: taken without waiting)
                outcome = await self._run(self._start_release(), cancelled)
            if outcome is not None and (news := self._released_news(outcome)) is not None:
                await self._announce(news)  # receivers only: nothing awaited
        except Exception:
            if not cancelled:
                raise
        if cancelled:
            raise cancelled[0]

    async def _unlock(self) -> None:
        async with self._guard():
            outcome = await self._run(self._start_release())
        if outcome is not None and (news := self._released_news(outcome)) is not None:
            await self._announce(news)  # (no coroutine made when nobody listens)

    async def info(self) -> LockInfo | None:
        """The lease as stored now (one read), or None if the lock was never taken.

        :raises CorruptLease: the document can't be trusted.
        :raises StoreError: the store failed.
        """
        async with self._guard():
            found = await self._run(flows.read(self._st))
        return None if found.lease is None else LockInfo.from_lease(found.lease)

    async def force_unlock(
        self,
        message: str,
        *,
        by: str | None = None,
        overwrite_corrupt: bool = False,
        if_fence: int | None = None,
        if_owner: str | None = None,
    ) -> LockInfo | None:
        """Free the lock whoever holds it: as :meth:`Lock.force_unlock
        <prioritylock.Lock.force_unlock>`.

        :raises ConfigError: no message, or a guard that is not a fence / an owner.
        :raises ConditionFailed: a guard is given and the lease shows something else.
        :raises CorruptLease: the document is corrupt and ``overwrite_corrupt`` is false.
        """
        flow = self._force_unlock_flow(message, by, overwrite_corrupt, if_fence, if_owner)
        async with self._guard():
            was = await self._run(flow)
        return LockInfo.from_lease(was) if was is not None else None

    async def aclose(self) -> None:
        """Release the lock if held and stop renewing; the object is not used afterwards.

        A task waiting for the lock with this object (``lock()``) ends with
        :class:`~prioritylock.LockCancelled`, leaving nothing claimed.
        """
        if self._begin_close():
            await self._unlock_if_held()

    def acquire(self, timeout: float | None = None) -> _Acquiring:
        """An async context manager that waits for the lock on entry (as :meth:`lock`) and
        releases it on exit::

            async with lock.acquire(timeout=5):
                ...
        """
        return _Acquiring(self, timeout)

    async def __aenter__(self) -> AsyncLock:
        await self.lock()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.unlock()
        except Exception as error:
            self._leaving_with(error, exc)

    # -- the driver --------------------------------------------------------------------------------

    # -- acquiring ---------------------------------------------------------------------------------

    async def _acquire(self, *, blocking: bool, deadline: float | None) -> bool:
        self._begin_acquire()  # (``_acquisition()``, spelled out: two calls the less)
        try:
            lock_id, got = new_lock_id(), False
            guard = self._guard()
            try:
                await guard.acquire()
                self._guard_held = True
                try:
                    got = await self._run(self._start_acquire(lock_id, blocking, deadline))
                finally:
                    self._armed = None
                    if not got:
                        self._acquire_ended(lock_id)
                    if self._guard_held:
                        self._guard_held = False
                        guard.release()
                if got and self._closed:
                    # Closed while the last write was on its way: never hold on.
                    await self._unlock_if_held()
                    raise self._cancelled()
                if got and (news := self._acquired_news()) is not None:
                    await self._announce(news)  # (no coroutine made when nobody listens)
            except asyncio.CancelledError:
                await shielded(self._abandon(lock_id))
                raise
        finally:
            self._acquiring = False
        return got

    async def _unlock_if_held(self) -> None:
        with contextlib.suppress(NotLockOwner):
            await self.unlock()

    async def _abandon(self, lock_id: str) -> None:
        """A cancelled acquire: let the store call in flight finish, then release or withdraw
        whatever of ours it may have left in the lease."""
        inflight = self._inflight
        for call in {*self._late, *([inflight] if inflight is not None else [])}:
            with contextlib.suppress(Exception):
                await call
        self._inflight = None
        async with self._guard():
            holding = self._st.holding
            if holding is not None and holding.lock_id == lock_id and holding.active:
                outcome = await self._run(flows.release(self._st, holding, cleanup_done=False))
                await self._announce(self._released_news(outcome))
                return
            try:
                await self._run(flows.settle_abandoned(self._st, lock_id))
            except Exception:
                log.exception(
                    "prioritylock: could not settle the cancelled acquire of %r", self._key
                )

    # -- holding -----------------------------------------------------------------------------------

    def _start_cleanup(self, cleanup: effects.Cleanup) -> None:
        self._spawn(self._cleanup(cleanup))

    async def _cleanup(self, cleanup: effects.Cleanup) -> None:
        notice = cleanup_notice(self._sender, cleanup)
        send(signals.cleanup_requested, self._sender, notice=notice)
        method = None if self._cfg.listener is None else self._cfg.listener.on_cleanup_notification
        try:
            if method is None:
                pass
            elif inspect.iscoroutinefunction(method):
                await method(notice)
            else:  # a plain cleanup may take its time: not on the loop
                await asyncio.get_running_loop().run_in_executor(None, method, notice)
        except asyncio.CancelledError:
            # The cleanup did not finish: handing over now would pass on a half-cleaned
            # resource. Keep the lock; the requestor waits out its window (a forceful one
            # then takes the lock, recorded, and we are told we lost it). A listener that
            # raised CancelledError itself chose to keep the lock: not an error (told apart
            # from a cancelled task from Python 3.11 on, by Task.cancelling).
            cancelling = getattr(asyncio.current_task(), "cancelling", None)
            chosen = cancelling is not None and cancelling() == 0
            log.log(
                logging.INFO if chosen else logging.ERROR,
                "prioritylock: cleanup listener of %r %s; not handing over",
                self._key,
                "declined to finish (raised CancelledError)" if chosen else "was cancelled",
            )
            cleanup.holding.cleaning = False
            return
        except Exception:
            self._cleanup_raised()
        outcome = await self._task(lambda: self._handover_flow(cleanup.holding))()
        await self._announce(self._released_news(outcome))

    async def _announce(self, news: News | None) -> None:
        """Tell now and await the listener (plain or ``async def``)."""
        if news is not None:
            news.send(self._sender)
            if news.method is not None:
                await _call_listener(news.method, *news.args)


class _Acquiring:
    """What :meth:`AsyncLock.acquire` returns."""

    def __init__(self, lock: AsyncLock, timeout: float | None) -> None:
        self._lock = lock
        self._timeout = timeout

    async def __aenter__(self) -> AsyncLock:
        await self._lock.lock(self._timeout)
        return self._lock

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._lock.__aexit__(exc_type, exc, tb)


#: Tasks the library started (listener calls, cleanups): kept referenced until done.
_background: set[asyncio.Task[None]] = set()


async def shielded(coro: Awaitable[T]) -> T:
    """Run ``coro`` to completion even if the calling task is cancelled meanwhile; the caller
    still sees its cancellation once the work is done."""
    task = asyncio.ensure_future(coro)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await asyncio.shield(task)  # cancelled again: the work still completes, unawaited
        raise


async def _call_listener(fn: Callable[..., Any], *args: Any) -> None:
    """Call a listener method, plain or ``async def``; one that raises is logged."""
    try:
        result = fn(*args)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("prioritylock: a listener raised; ignored")
