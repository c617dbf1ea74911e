"""The asyncio lock: the same flows as ``Lock`` (``_flows``), awaited on an event loop.

Store I/O never blocks the loop: an in-process store (memory) is called inline; a store that
can tell beforehand that a call won't wait (LocalStore: no lock held by another, no sync) makes
that call on the loop; every other call goes to a bounded thread pool shared by the process (32
threads for network stores, 4 for a store on this machine's disk), through the sync stores:
contract-tested on every server, with the same request budget. One ``AsyncScheduler`` per loop
renews and watches every lease held in it. Listeners may be plain or ``async def``: coroutines
are awaited on the loop, and a plain ``on_cleanup_notification`` runs on a worker thread so that
a long cleanup never stalls the loop.

Cancellation: a task cancelled inside ``lock()``/``try_lock()`` first lets the store call in
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
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Any, TypeVar

from prioritylock import _flows as flows
from prioritylock import _lock, signals
from prioritylock._ascheduler import AsyncScheduler, loop_scheduler
from prioritylock._clock import FakeClock
from prioritylock._config import LockConfig
from prioritylock._errors import (
    ConfigError,
    LockCancelled,
    LockHeld,
    LockLost,
    LockTimeout,
    NotLockOwner,
)
from prioritylock._info import LockInfo
from prioritylock._lease import Lease, new_lock_id
from prioritylock.stores._base import WOULD_BLOCK

__all__ = ["AsyncLock"]

log = logging.getLogger("prioritylock")

T = TypeVar("T")

#: Store calls in flight at once across the process: network stores wait on the network, so
#: many may be in flight; a store on this machine's disk answers in microseconds, and fewer
#: threads mean less contention for the GIL with the event loop.
NETWORK_WORKERS = 32
DISK_WORKERS = 4

_pools: dict[bool, ThreadPoolExecutor] = {}
_pool_lock = threading.Lock()


def _io_pool(network: bool) -> ThreadPoolExecutor:
    with _pool_lock:
        pool = _pools.get(network)
        if pool is None:
            workers = NETWORK_WORKERS if network else DISK_WORKERS
            pool = _pools[network] = ThreadPoolExecutor(
                workers, thread_name_prefix="prioritylock-aio-" + ("net" if network else "disk")
            )
        return pool


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


_LoopEvent = tuple[asyncio.AbstractEventLoop, asyncio.Event]


class _AsyncWakeups:
    """In-process wakeups for async waiters: a release (sync or async, any thread) sets the
    events that waiters of the same lock await, each on its own loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[
            tuple[object, str], list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]
        ]
        self._events = {}

    def current(self, store: object, key: str) -> asyncio.Event:
        loop = asyncio.get_running_loop()
        name = (_lock._namespace(store), key)
        with self._lock:
            waiting = self._events.setdefault(name, [])
            for owner, event in waiting:
                if owner is loop:
                    return event
            event = asyncio.Event()
            waiting.append((loop, event))
            return event

    def fire(self, store: object, key: str) -> None:
        with self._lock:
            waiting = self._events.pop((_lock._namespace(store), key), None)
        if not waiting:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, event in waiting:
            if loop is running:
                event.set()
            elif not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # closed meanwhile
                    loop.call_soon_threadsafe(event.set)


_wakeups = _AsyncWakeups()
_lock._on_end.append(_wakeups.fire)


