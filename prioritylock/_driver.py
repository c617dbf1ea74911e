"""What both lock drivers share, written once: everything that does no I/O.

In the manner of httpx's ``BaseClient``: :class:`LockBase` holds the properties, the argument
checks, the flows' state, one ``match`` over every effect (``_perform_effect``: the waiting ones
handed to the driver, the others done here: clock reads, arming, heartbeats, losses, signals and
listener news), the in-process notices (``_wake``), ``__repr__`` and the mapping of a flow's
``Read``/``Put`` to a store call (:class:`StoreCalls`); the process-wide cache of decoded
documents (:class:`DecodedCache`) lives here too, beside the I/O it saves. ``Lock`` (``_lock``,
threads) and ``AsyncLock`` (``_alock``, asyncio) keep only what differs: how a store call, a
pause, a heartbeat and a callback are run. Neither imports the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import queue
import threading
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Executor, Future
from typing import Any, ClassVar, Generic, TypeVar

import attrs
from blinker import Signal

from prioritylock import _effects as effects
from prioritylock import _flows as flows
from prioritylock import _state as lockstate
from prioritylock import signals
from prioritylock._clock import FakeClock
from prioritylock._config import LockConfig
from prioritylock._errors import (
    ConfigError,
    LockCancelled,
    LockHeld,
    LockLost,
    LockTimeout,
    StoreUnavailable,
)
from prioritylock._info import LockInfo
from prioritylock._lease import MAX_MESSAGE_CHARS, Lease
from prioritylock._listener import CleanupNotice
from prioritylock._reserve import boot_id
from prioritylock._wake import GRACE, NOTICES, Stamp, Waiter, place
from prioritylock.stores._base import (
    WOULD_BLOCK,
    ConditionalReader,
    ObjectStore,
    UnsyncedWriter,
)

__all__ = [
    "T",
    "CallPool",
    "FlowRun",
    "log",
    "LockBase",
    "News",
    "StoreCall",
    "StoreCalls",
    "call_pool",
    "call_safely",
    "check_force_unlock",
    "check_timeout",
    "document_name",
    "when_all_done",
    "new_state",
    "send",
]

log = logging.getLogger("prioritylock")

#: The least time a driver waits for a store call it bounds (seconds): a call may end this much
#: past its ``by``.
MIN_WAIT = 0.25

T = TypeVar("T")


def document_name(store: object, key: str) -> tuple[str, str] | None:
    """This document, process-wide; only on stores that name what they address (a store
    object's id can be reused by another store once it is gone)."""
    namespace = getattr(store, "namespace", None)
    return (namespace, key) if isinstance(namespace, str) and namespace else None


class DecodedCache:
    """The document each lock of this process last read or wrote, decoded, with its version.

    A lock object that has not seen its document yet reads it conditionally against this
    version: when nothing changed (HTTP 304 on the cloud stores) it takes the decoded lease from
    here instead of receiving and decoding the body. Still one read: only a lock object's own
    knowledge lets it skip the read. Bounded: emptied when full. Keyed by the store's
    ``namespace``, within which versions never repeat.
    """

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._items: dict[tuple[str, str], lockstate.Seen] = {}

    def get(self, name: tuple[str, str] | None) -> lockstate.Seen | None:
        return None if name is None else self._items.get(name)

    def put(self, name: tuple[str, str] | None, seen: lockstate.Seen) -> None:
        if name is None:
            return
        items = self._items
        if len(items) >= self._size:
            items.clear()
        items[name] = seen


#: Shared by every lock object of the process, sync and async.
DECODED = DecodedCache()


def new_state(config: LockConfig) -> lockstate.LockState:
    """The flows' state for a lock object on ``config``."""
    store = config.store
    return lockstate.LockState(
        config.key,
        config,
        name=document_name(store, config.key),
        # Stores that can answer "unchanged" (HTTP 304) spare the body and its decoding.
        conditional=isinstance(store, ConditionalReader),
        # Stores that sync every write (LocalStore) may skip it where a lost write is harmless.
        unsynced=isinstance(store, UnsyncedWriter),
        cooperates=config.listener is not None,
        inline=not store.capabilities.shared_across_processes,
        boot=boot_id(),
        shared=DECODED,
    )


@attrs.frozen
class StoreCall:
    """One store call a ``Read`` or ``Put`` turns into: the method's name (``op``, what the
    asyncio routes pass to a store's quick or native path), the method, and its arguments."""

    op: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    #: A write the other locks of the process are to notice (``Put.quiet`` unset).
    notify: bool = False
    #: When the driver stops waiting for the call (the effect's ``by``; None: at its end).
    by: float | None = None
    #: A write: given up on, its outcome is unknown.
    write: bool = False
    #: A request write (``Put.request``): when it was sent, on the lock's monotonic clock.
    sent: float | None = None

    def __call__(self) -> Any:
        return self.fn(*self.args)


class StoreCalls:
    """The store methods a lock object's ``Read`` and ``Put`` effects call, chosen once."""

    __slots__ = ("bounded", "key", "reader", "store", "unsynced")

    def __init__(self, config: LockConfig) -> None:
        store = config.store
        self.store: ObjectStore = store
        self.key = config.key
        self.reader = store if isinstance(store, ConditionalReader) else None
        self.unsynced = store if isinstance(store, UnsyncedWriter) else None
        # Only a call over the network can hang on a store that does not answer; the stores of
        # this machine (memory, a local directory) are called straight, without a hand-off. A
        # fake clock's seconds are not ones a driver can wait for.
        self.bounded = store.capabilities.shared_across_hosts and not isinstance(
            config.clock, FakeClock
        )

    def of(self, effect: effects.Read | effects.Put) -> StoreCall:
        key = self.key
        by = effect.by if self.bounded else None
        match effect:
            case effects.Read(known=str(known)) if self.reader is not None:
                read = self.reader.read_if_changed
                return StoreCall("read_if_changed", read, (key, known), by=by)
            case effects.Read():
                return StoreCall("read", self.store.read, (key,), by=by)
            case effects.Put(create=True):
                new = (key, effect.data)
                return StoreCall("create", self.store.create, new, not effect.quiet, by, True)
            case effects.Put(unsynced=True) if self.unsynced is not None:
                args = (key, effect.data, effect.version)
                fn = self.unsynced.replace_unsynced
                return StoreCall("replace_unsynced", fn, args, not effect.quiet, by, True)
            case effects.Put():
                args = (key, effect.data, effect.version)
                return StoreCall("replace", self.store.replace, args, not effect.quiet, by, True)


class CallPool(Executor):
    """Threads for store calls: at most ``size``, started as calls need them, and daemon threads,
    so that a call a lock stopped waiting for (a store that never answers) does not hold up
    the interpreter's exit, as ``ThreadPoolExecutor``'s workers, joined at exit, would."""

    def __init__(self, size: int, name: str) -> None:
        self._size, self._name = size, name
        self._queue: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]]
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._idle = 0

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        if kwargs:
            raise TypeError("CallPool.submit takes positional arguments only")
        future: Future[T] = Future()
        with self._lock:
            if self._idle:
                self._idle -= 1  # an idle worker takes it
            elif self._threads < self._size:
                self._threads += 1
                name = f"{self._name}-{self._threads}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
        self._queue.put((future, fn, args))
        return future

    def _work(self) -> None:
        while True:
            future, fn, args = self._queue.get()
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
                del future, fn, args
            with self._lock:
                self._idle += 1


