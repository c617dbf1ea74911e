"""What every lock driver shares, whatever its flows: the part that runs a flow.

A flow (a generator of effects: the lease's in ``_flows``, Hudi's table lock's in
``_hudi_flows``) is driven by a :class:`FlowRunner`: it maps a ``Read``/``Put`` to a store call
(:class:`StoreCalls`) bounded in time (``_time_left``/``_gave_up``), notices the writes that may
have landed to the other locks of the process (``_wake``), and performs the effects every flow
shares (:data:`~prioritylock._effects.Shared`: store calls, sleeps, pauses, the clock, arming)
in :meth:`FlowRunner._perform_shared`. How a store call, a sleep, a pause, a scheduled task and
a callback are run is each driver's own: the threaded one (``_lock.ThreadRunner``) and the
asyncio one (``_alock.LoopRunner``). What a lock does with its own effects (a lease's
heartbeat, preemption, signals; a Hudi holding's renewals) is in ``_driver.LockBase`` and
``_hudi_lock.HudiBase``, on top of this.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable, Generator
from concurrent.futures import Executor, Future
from types import MethodType
from typing import Any, ClassVar, Generic, TypeVar

import attrs
from blinker import Signal

from prioritylock import _effects as effects
from prioritylock._clock import Clock, FakeClock
from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    LockCancelled,
    LockHeld,
    LockLost,
    StoreUnavailable,
)
from prioritylock._hints import HINTS
from prioritylock._wake import NOTICES, Stamp, Waiter, place
from prioritylock.stores._base import (
    WOULD_BLOCK,
    ConditionalReader,
    ObjectStore,
    UnsyncedWriter,
)
from prioritylock.stores._log import log as _store_log
from prioritylock.stores._log import unlogged

__all__ = [
    "MIN_WAIT",
    "T",
    "CallPool",
    "FlowRun",
    "FlowRunner",
    "News",
    "StoreCall",
    "StoreCalls",
    "call_pool",
    "call_safely",
    "check_timeout",
    "log",
    "send",
    "when_all_done",
]

log = logging.getLogger("prioritylock")


#: The least time a driver waits for a store call it bounds (seconds): a call may end this much
#: past its ``by``.
MIN_WAIT = 0.25

T = TypeVar("T")


class StoreCall:
    """One store call a ``Read`` or ``Put`` turns into: the method's name (``op``, what the
    asyncio routes pass to a store's quick or native path), the method, and its arguments.
    Made for every store call, so a plain class with slots (an attrs frozen class's
    ``__init__`` costs a microsecond more)."""

    __slots__ = ("args", "by", "fn", "notify", "op", "sent", "write")

    def __init__(
        self,
        op: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        notify: bool = False,
        by: float | None = None,
        write: bool = False,
        sent: float | None = None,
    ) -> None:
        self.op = op
        self.fn = fn
        self.args = args
        #: A write the other locks of the process are to notice (``Put.quiet`` unset).
        self.notify = notify
        #: When the driver stops waiting for the call (the effect's ``by``; None: at its end).
        self.by = by
        #: A write: given up on, its outcome is unknown.
        self.write = write
        #: A request write (``Put.request``): when it was sent, on the lock's monotonic clock.
        self.sent = sent

    def __call__(self) -> Any:
        return self.fn(*self.args)

    def __repr__(self) -> str:
        return f"StoreCall({self.op!r}, by={self.by!r})"


class StoreCalls:
    """The store methods a lock object's ``Read`` and ``Put`` effects call, chosen once."""

    __slots__ = ("bounded", "key", "plain", "reader", "store", "unsynced")

    def __init__(self, store: ObjectStore, key: str, clock: Clock) -> None:
        self.store: ObjectStore = store
        self.key = key
        self.reader = store if isinstance(store, ConditionalReader) else None
        self.unsynced = store if isinstance(store, UnsyncedWriter) else None
        # Only a call over the network can hang on a store that does not answer; the stores of
        # this machine (memory, a local directory) are called straight, without a hand-off. A
        # fake clock's seconds are not ones a driver can wait for.
        self.bounded = store.capabilities.shared_across_hosts and not isinstance(clock, FakeClock)
        # The methods without their DEBUG logging, called while it is off (``_log.unlogged``):
        # one table per store class, shared (a lease holds nothing more for the collector).
        self.plain = _plain_methods(type(store))

    def pick(
        self, effect: effects.Read | effects.Put
    ) -> tuple[str, Callable[..., Any], tuple[Any, ...]]:
        """The store method ``effect`` calls (its name, what the asyncio routes pass to a store's
        quick or native path), and the arguments."""
        key = self.key
        args: tuple[Any, ...]
        if isinstance(effect, effects.Put):  # the commonest: first
            if effect.create:
                op, args = "create", (key, effect.data)
            elif effect.unsynced and self.unsynced is not None:
                op, args = "replace_unsynced", (key, effect.data, effect.version)
            else:
                op, args = "replace", (key, effect.data, effect.version)
        elif effect.known is not None and self.reader is not None:
            op, args = "read_if_changed", (key, effect.known)
        else:
            op, args = "read", (key,)
        if not _store_log.isEnabledFor(logging.DEBUG):
            raw = self.plain.get(op)
            if raw is not None:
                return op, MethodType(raw, self.store), args
        return op, getattr(self.store, op), args

    def of(self, effect: effects.Read | effects.Put, sent: float | None = None) -> StoreCall:
        """The call ``effect`` turns into (``sent``: a request write's send time)."""
        op, fn, args = self.pick(effect)
        by = effect.by if self.bounded else None
        if isinstance(effect, effects.Read):
            return StoreCall(op, fn, args, by=by)
        return StoreCall(op, fn, args, notify=not effect.quiet, by=by, write=True, sent=sent)