class AsyncLock:
    """A distributed lock on one lease document, for asyncio. Build it with
    :meth:`LockBuilder.build_async() <prioritylock.LockBuilder.build_async>`.

    The same names, options, errors, signals and priorities as :class:`~prioritylock.Lock`, and
    the same lease documents: sync and async clients of one lock interoperate. Not reentrant;
    use one object per task that contends. Use it from one event loop.
    """

    def __init__(self, config: LockConfig, *, scheduler: AsyncScheduler | None = None) -> None:
        self._cfg = config
        self._store = config.store
        self._key = config.key
        self._clock = config.clock
        self._fake = isinstance(config.clock, FakeClock)
        self._scheduler = scheduler
        self._st = _lock.new_state(config)
        self._inline = self._st.inline
        self._pool = _io_pool(config.store.capabilities.shared_across_hosts)
        self._nowait = _nowait_entry(config.store)
        self._native = _native_entry(config.store)
        self._seam = _lock.Seam.of(config)
        self._io: asyncio.Lock | None = None
        self._guard_held = False  # acquire() holds the guard (its pauses let go of it)
        self._acquiring = False
        self._armed: asyncio.Event | None = None
        self._inflight: asyncio.Future[Any] | None = None
        self._closed = False
        # What signals and listeners are given as the lock (tests put a synchronous face here).
        self._sender: Any = self

    # -- public API ------------------------------------------------------------------------------

    @property
    def config(self) -> LockConfig:
        return self._cfg

    @property
    def key(self) -> str:
        """The store key of this lock's lease document."""
        return self._key

    async def try_lock(self) -> bool:
        """Take the lock if that can be done now; return whether this object holds it.

        As :meth:`Lock.try_lock <prioritylock.Lock.try_lock>`: a strictly higher priority
        records a request and waits for the handover.

        :raises LockHeld: this lock object already holds the lock.
        :raises PreemptionTimeout: a non-forceful request's wait ran out; it was withdrawn.
        :raises ConditionFailed: an emergency override's guard no longer matches the lease.
        :raises CorruptLease: the lease document can't be trusted; it was left untouched.
        :raises StoreError: the store failed past the store timeout.
        """
        self._check_open()
        if self.is_current_owner():
            raise LockHeld(f"{self._key!r}: this lock object already holds the lock")
        return await self._acquire(blocking=False, deadline=None)

    async def lock(self, timeout: float | None = None) -> None:
        """Wait until this object holds the lock.

        :param timeout: seconds to wait (None: forever).
        :raises LockTimeout: not acquired within ``timeout``.
        :raises LockHeld: this lock object already holds the lock.
        :raises CorruptLease: the lease document can't be trusted.
        :raises StoreError: the store failed past the store timeout.
        """
        self._check_open()
        _lock.check_timeout(timeout)
        if self.is_current_owner():
            raise LockHeld(f"{self._key!r}: this lock object already holds the lock")
        deadline = None if timeout is None else self._clock.monotonic() + float(timeout)
        if not await self._acquire(blocking=True, deadline=deadline):
            seen = self._st.seen
            holder = flows.holder_name(seen.lease if seen is not None else None)
            raise LockTimeout(f"{self._key!r}: not acquired within {timeout} s (held by {holder})")

    async def renew(self) -> None:
        """Renew the lease now (the scheduler also does this on its own).

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it.
        """
        async with self._guard():
            holding = self._require_holding()
            await self._run(flows.renew_now(self._st, holding))

    async def unlock(self) -> None:
        """Release the lock; with a higher-priority request pending, pass it to the requestor.

        Completes even if the calling task is cancelled meanwhile (shielded; bounded by the
        store timeout).

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it before this call.
        :raises StoreUnavailable: the release could not land within the store timeout; it is
            retried in the background until it lands or the lease is no longer ours.
        """
        await _shielded(self._unlock())

    async def _unlock(self) -> None:
        async with self._guard():
            holding = self._require_holding()
            released = await self._run(flows.release(self._st, holding, cleanup_done=False))
        await self._announce_released(released)

    async def info(self) -> LockInfo | None:
        """The lease as stored now (one read), or None if the lock was never taken.

        :raises CorruptLease: the document can't be trusted.
        :raises StoreError: the store failed.
        """
        async with self._guard():
            seen = await self._run(flows.read(self._st))
        return None if seen.lease is None else LockInfo.from_lease(seen.lease)

    def is_current_owner(self) -> bool:
        """Whether this object holds the lock now, judged on its own clock (no request)."""
        holding = self._st.holding
        now = self._clock.monotonic()
        if flows.expired(holding, now):
            assert holding is not None
            self._lose(holding, "expired")
        return flows.believes(holding, now)

    @property
    def fencing_token(self) -> int:
        """The fence of the current holding: pass it to the resource you protect.

        :raises NotLockOwner: not held.
        :raises LockLost: held and lost.
        """
        return self._require_holding().fence

    @property
    def lock_id(self) -> str:
        """The unguessable id of the current holding, made by the library.

        :raises NotLockOwner: not held.
        :raises LockLost: held and lost.
        """
        return self._require_holding().lock_id

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
        _lock.check_force_unlock(message, if_fence, if_owner)
        async with self._guard():
            before = await self._run(
                flows.force_unlock(
                    self._st,
                    by=by or self._cfg.owner,
                    message=message,
                    overwrite_corrupt=overwrite_corrupt,
                    if_fence=if_fence,
                    if_owner=if_owner,
                )
            )
        return None if before is None else LockInfo.from_lease(before)

    async def aclose(self) -> None:
        """Release the lock if held and stop renewing; the object is not used afterwards.

        A task waiting for the lock with this object (``lock()``) ends with
        :class:`~prioritylock.LockCancelled`, leaving nothing claimed.
        """
        if self._closed:
            return
        self._closed = True
        if self._acquiring:
            _lock.fire_wakeups(self._store, self._key)  # our waiter wakes and sees it closed
        holding = self._st.holding
        if holding is not None and not holding.ended and holding.lost is None:
            with contextlib.suppress(NotLockOwner):
                await self.unlock()

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
        except LockLost:
            if exc is None:
                raise
        except Exception:
            if exc is None:
                raise
            log.exception("prioritylock: unlock of %r failed while leaving a with-block", self._key)

    def __repr__(self) -> str:
        state = "held" if self.is_current_owner() else "not held"
        return (
            f"<AsyncLock {self._key!r} owner={self._cfg.owner!r} "
            f"priority={self._cfg.priority} {state}>"
        )

    # -- the driver --------------------------------------------------------------------------------

    def _guard(self) -> asyncio.Lock:
        if self._io is None:
            self._io = asyncio.Lock()
        return self._io

    def _sched(self) -> AsyncScheduler:
        if self._scheduler is None:
            self._scheduler = loop_scheduler(self._clock)
        return self._scheduler

    async def _run(self, flow: flows.Flow[T]) -> T:
        """Drive ``flow`` to its end on this loop. The caller holds the guard; pauses let go."""
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                try:
                    effect = flow.send(value) if error is None else flow.throw(error)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                value = error = None
                try:
                    value = await self._perform(effect)
                except Exception as exc:
                    error = exc
        finally:
            flow.close()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """A store call: inline for an in-process store; on the loop for a store that can tell
        beforehand that it won't wait (``_nowait_entry``) and says so; on the store's native
        async client if it has one for the call (``_native_entry``); else on the I/O pool. If
        the task is cancelled meanwhile, the call still finishes (``_inflight``) before anything
        is settled."""
        if self._inline:
            return fn(*args)
        if self._nowait is not None:
            done = self._nowait(fn.__name__, *args)
            if done is not WOULD_BLOCK:
                return done  # type: ignore[return-value]  # what fn returns
        pending = None if self._native is None else self._native(fn.__name__, *args)
        future: asyncio.Future[T]
        if pending is not None:
            future = asyncio.ensure_future(pending)
        else:
            future = asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        self._inflight = future
        try:
            return await asyncio.shield(future)
        finally:
            if future.done():
                self._inflight = None

    async def _perform(self, effect: object) -> Any:
        store = self._store
        key = self._key
        if effect is flows.NOW:
            return self._clock.monotonic(), self._clock.time()
        kind = type(effect)
        if kind is flows.Put or kind is flows.Read:
            call, args = _lock.store_call(self._seam, effect)
            return await self._call(call, *args)
        if kind is flows.Sleep:
            await self._sleep(effect.seconds)  # type: ignore[attr-defined]
        elif effect is flows.ARM:
            self._armed = _wakeups.current(store, key)
        elif kind is flows.Pause:
            return await self._pause(effect.seconds)  # type: ignore[attr-defined]
        elif kind is flows.Hold:
            self._hold(effect)  # type: ignore[arg-type]
        elif kind is flows.Lose:
            self._lose(effect.holding, effect.reason, force=effect.force)  # type: ignore[attr-defined]
        elif kind is flows.End:
            entry = effect.holding.entry  # type: ignore[attr-defined]
            if entry is not None:
                self._sched().cancel(entry)
            _lock.fire_wakeups(store, key)
        elif kind is flows.Renewed:
            if signals.renewed.receivers:
                holding = effect.holding  # type: ignore[attr-defined]
                _lock._send(signals.renewed, self._sender, fence=holding.fence)
        elif kind is flows.Cleanup:
            self._spawn(self._cleanup(effect))  # type: ignore[arg-type]
        elif kind is flows.Denied:
            self._notify_denied(effect.lease)  # type: ignore[attr-defined]
        elif kind is flows.RetryRelease:
            self._retry_release_later(effect.holding)  # type: ignore[attr-defined]
        else:  # pragma: no cover - a flow yielded something new
            raise TypeError(f"unknown effect {effect!r}")
        return None

    async def _sleep(self, seconds: float) -> None:
        if self._fake:
            self._clock.sleep(seconds)  # a test clock: time moves at once
            await asyncio.sleep(0)
        else:
            await asyncio.sleep(seconds)

    async def _pause(self, seconds: float) -> bool:
        """Wait between attempts without holding the guard, woken early by a local release.
        True when the wait is to end (this object was closed)."""
        wake, self._armed = self._armed, None
        if self._closed:
            return True
        guard = self._guard()
        self._guard_held = False
        guard.release()
        try:
            if wake is None or wake.is_set():
                await self._sleep(0 if wake is not None else seconds)
            elif self._fake:
                await self._sleep(seconds)
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), seconds)  # aclose() sets it too
            self._armed = _wakeups.current(self._store, self._key)
        finally:
            await guard.acquire()  # cancelled here: not held, and _acquire knows it
            self._guard_held = True
        return self._closed

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        _background.add(task)
        task.add_done_callback(_background.discard)

    # -- acquiring ---------------------------------------------------------------------------------

    async def _acquire(self, *, blocking: bool, deadline: float | None) -> bool:
        if self._acquiring:
            # One lock object is one client: two tasks acquiring with it would share its state.
            raise LockHeld(
                f"{self._key!r}: another task is acquiring with this lock object "
                "(use one lock object per task)"
            )
        self._acquiring = True
        lock_id = new_lock_id()
        guard = self._guard()
        try:
            await guard.acquire()
            self._guard_held = True
            try:
                got = await self._run(
                    flows.acquire(self._st, lock_id, blocking=blocking, deadline=deadline)
                )
            finally:
                self._armed = None
                if self._guard_held:
                    self._guard_held = False
                    guard.release()
            if got and self._closed:
                # Closed while the last write was on its way: never hold on.
                with contextlib.suppress(NotLockOwner):
                    await self.unlock()
                raise LockCancelled(f"{self._key!r}: the wait for the lock was cancelled")
            if got:
                await self._announce_acquired()
        except asyncio.CancelledError:
            await _shielded(self._abandon(lock_id))
            raise
        finally:
            self._acquiring = False
        return got

    async def _abandon(self, lock_id: str) -> None:
        """A cancelled acquire: let the store call in flight finish, then release or withdraw
        whatever of ours it may have left in the lease."""
        inflight = self._inflight
        if inflight is not None:
            with contextlib.suppress(Exception):
                await inflight
            self._inflight = None
        async with self._guard():
            holding = self._st.holding
            if holding is not None and holding.lock_id == lock_id and holding.active:
                released = await self._run(flows.release(self._st, holding, cleanup_done=False))
                await self._announce_released(released)
                return
            try:
                await self._run(flows.settle_abandoned(self._st, lock_id))
            except Exception:
                log.exception(
                    "prioritylock: could not settle the cancelled acquire of %r", self._key
                )

    def _hold(self, hold: flows.Hold) -> None:
        holding = hold.holding

        async def beat() -> float | None:
            async with self._guard():
                return await self._run(flows.beat(self._st, holding))

        holding.entry = self._sched().schedule(
            beat, hold.due, f"lease {self._key}", inline=self._inline, tolerance=hold.tolerance
        )

    async def _announce_acquired(self) -> None:
        holding = self._st.holding
        if holding is None or (self._cfg.listener is None and not signals.acquired.receivers):
            return
        info = LockInfo.from_lease(holding.lease)
        _lock._send(signals.acquired, self._sender, info=info, fence=holding.fence)
        if self._cfg.listener is not None:
            await _call_listener(self._cfg.listener.on_acquired, self._sender, info)

    def _notify_denied(self, lease: Lease | None) -> None:
        info = None if lease is None else LockInfo.from_lease(lease)
        listener = self._cfg.listener
        self._tell(
            signals.denied,
            {"info": info},
            None if listener is None else listener.on_denied,
            (self._sender, info),
        )

    def _tell(
        self,
        signal: Any,
        kwargs: dict[str, Any],
        method: Callable[..., Any] | None,
        args: tuple[Any, ...],
    ) -> None:
        """Tell receivers and the listener now: plain callables run at once on the loop (they
        cannot wait on the lock's guard), an ``async def`` listener method as a task."""
        _lock._send(signal, self._sender, **kwargs)
        if method is None:
            return
        if inspect.iscoroutinefunction(method):
            self._spawn(_call_listener(method, *args))
        else:
            _lock._call_safely(method, *args)

    # -- holding -----------------------------------------------------------------------------------

    def _require_holding(self) -> flows.Holding:
        holding = self._st.holding
        if holding is not None and not holding.ended:
            self.is_current_owner()  # notices an expired lease
        return flows.require_holding(self._key, holding)

    async def _cleanup(self, cleanup: flows.Cleanup) -> None:
        holding = cleanup.holding
        notice = _lock.cleanup_notice(self._sender, cleanup)
        _lock._send(signals.cleanup_requested, self._sender, notice=notice)
        listener = self._cfg.listener
        if listener is not None:
            method = listener.on_cleanup_notification
            try:
                if inspect.iscoroutinefunction(method):
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
                holding.cleaning = False
                return
            except Exception:
                log.exception(
                    "prioritylock: cleanup listener of %r raised; handing over", self._key
                )
        released = None
        async with self._guard():
            try:
                released = await self._run(flows.after_cleanup(self._st, holding))
            except Exception:
                log.exception("prioritylock: handover of %r after cleanup failed", self._key)
        await self._announce_released(released)

    def _retry_release_later(self, holding: flows.Holding) -> None:
        log.warning(
            "prioritylock: release of %r did not land; retrying in the background", self._key
        )

        async def retry() -> float | None:
            async with self._guard():
                return await self._run(flows.background_release(self._st, holding))

        self._sched().schedule(retry, self._clock.monotonic() + 0.5, f"release {self._key}")

    async def _announce_released(self, released: flows.Released | None) -> None:
        if released is None or (self._cfg.listener is None and not signals.released.receivers):
            return
        info = LockInfo.from_lease(released.lease)
        _lock._send(signals.released, self._sender, info=info, handed_over=released.handed_over)
        if self._cfg.listener is not None:
            await _call_listener(self._cfg.listener.on_released, self._sender)

    def _lose(self, holding: flows.Holding, reason: str, *, force: bool = False) -> None:
        """Mark a holding lost, once, and tell the listener and the lock_lost receivers."""
        if not flows.mark_lost(holding, reason, force=force):
            return
        if holding.entry is not None:
            self._sched().cancel(holding.entry)
        listener = self._cfg.listener
        info = LockInfo.from_lease(holding.lease)
        flows.log_lost(self._st, holding, reason)
        self._tell(
            signals.lock_lost,
            {"reason": reason, "info": info},
            None if listener is None else listener.on_lock_lost,
            (self._sender, reason),
        )

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"{self._key!r}: this lock object is closed")


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


async def _shielded(coro: Awaitable[T]) -> T:
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