_pools: dict[str, CallPool] = {}
_pools_lock = threading.Lock()


def call_pool(name: str, size: int) -> CallPool:
    """The process's pool of that name (made at first use, with ``size`` threads at most)."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = CallPool(size, name)
        return pool


class FlowRun(Generic[T]):
    """One flow being driven: :meth:`next` hands out its effects (None at its end, with the
    outcome in :attr:`result`); set :attr:`value` or :attr:`error` to what an effect gave."""

    __slots__ = ("error", "flow", "result", "value")

    def __init__(self, flow: Generator[effects.Effect, Any, T]) -> None:
        self.flow = flow
        self.value: Any = None
        self.error: Exception | None = None
        self.result: T

    def next(self) -> effects.Effect | None:
        value, error = self.value, self.error
        self.value = self.error = None
        try:
            return self.flow.send(value) if error is None else self.flow.throw(error)
        except StopIteration as stop:
            self.result = stop.value
            return None


@attrs.frozen
class News:
    """What to tell about a lock: a signal with its arguments, and the listener method (if any)
    with its arguments."""

    signal: Signal
    kwargs: dict[str, Any]
    method: Callable[..., Any] | None = None
    args: tuple[Any, ...] = ()

    def send(self, sender: Any) -> None:
        send(self.signal, sender, **self.kwargs)

    def tell(self, sender: Any) -> None:
        """Send the signal and call the listener method, now, on this thread."""
        self.send(sender)
        if self.method is not None:
            call_safely(self.method, *self.args)


def cleanup_notice(sender: Any, cleanup: effects.Cleanup | lockstate.Told) -> CleanupNotice:
    """What a holder's listener is given when a higher priority asks for the lock (and, when
    that request is withdrawn, again)."""
    r = cleanup.requestor
    return CleanupNotice(
        lock=sender,
        requestor_owner=r.owner,
        requestor_priority=r.priority,
        requestor_message=r.message,
        forceful=r.forceful,
        deadline=cleanup.deadline,
        deadline_wall=cleanup.deadline_wall,
    )


class LockBase:
    """Everything of a lock object that does no I/O; the drivers add how it waits and calls."""

    #: The class name ``__repr__`` shows.
    _kind: ClassVar[str]
    #: "thread" or "task": who must not share one lock object.
    _who: ClassVar[str]

    def __init__(self, config: LockConfig) -> None:
        self._cfg = config
        self._store = config.store
        self._key = config.key
        self._clock = config.clock
        self._st = new_state(config)
        self._calls = StoreCalls(config)
        # Where notices for the document are posted, and whether the store feeds them: once.
        self._place = place(self._store, self._key)
        self._armed: Waiter | None = None  # woken by a notice while we wait to acquire
        self._acquiring = False
        self._acquiring_lock = threading.Lock()
        self._loss_lock = threading.Lock()
        self._closed = False
        # Store calls the driver stopped waiting for that have not ended yet (futures).
        self._late: set[Any] = set()
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

    def is_current_owner(self) -> bool:
        """Whether this object holds the lock now, judged on its own clock (no request)."""
        holding = self._st.holding
        now = self._clock.monotonic()
        if lockstate.expired(holding, now):
            assert holding is not None
            self._lose(holding, "expired")
        return lockstate.believes(holding, now)

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

    def __repr__(self) -> str:
        state = "held" if self.is_current_owner() else "not held"
        return (
            f"<{self._kind} {self._key!r} owner={self._cfg.owner!r} "
            f"priority={self._cfg.priority} {state}>"
        )

    # -- checks and flows the public calls share ---------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"{self._key!r}: this lock object is closed")

    def _check_not_held(self) -> None:
        self._check_open()
        if self.is_current_owner():
            raise LockHeld(f"{self._key!r}: this lock object already holds the lock")

    def _deadline(self, timeout: float | None) -> float | None:
        """``lock(timeout)``'s checks; its deadline on the lock's clock."""
        self._check_open()
        check_timeout(timeout)
        self._check_not_held()
        return None if timeout is None else self._clock.monotonic() + float(timeout)

    def _timed_out(self, timeout: float | None) -> LockTimeout:
        seen = self._st.seen
        holder = lockstate.holder_name(seen.lease if seen is not None else None)
        return LockTimeout(f"{self._key!r}: not acquired within {timeout} s (held by {holder})")

    @contextlib.contextmanager
    def _acquisition(self) -> Iterator[None]:
        """While an acquire runs: a second one with this object raises ``LockHeld``."""
        with self._acquiring_lock:
            if self._acquiring:
                # One lock object is one client: two callers acquiring with it would share its
                # state. Every store behaves the same here.
                raise LockHeld(
                    f"{self._key!r}: another {self._who} is acquiring with this lock object "
                    f"(use one lock object per {self._who})"
                )
            self._acquiring = True
        try:
            yield
        finally:
            self._acquiring = False

    def _release_flow(self) -> effects.Flow[lockstate.Released | None]:
        return flows.release(self._st, self._require_holding(), cleanup_done=False)

    def _renew_flow(self) -> effects.Flow[None]:
        return flows.renew_now(self._st, self._require_holding())

    def _force_unlock_flow(
        self,
        message: str,
        by: str | None,
        overwrite_corrupt: bool,
        if_fence: int | None,
        if_owner: str | None,
    ) -> effects.Flow[Lease | None]:
        check_force_unlock(message, if_fence, if_owner)
        return flows.force_unlock(
            self._st,
            by=by or self._cfg.owner,
            message=message,
            overwrite_corrupt=overwrite_corrupt,
            if_fence=if_fence,
            if_owner=if_owner,
        )

    def _begin_close(self) -> bool:
        """Mark this object closed; whether it still holds a lease to release."""
        if self._closed:
            return False
        self._closed = True
        armed = self._armed
        if armed is not None:
            armed.notify()  # our waiter wakes and sees it closed
        holding = self._st.holding
        return holding is not None and not holding.ended and holding.lost is None

    def _leaving_with(self, error: Exception, exc: BaseException | None) -> None:
        """The unlock on leaving a ``with`` block raised ``error``: raise it unless the block
        raised ``exc`` itself (then a lost lock says nothing new; anything else is logged)."""
        if exc is None:
            raise error
        if not isinstance(error, LockLost):
            log.exception("prioritylock: unlock of %r failed while leaving a with-block", self._key)

    # -- effects that need no waiting ----------------------------------------------------------

    def _perform_effect(self, effect: effects.Effect) -> Any:
        """Perform one effect. A waiting one (a store call, a sleep, a pause) is handed to the
        driver's own way of doing it (for ``AsyncLock``, what comes back is to be awaited);
        the others need no waiting and are the same on both drivers."""
        match effect:
            case effects.Put(request=True):
                # Read before the call is made: the requestor's wait begins after it returns.
                sent = self._clock.monotonic()
                return self._store_call(attrs.evolve(self._calls.of(effect), sent=sent))
            case effects.Read() | effects.Put():
                return self._store_call(self._calls.of(effect))
            case effects.Sleep():
                return self._sleep(effect.seconds)
            case effects.Pause():
                return self._pause(effect.seconds)
            case effects.Now():
                return self._clock.monotonic(), self._clock.time()
            case effects.Arm():
                self._armed = NOTICES.arm_at(self._place, self._new_waiter())
            case effects.Hold():
                self._hold(effect)
            case effects.Lose(holding=holding, reason=reason, force=force):
                self._lose(holding, reason, force=force)
            case effects.End(holding=holding):
                # The release (or handover) write told the others (``_after_write``).
                self._stop_heartbeat(holding)
            case effects.Renewed(holding=holding):
                if signals.renewed.receivers:
                    self._tell(News(signals.renewed, {"fence": holding.fence}))
            case effects.Cleanup():
                self._start_cleanup(effect)
            case effects.Withdrawn(told=told):
                notice = cleanup_notice(self._sender, told)
                listener = self._cfg.listener
                withdrawn = None if listener is None else listener.on_request_withdrawn
                self._tell(
                    News(signals.request_withdrawn, {"notice": notice}, withdrawn, (notice,))
                )
            case effects.Denied(lease=lease):
                info = None if lease is None else LockInfo.from_lease(lease)
                listener = self._cfg.listener
                method = None if listener is None else listener.on_denied
                self._tell(News(signals.denied, {"info": info}, method, (self._sender, info)))
            case effects.Unsettled(lock_id=lock_id):
                self._settle_later(lock_id)
            case effects.RetryRelease(holding=holding):
                log.warning(
                    "prioritylock: release of %r did not land; retrying in the background",
                    self._key,
                )
                task = self._task(lambda: flows.background_release(self._st, holding))
                self._schedule(task, self._clock.monotonic() + 0.5, f"release {self._key}")
        return None

    # -- store calls bounded in time (``Read.by``/``Put.by``) -------------------------------------

    def _time_left(self, call: StoreCall) -> float | None:
        """How long to wait for ``call`` (None: until it ends): until its ``by``, but never less
        than ``MIN_WAIT`` (a request sent with moments left would be given up unanswered)."""
        return None if call.by is None else max(MIN_WAIT, call.by - self._clock.monotonic())

    def _gave_up(self, call: StoreCall, future: Any, waited: float) -> StoreUnavailable:
        """We stopped waiting for ``call`` (running as ``future``) after ``waited`` seconds: it
        goes on to its end unwatched (remembered in ``_late`` until then). What the flow is told:
        a store that did not answer; for a write, with an unknown outcome."""
        self._late.add(future)
        future.add_done_callback(self._late.discard)
        what = "write" if call.write else "read"
        return StoreUnavailable(
            f"{self._key!r}: no answer to a {what} within {waited:.3g} s (the time it had left)",
            outcome_unknown=call.write,
        )

    def _settle_later(self, lock_id: str) -> None:
        """An acquire ended without the lock after a write of its claim whose outcome it could
        not settle: once the calls we stopped waiting for have ended (so that a late write has
        landed or failed), take back what of its claim the lease shows, in the background, until
        a claim nobody renews would have expired anyway. The same settling an asyncio task
        cancelled mid-acquire gets (``settle_abandoned``)."""
        st = self._st
        until = self._clock.monotonic() + st.lease_timeout + st.store_timeout

        def start() -> None:
            task = self._task(lambda: flows.background_settle(self._st, lock_id, until))
            try:
                self._schedule(task, self._clock.monotonic(), f"settle {self._key}")
            except RuntimeError:  # the scheduler is closed: the process is ending
                log.warning("prioritylock: %r: could not settle an acquire", self._key)

        when_all_done(list(self._late), start)

    def _hold(self, hold: effects.Hold) -> None:
        """Schedule the holding's heartbeat (renew and watch), and hear notices for it."""
        holding = hold.holding
        # A write to the document by another lock of the process (a request, an override, a
        # force unlock) brings the watch forward: the holder hears it now, not at next_watch.
        # The store's own notices (another process's writes) may wait for the first heartbeat,
        # GRACE from now, when this process holds the document in quick bursts (``_wake``).
        now = self._clock.monotonic()
        watching = holding.watching = NOTICES.watch_at(
            self._place, self, lambda stamp: self._poke(holding, stamp), started=now
        )
        due, tolerance = hold.due, hold.tolerance
        if not watching.fed:
            # On a grid of GRACE, so that a burst of holdings shares the scheduler's wakeups.
            due, tolerance = min(due, math.ceil((now + GRACE) / GRACE) * GRACE), GRACE
        holding.entry = self._schedule(
            self._task(lambda: self._beat(holding, hold.tolerance)),
            due,
            f"lease {self._key}",
            # An in-process store answers in microseconds: run its heartbeat on the scheduler's
            # own thread (or inside the loop's runner) rather than pay a hand-off per renewal.
            inline=self._st.inline,
            tolerance=tolerance,
        )

    def _beat(self, holding: lockstate.Holding, tolerance: float) -> effects.Flow[float | None]:
        """The holding's heartbeat; the first run of one whose store notices were deferred
        subscribes now, and reads what landed meanwhile."""
        watching = holding.watching
        if watching is not None and not watching.fed:
            holding.entry.tolerance = tolerance  # from now on, the heartbeat's own grid
            if holding.active:
                NOTICES.feed(watching)
                holding.poked = True
        return flows.beat(self._st, holding)

    def _poke(self, holding: lockstate.Holding, stamp: Stamp | None = None) -> None:
        """A notice for a holding's document (any thread): read it at once. A request write's
        stamp is kept for the read to judge (``_protocol.window_start``) when its time is on
        our clock; first, so that the read it brings forward finds it."""
        if stamp is not None and stamp.clock is self._clock:
            holding.request_sent = (stamp.version, stamp.at)
        holding.poked = True
        entry = holding.entry
        if entry is not None and holding.active:
            self._bring_forward(entry)

    def _stop_heartbeat(self, holding: lockstate.Holding) -> None:
        if holding.entry is not None:
            self._unschedule(holding.entry)
        watching, holding.watching = holding.watching, None
        if watching is not None:
            NOTICES.unwatch(watching, self._clock.monotonic())

    def _call_here(self, call: StoreCall, make: Callable[[], Any]) -> Any:
        """Make a store call on this thread by ``make`` (which may answer ``WOULD_BLOCK``,
        having done nothing), noticed as :meth:`_after_write` says."""
        try:
            result = make()
        except Exception as exc:
            self._after_write(call, exc)
            raise
        if result is not WOULD_BLOCK:
            self._after_write(call, None, result)
        return result

    def _after_write(
        self, call: StoreCall, error: BaseException | None, version: object = None
    ) -> None:
        """A store call returned (a write: the ``version`` it made) or raised: a write that
        may have landed (any outcome but ``ConditionFailed``) is a notice to the other locks of
        the process on the document; a request write that landed stamps it (``_wake.Stamp``)."""
        if call.notify:
            stamp = None
            if call.sent is not None and error is None and isinstance(version, str):
                stamp = Stamp(version, call.sent, self._clock)
            NOTICES.after_write_at(self._place, error, source=self, stamp=stamp)

    def _after_write_when_done(
        self, call: StoreCall, future: Future[Any] | asyncio.Future[Any]
    ) -> None:
        """:meth:`_after_write` once ``future`` (a thread's or the loop's) ends: a write that may
        land later is still news. A cancelled call counts as failed, its outcome unknown."""

        def ended(done: Any) -> None:
            if done.cancelled():
                self._after_write(call, asyncio.CancelledError())
            elif (error := done.exception()) is not None:
                self._after_write(call, error)
            else:
                self._after_write(call, None, done.result())

        if call.notify:
            future.add_done_callback(ended)

    def _lose(self, holding: lockstate.Holding, reason: str, *, force: bool = False) -> None:
        """Mark a holding lost, once, and tell the listener and the lock_lost receivers."""
        with self._loss_lock:
            if not lockstate.mark_lost(holding, reason, force=force):
                return
        self._stop_heartbeat(holding)
        listener = self._cfg.listener
        info = LockInfo.from_lease(holding.lease)
        lockstate.log_lost(self._st, holding, reason)
        method = None if listener is None else listener.on_lock_lost
        self._tell(
            News(
                signals.lock_lost, {"reason": reason, "info": info}, method, (self._sender, reason)
            )
        )

    def _require_holding(self) -> lockstate.Holding:
        holding = self._st.holding
        if holding is not None and not holding.ended:
            self.is_current_owner()  # notices an expired lease
        return lockstate.require_holding(self._key, holding)

    # -- news ----------------------------------------------------------------------------------

    def _acquired_news(self) -> News | None:
        holding = self._st.holding
        listener = self._cfg.listener
        if holding is None or (listener is None and not signals.acquired.receivers):
            return None
        info = LockInfo.from_lease(holding.lease)
        method = None if listener is None else listener.on_acquired
        kwargs = {"info": info, "fence": holding.fence}
        return News(signals.acquired, kwargs, method, (self._sender, info))

    def _released_news(self, released: lockstate.Released | None) -> News | None:
        listener = self._cfg.listener
        if released is None or (listener is None and not signals.released.receivers):
            return None
        info = LockInfo.from_lease(released.lease)
        kwargs = {"info": info, "handed_over": released.handed_over}
        method = None if listener is None else listener.on_released
        return News(signals.released, kwargs, method, (self._sender,))

    def _cleanup_raised(self) -> None:
        log.exception("prioritylock: cleanup listener of %r raised; handing over", self._key)

    def _call_cleanup(
        self, method: Callable[[CleanupNotice], object], notice: CleanupNotice
    ) -> None:
        """Call a plain cleanup listener; one that raises is logged, and the lock handed over."""
        try:
            method(notice)
        except Exception:
            self._cleanup_raised()

    def _handover_flow(self, holding: lockstate.Holding) -> effects.Flow[lockstate.Released | None]:
        """The holder's cleanup returned: hand over (a failure is logged, never raised: nobody
        waits for it but the heartbeat, which goes on)."""
        try:
            return (yield from flows.after_cleanup(self._st, holding))
        except Exception:
            log.exception("prioritylock: handover of %r after cleanup failed", self._key)
            return None

    def _tell_now(self, news: News | None) -> None:
        """Tell now, on this thread: send the signal, call the listener method."""
        if news is not None:
            news.tell(self._sender)

    def _acquire_flow(
        self, lock_id: str, blocking: bool, deadline: float | None
    ) -> effects.Flow[bool]:
        return flows.acquire(self._st, lock_id, blocking=blocking, deadline=deadline)

    def _cancelled(self) -> LockCancelled:
        return LockCancelled(f"{self._key!r}: the wait for the lock was cancelled")

    # -- what each driver does its own way -------------------------------------------------------

    def _store_call(self, call: StoreCall) -> Any:
        raise NotImplementedError

    def _sleep(self, seconds: float) -> Any:
        raise NotImplementedError

    def _pause(self, seconds: float) -> Any:
        """Wait between attempts to acquire, woken early by a notice; answers whether the wait
        is to end (cancelled, or this object closed)."""
        raise NotImplementedError

    def _new_waiter(self) -> Waiter:
        raise NotImplementedError

    def _task(self, make: Callable[[], effects.Flow[Any]]) -> Any:
        """A scheduler task that runs the flow ``make()`` under the lock object's guard."""
        raise NotImplementedError

    def _schedule(self, task: Any, when: float, name: str, **how: Any) -> Any:
        raise NotImplementedError

    def _unschedule(self, entry: Any) -> None:
        raise NotImplementedError

    def _bring_forward(self, entry: Any) -> None:
        """Run the scheduled heartbeat ``entry`` now (called from any thread)."""
        raise NotImplementedError

    def _tell(self, news: News) -> None:
        """Tell receivers and the listener, never under the lock's own locks."""
        raise NotImplementedError

    def _start_cleanup(self, cleanup: effects.Cleanup) -> None:
        raise NotImplementedError