_plain: dict[type, dict[str, Callable[..., Any]]] = {}


def _plain_methods(cls: type) -> dict[str, Callable[..., Any]]:
    """The store class's methods a lock calls, without their DEBUG logging, by name."""
    plain = _plain.get(cls)
    if plain is None:
        ops = ("read", "read_if_changed", "create", "replace", "replace_unsynced")
        found = {op: unlogged(getattr(cls, op, None)) for op in ops}
        plain = _plain[cls] = {op: raw for op, raw in found.items() if raw is not None}
    return plain


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


class Done(Generator[Any, Any, T]):
    """A flow already at its end, with its outcome: what a driver's ``LockBase._start_acquire``
    (or ``_start_release``) gives its ``_run`` when it reached the outcome itself (the
    uncontended first round), so that every driver runs it as any other flow."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value

    def send(self, value: object, /) -> Any:
        raise StopIteration(self.value)

    def throw(self, *error: Any) -> Any:
        raise error[0] if len(error) == 1 else error[1]

    def close(self) -> None:
        """Nothing to end."""


class FlowRun(Generic[T]):
    """One flow being driven: :meth:`next` hands out its effects (None at its end, with the
    outcome in :attr:`result`); set :attr:`value` or :attr:`error` to what an effect gave."""

    __slots__ = ("error", "flow", "result", "value")

    def __init__(self, flow: Generator[Any, Any, T]) -> None:
        self.flow = flow
        self.value: Any = None
        self.error: Exception | None = None
        self.result: T

    def next(self) -> Any:
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


class _Acquisition:
    """:meth:`FlowRunner._acquisition`'s guard: a slotted class (a generator context manager,
    made for every acquire, cost more than the rest of a store-free try_lock's bookkeeping)."""

    __slots__ = ("_runner",)

    def __init__(self, runner: FlowRunner) -> None:
        self._runner = runner

    def __enter__(self) -> None:
        self._runner._begin_acquire()

    def __exit__(self, *exc_info: object) -> None:
        self._runner._acquiring = False