def when_all_done(futures: list[Any], then: Callable[[], None]) -> None:
    """Call ``then`` once every future (``concurrent.futures`` or ``asyncio``) is done: at once
    if none is pending, else from the last one's done callback."""
    pending = [f for f in futures if not f.done()]
    if not pending:
        then()
        return
    left = [len(pending)]
    guard = threading.Lock()

    def one_done(_future: Any) -> None:
        with guard:
            left[0] -= 1
            last = left[0] == 0
        if last:
            then()

    for future in pending:
        future.add_done_callback(one_done)


def check_timeout(timeout: object) -> None:
    """A ``lock(timeout=...)`` argument: None or a non-negative number of seconds."""
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0
    ):
        raise ConfigError(
            f"timeout: must be None or a non-negative number, got {timeout!r}", option="timeout"
        )


def check_force_unlock(message: object, if_fence: object, if_owner: object) -> None:
    """``force_unlock``'s arguments: a message saying why, and guards that are a fence / an
    owner."""
    if not isinstance(message, str) or not message.strip() or len(message) > MAX_MESSAGE_CHARS:
        raise ConfigError("message: force_unlock needs a message saying why", option="message")
    if if_fence is not None and (
        isinstance(if_fence, bool) or not isinstance(if_fence, int) or if_fence < 0
    ):
        raise ConfigError(
            f"if_fence: must be a non-negative integer, got {if_fence!r}", option="if_fence"
        )
    if if_owner is not None and (not isinstance(if_owner, str) or not if_owner):
        raise ConfigError("if_owner: must be a non-empty string", option="if_owner")


def send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send a signal; a receiver that raises is logged, the others still run."""
    for receiver in signal.receivers_for(sender):
        try:
            receiver(sender, **kwargs)
        except Exception:
            log.exception("prioritylock: a signal receiver raised; ignored")


def call_safely(fn: Callable[..., object], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("prioritylock: a listener raised; ignored")