class FlowRunner:
    """Runs flows against one document of one store: what a driver does the same way for every
    flow. A lock object is one (``LockBase``, ``HudiBase``) and a driver (``ThreadRunner``,
    ``LoopRunner``) at once."""

    #: "thread" or "task": who must not share one lock object.
    _who: ClassVar[str]
    #: Guards the flags of every lock object (``_acquiring``, a holding's loss): held for a few
    #: instructions, so one for the process (a lock per object is one more object per lease
    #: for the garbage collector to walk).
    _flags_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self, store: ObjectStore, key: str, clock: Clock) -> None:
        self._store = store
        self._key = key
        self._clock = clock
        # Where notices for the document are posted, and whether the store feeds them: once.
        self._place = place(store, key)
        self._calls = StoreCalls(store, key, clock)
        self._armed: Waiter | None = None  # woken by a notice while we wait to acquire
        self._closed = False
        # Store calls the driver stopped waiting for that have not ended yet (futures).
        self._late: set[Any] = set()
        # What signals and listeners are given as the lock (tests put a synchronous face here).
        self._sender: Any = self
        self._acquiring = False
        #: The driver makes every store call of this lock here and now, unbounded (a store of
        #: this machine on threads, an in-process one on a loop): ``_call_straight``.
        self._straight = False

    def _acquisition(self) -> _Acquisition:
        """While an acquire runs (``with self._acquisition():``): a second one with this
        object raises ``LockHeld``. Made per acquire: one kept on the object would be a
        reference cycle, left for the garbage collector to free. (The lease locks' hot path
        spells it out: :meth:`_begin_acquire`, then ``_acquiring = False`` in a ``finally``.)"""
        return _Acquisition(self)

    def _begin_acquire(self) -> None:
        """An acquire begins: mark it, or raise ``LockHeld`` if one is running already."""
        with self._flags_lock:  # one process-wide lock, held for an instant
            if self._acquiring:
                # One lock object is one client: two callers acquiring with it would share its
                # state. Every store behaves the same here.
                who = self._who
                raise LockHeld(
                    f"{self._key!r}: another {who} is acquiring with this lock object "
                    f"(use one lock object per {who})"
                )
            self._acquiring = True

    def _perform_shared(self, effect: effects.Shared) -> Any:
        """Perform an effect any flow may yield. A waiting one (a store call, a sleep, a pause)
        is handed to the driver's own way of doing it (for ``AsyncLock``, what comes back is to
        be awaited); the clock and arming are done here."""
        match effect:
            case effects.Now():  # the commonest: first
                return self._clock.monotonic(), self._clock.time()
            case effects.Put(request=True):
                # Read before the call is made: the requestor's wait begins after it returns.
                sent = self._clock.monotonic()
                return self._store_call(self._calls.of(effect, sent))
            case effects.Read() | effects.Put():
                if self._straight:
                    return self._call_straight(effect)
                return self._store_call(self._calls.of(effect))
            case effects.Sleep():
                return self._sleep(effect.seconds)
            case effects.Pause():
                if (armed := self._armed) is not None:
                    armed.behind = effect.behind
                return self._pause(effect.seconds, effect.woken, armed)
            case effects.Arm():
                self._rearm()
            case effects.Hint(hints=hints):
                HINTS.send(hints)
            case _:
                effects.assert_never(effect)
        return None

    def _rearm(self) -> None:
        """Arm a new waiter for the next notice, in the place its predecessor had in the line
        (``Waiter.behind``; None when this acquire armed none yet): while it reads and decides
        it stays the first of the process's waiters behind the head, so a notice meanwhile
        wakes it again, not the next one behind it."""
        waiter = self._new_waiter()
        if (armed := self._armed) is not None:
            waiter.behind = armed.behind
        self._armed = NOTICES.arm_at(self._place, waiter)

    def _leaving_with(self, error: Exception, exc: BaseException | None) -> None:
        """The unlock on leaving a ``with`` block raised ``error``: raise it unless the block
        raised ``exc`` itself (then a lost lock says nothing new; anything else is logged)."""
        if exc is None:
            raise error
        if not isinstance(error, LockLost):
            log.exception("prioritylock: unlock of %r failed while leaving a with-block", self._key)

    def _when_settled(self, make: Callable[[], Generator[Any, Any, Any]], name: str) -> None:
        """Once the store calls we stopped waiting for have ended (so that a late write has
        landed or failed), run the flow ``make()`` as a scheduled task (again while it returns
        a time)."""

        def start() -> None:
            try:
                self._schedule(self._task(make), self._clock.monotonic(), name)
            except RuntimeError:  # the scheduler is closed: the process is ending
                log.warning("prioritylock: %r: could not start %s", self._key, name)

        when_all_done(list(self._late), start)

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

    def _call_here(self, call: StoreCall, make: Callable[[], Any] | None = None) -> Any:
        """Make a store call on this thread by ``make`` (which may answer ``WOULD_BLOCK``,
        having done nothing; None: the call itself), noticed as :meth:`_after_write` says."""
        try:
            result = call.fn(*call.args) if make is None else make()
        except Exception as exc:
            self._after_write(call, exc)
            raise
        if call.notify and result is not WOULD_BLOCK:  # (a read, a renewal: nothing to notice)
            self._after_write(call, None, result)
        return result

    def _after_write(
        self, call: StoreCall, error: BaseException | None, version: object = None
    ) -> None:
        """A store call returned (a write: the ``version`` it made) or raised: a write that
        may have landed (any outcome but ``ConditionFailed``) is a notice to the other locks of
        the process on the document; a request write that landed stamps it (``_wake.Stamp``)."""
        if call.notify:
            self._noticed(error, call.sent, version)

    def _noticed(
        self, error: BaseException | None, sent: float | None = None, version: object = None
    ) -> None:
        """:meth:`_after_write` of a write to notice (``sent``: a request's send time)."""
        if not isinstance(error, ConditionFailed):  # ``Notices.after_write_at``
            stamp = None
            if sent is not None and error is None and isinstance(version, str):
                stamp = Stamp(version, sent, self._clock)
            NOTICES.notice_at(self._place.where, source=self, stamp=stamp)

    def _call_straight(self, effect: effects.Read | effects.Put) -> Any:
        """Make the store call of ``effect`` here and now, without a :class:`StoreCall`: on a
        driver that makes it so anyway (:attr:`_straight`), for a plain read or write (not a
        request: its notice is stamped). A write is noticed as :meth:`_after_write` says."""
        _op, fn, args = self._calls.pick(effect)
        if isinstance(effect, effects.Read) or effect.quiet:
            return fn(*args)
        try:
            version = fn(*args)
        except Exception as exc:
            self._noticed(exc)
            raise
        NOTICES.notice_at(self._place.where, source=self)  # ``_noticed(None)``: not a request
        return version

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

    def _tell_now(self, news: News | None) -> None:
        """Tell now, on this thread: send the signal, call the listener method."""
        if news is not None:
            news.tell(self._sender)

    def _cancelled(self) -> LockCancelled:
        return LockCancelled(f"{self._key!r}: the wait for the lock was cancelled")

    # -- what each lock does its own way --------------------------------------------------------

    def _perform_effect(self, effect: Any) -> Any:
        """Perform any effect of this lock's flows (the shared ones: :meth:`_perform_shared`)."""
        raise NotImplementedError

    # -- what each driver does its own way -------------------------------------------------------

    def _store_call(self, call: StoreCall) -> Any:
        raise NotImplementedError

    def _sleep(self, seconds: float) -> Any:
        raise NotImplementedError

    def _pause(self, seconds: float, woken: bool, wake: Waiter | None) -> Any:
        """Wait between attempts to acquire, woken early by a notice to ``wake`` (the waiter
        armed, if any) if ``woken``, then arm again (:meth:`_rearm`); answers whether the wait
        is to end (cancelled, or this object closed)."""
        raise NotImplementedError

    def _new_waiter(self) -> Waiter:
        raise NotImplementedError

    def _task(self, make: Callable[[], Generator[Any, Any, Any]]) -> Any:
        """A scheduler task that runs the flow ``make()`` under the lock object's guard."""
        raise NotImplementedError

    def _schedule(self, task: Any, when: float, name: str, **how: Any) -> Any:
        raise NotImplementedError

    def _unschedule(self, entry: Any) -> None:
        raise NotImplementedError

    def _bring_forward(self, entry: Any, when: float | None = None) -> None:
        """Run the scheduled heartbeat ``entry`` now, or at ``when`` if sooner than planned
        (called from any thread)."""
        raise NotImplementedError

    def _tell(self, news: News) -> None:
        """Tell receivers and the listener, never under the lock's own locks."""
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
