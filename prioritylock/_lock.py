"""The synchronous lock: a thin driver of the flows in ``_flows`` on threads.

The driver performs what a flow yields (store calls, clock reads, pauses, notifications) and
sends back the results; every rule of the protocol lives in ``_flows`` and ``_protocol``.
Store I/O for one lock object happens under its ``_io`` lock, so the heartbeat and the user's own
calls never interleave their compare-and-swaps; a pause between attempts to acquire lets go of
it, and callbacks and signals run outside it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from blinker import Signal

from prioritylock import _flows as flows
from prioritylock import signals
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
from prioritylock._lease import MAX_MESSAGE_CHARS, Lease, new_lock_id
from prioritylock._listener import CleanupNotice
from prioritylock._reserve import boot_id
from prioritylock._scheduler import Scheduler, default_scheduler
from prioritylock.stores._base import ConditionalReader, ObjectStore, UnsyncedWriter

__all__ = ["Lock"]

log = logging.getLogger("prioritylock")

T = TypeVar("T")


def _namespace(store: object) -> object:
    # Stores that know what they address (a directory, a bucket) say so in ``namespace``, so
    # lock objects with separate store objects on the same data share what they learn.
    return getattr(store, "namespace", None) or id(store)


def document_name(store: object, key: str) -> tuple[str, str] | None:
    """This document, process-wide; only on stores that name what they address (a store
    object's id can be reused by another store once it is gone)."""
    namespace = getattr(store, "namespace", None)
    return (namespace, key) if isinstance(namespace, str) and namespace else None


class _Wakeups:
    """In-process wakeups: a release sets the event waiters of the same lock wait on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: weakref.WeakValueDictionary[tuple[object, str], threading.Event] = (
            weakref.WeakValueDictionary()
        )

    def current(self, store: object, key: str) -> threading.Event:
        name = (_namespace(store), key)
        with self._lock:
            event = self._events.get(name)
            if event is None:
                event = threading.Event()
                self._events[name] = event
            return event

    def fire(self, store: object, key: str) -> None:
        with self._lock:
            event = self._events.pop((_namespace(store), key), None)
        if event is not None:
            event.set()


_wakeups = _Wakeups()

#: Called when a holding ends: sync waiters are woken here, async ones by ``_alock``.
_on_end: list[Callable[[object, str], None]] = [_wakeups.fire]


def fire_wakeups(store: object, key: str) -> None:
    for fire in _on_end:
        fire(store, key)


class Seam:
    """The store calls a flow's ``Read`` and ``Put`` turn into (shared by both drivers)."""

    __slots__ = ("key", "reader", "store", "unsynced")

    def __init__(
        self,
        store: ObjectStore,
        key: str,
        reader: ConditionalReader | None,
        unsynced: UnsyncedWriter | None,
    ) -> None:
        self.store, self.key, self.reader, self.unsynced = store, key, reader, unsynced

    @classmethod
    def of(cls, config: LockConfig) -> Seam:
        store = config.store
        return cls(
            store,
            config.key,
            store if isinstance(store, ConditionalReader) else None,
            store if isinstance(store, UnsyncedWriter) else None,
        )


def store_call(seam: Seam, effect: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The store method and arguments that perform a ``Read`` or ``Put`` effect."""
    key = seam.key
    if type(effect) is flows.Read:
        if effect.known is not None and seam.reader is not None:
            return seam.reader.read_if_changed, (key, effect.known)
        return seam.store.read, (key,)
    put: flows.Put = effect
    if put.create:
        return seam.store.create, (key, put.data)
    if put.unsynced and seam.unsynced is not None:
        return seam.unsynced.replace_unsynced, (key, put.data, put.version)
    return seam.store.replace, (key, put.data, put.version)


def cleanup_notice(sender: Any, cleanup: flows.Cleanup) -> CleanupNotice:
    """What a holder's listener is given when a higher priority asks for the lock."""
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


def new_state(config: LockConfig) -> flows.LockState:
    """The flows' state for a lock object on ``config`` (shared by both drivers)."""
    store = config.store
    return flows.LockState(
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
    )


class Lock:
    """A distributed lock on one lease document. Build it with :class:`~prioritylock.LockBuilder`.

    One lock object is one client, on every store: not reentrant (``lock()`` while it holds the
    lock raises :class:`~prioritylock.LockHeld`), and not shared between threads that contend (a
    second thread's ``lock()`` while one waits or holds raises ``LockHeld`` too): threads that
    contend build one object each. Any thread may call the other methods.
    """

    def __init__(self, config: LockConfig) -> None:
        self._cfg = config
        self._store = config.store
        self._key = config.key
        self._clock = config.clock
        self._hb: Scheduler = config.heartbeat or default_scheduler()
        self._io = threading.RLock()
        self._st = new_state(config)
        self._seam = Seam.of(config)
        self._armed: threading.Event | None = None
        self._cancel: threading.Event | None = None  # the running acquire's cancel event
        self._acquiring = False
        self._acquiring_lock = threading.Lock()
        self._closed = False
        self._loss_lock = threading.Lock()

    # -- public API ------------------------------------------------------------------------------

    @property
    def config(self) -> LockConfig:
        return self._cfg

    @property
    def key(self) -> str:
        """The store key of this lock's lease document."""
        return self._key

    def try_lock(self) -> bool:
        """Take the lock if that can be done now; return whether this object holds it.

        A client whose priority is strictly higher than the holder's records a request and waits
        for the handover (at most min(its waiting timeout, the holder's cleanup timeout)); equal
        or lower priority returns False at once.

        :raises LockHeld: this lock object already holds the lock.
        :raises PreemptionTimeout: a non-forceful request's wait ran out; it was withdrawn.
        :raises ConditionFailed: an emergency override's guard no longer matches the lease.
        :raises CorruptLease: the lease document can't be trusted; it was left untouched.
        :raises StoreError: the store failed past the store timeout.
        """
        self._check_open()
        if self.is_current_owner():
            raise LockHeld(f"{self._key!r}: this lock object already holds the lock")
        return self._acquire(blocking=False, deadline=None, cancel=None)

    def lock(self, timeout: float | None = None, *, cancel: threading.Event | None = None) -> None:
        """Wait until this object holds the lock.

        :param timeout: seconds to wait (None: forever).
        :param cancel: set it (from any thread) to end the wait: ``lock`` then raises
            :class:`~prioritylock.LockCancelled`, with nothing left claimed. :meth:`close` ends a
            wait the same way.
        :raises LockTimeout: not acquired within ``timeout``.
        :raises LockCancelled: the wait was cancelled, or the lock object closed meanwhile.
        :raises LockHeld: this lock object already holds the lock, or another thread is
            acquiring with it.
        :raises CorruptLease: the lease document can't be trusted.
        :raises StoreError: the store failed past the store timeout.
        """
        self._check_open()
        check_timeout(timeout)
        if self.is_current_owner():
            raise LockHeld(f"{self._key!r}: this lock object already holds the lock")
        deadline = None if timeout is None else self._clock.monotonic() + float(timeout)
        if not self._acquire(blocking=True, deadline=deadline, cancel=cancel):
            seen = self._st.seen
            holder = flows.holder_name(seen.lease if seen is not None else None)
            raise LockTimeout(f"{self._key!r}: not acquired within {timeout} s (held by {holder})")

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
            holding = self._require_holding()
            self._run(flows.renew_now(self._st, holding))

    def unlock(self) -> None:
        """Release the lock; with a higher-priority request pending, pass it to the requestor.

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it before this call.
        :raises StoreUnavailable: the release could not land within the store timeout; it is
            retried in the background until it lands or the lease is no longer ours.
        """
        with self._io:
            holding = self._require_holding()
            released = self._run(flows.release(self._st, holding, cleanup_done=False))
        self._announce_released(released)

    def info(self) -> LockInfo | None:
        """The lease as stored now (one read), or None if the lock was never taken.

        :raises CorruptLease: the document can't be trusted.
        :raises StoreError: the store failed.
        """
        with self._io:
            seen = self._run(flows.read(self._st))
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
        check_force_unlock(message, if_fence, if_owner)
        with self._io:
            before = self._run(
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

    def close(self) -> None:
        """Release the lock if held and stop renewing; the object is not used afterwards.

        A wait for the lock in another thread (``lock()``) ends with
        :class:`~prioritylock.LockCancelled`, leaving nothing claimed.
        """
        if self._closed:
            return
        self._closed = True
        if self._acquiring:
            fire_wakeups(self._store, self._key)  # our waiter wakes and sees it closed
        holding = self._st.holding
        if holding is not None and not holding.ended and holding.lost is None:
            with contextlib.suppress(NotLockOwner):
                self.unlock()

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
            f"<Lock {self._key!r} owner={self._cfg.owner!r} priority={self._cfg.priority} {state}>"
        )

    # -- the driver --------------------------------------------------------------------------------

    def _run(self, flow: flows.Flow[T]) -> T:
        """Drive ``flow`` to its end: perform each effect it yields, send back the result (or
        throw in the store's error). The caller holds ``_io``; pauses let go of it."""
        value: Any = None
        error: Exception | None = None
        try:
            while True:
                try:
                    effect = flow.send(value) if error is None else flow.throw(error)
                except StopIteration as stop:
                    return stop.value  # type: ignore[no-any-return]
                value = error = None
                try:
                    value = self._perform(effect)
                except Exception as exc:
                    error = exc
        finally:
            flow.close()

    def _perform(self, effect: object) -> Any:
        store = self._store
        key = self._key
        if effect is flows.NOW:
            return self._clock.monotonic(), self._clock.time()
        kind = type(effect)
        if kind is flows.Put or kind is flows.Read:
            call, args = store_call(self._seam, effect)
            return call(*args)
        if kind is flows.Sleep:
            self._clock.sleep(effect.seconds)  # type: ignore[attr-defined]
        elif effect is flows.ARM:
            self._armed = _wakeups.current(store, key)
        elif kind is flows.Pause:
            return self._pause(effect.seconds)  # type: ignore[attr-defined]
        elif kind is flows.Hold:
            self._hold(effect)  # type: ignore[arg-type]
        elif kind is flows.Lose:
            self._lose(effect.holding, effect.reason, force=effect.force)  # type: ignore[attr-defined]
        elif kind is flows.End:
            entry = effect.holding.entry  # type: ignore[attr-defined]
            if entry is not None:
                self._hb.cancel(entry)
            fire_wakeups(store, key)
        elif kind is flows.Renewed:
            if signals.renewed.receivers:
                holding = effect.holding  # type: ignore[attr-defined]
                self._hb.dispatch(lambda: _send(signals.renewed, self, fence=holding.fence))
        elif kind is flows.Cleanup:
            self._start_cleanup(effect)  # type: ignore[arg-type]
        elif kind is flows.Denied:
            self._notify_denied(effect.lease)  # type: ignore[attr-defined]
        elif kind is flows.RetryRelease:
            self._retry_release_later(effect.holding)  # type: ignore[attr-defined]
        else:  # pragma: no cover - a flow yielded something new
            raise TypeError(f"unknown effect {effect!r}")
        return None

    def _pause(self, seconds: float) -> bool:
        """Wait between attempts without holding ``_io``, woken early by a local release.
        True when the wait is to end: cancelled, or this object closed."""
        wake, self._armed = self._armed, None
        cancel = self._cancel
        if self._closed or (cancel is not None and cancel.is_set()):
            return True
        self._io.release()  # acquire() runs at the top level: this lets go of it
        try:
            if cancel is None:
                if wake is None:
                    self._clock.sleep(seconds)
                else:
                    self._clock.wait(wake, seconds)  # close() sets it too
            else:
                # Two things can end this wait: a release (wake) and the caller's event. A
                # thread waits on one event, so watch the caller's in short slices.
                end = self._clock.monotonic() + seconds
                while not cancel.is_set() and not self._closed:
                    left = end - self._clock.monotonic()
                    if left <= 0 or (wake is not None and wake.is_set()):
                        break
                    step = min(left, _CANCEL_SLICE)
                    if wake is None:
                        self._clock.sleep(step)
                    else:
                        self._clock.wait(wake, step)
            self._armed = _wakeups.current(self._store, self._key)
        finally:
            self._io.acquire()
        return self._closed or (cancel is not None and cancel.is_set())

    # -- acquiring ---------------------------------------------------------------------------------

    def _acquire(
        self, *, blocking: bool, deadline: float | None, cancel: threading.Event | None
    ) -> bool:
        with self._acquiring_lock:
            if self._acquiring:
                # One lock object is one client: two threads acquiring with it would share its
                # state. Every store behaves the same here.
                raise LockHeld(
                    f"{self._key!r}: another thread is acquiring with this lock object "
                    "(use one lock object per thread)"
                )
            self._acquiring = True
        try:
            with self._io:
                self._cancel = cancel
                try:
                    got = self._run(
                        flows.acquire(self._st, new_lock_id(), blocking=blocking, deadline=deadline)
                    )
                finally:
                    self._armed = None
                    self._cancel = None
            if got and (self._closed or (cancel is not None and cancel.is_set())):
                # Closed (or cancelled) while the last write was on its way: never hold on.
                with contextlib.suppress(NotLockOwner):
                    self.unlock()
                raise LockCancelled(f"{self._key!r}: the wait for the lock was cancelled")
        finally:
            self._acquiring = False
        if got:
            self._announce_acquired()
        return got

    def _hold(self, hold: flows.Hold) -> None:
        holding = hold.holding
        holding.entry = self._hb.schedule(
            lambda: self._beat(holding),
            hold.due,
            f"lease {self._key}",
            # An in-process store answers in microseconds: run its heartbeat on the scheduler's
            # own thread rather than pay a hand-off to the pool for every renewal.
            inline=self._st.inline,
            tolerance=hold.tolerance,
        )

    def _announce_acquired(self) -> None:
        holding = self._st.holding
        if holding is None or (self._cfg.listener is None and not signals.acquired.receivers):
            return
        info = LockInfo.from_lease(holding.lease)
        _send(signals.acquired, self, info=info, fence=holding.fence)
        if self._cfg.listener is not None:
            _call_safely(self._cfg.listener.on_acquired, self, info)

    def _notify_denied(self, lease: Lease | None) -> None:
        info = None if lease is None else LockInfo.from_lease(lease)
        listener = self._cfg.listener

        def tell() -> None:
            _send(signals.denied, self, info=info)
            if listener is not None:
                listener.on_denied(self, info)

        self._hb.dispatch(tell)

    # -- holding -----------------------------------------------------------------------------------

    def _require_holding(self) -> flows.Holding:
        holding = self._st.holding
        if holding is not None and not holding.ended:
            self.is_current_owner()  # notices an expired lease
        return flows.require_holding(self._key, holding)

    def _beat(self, holding: flows.Holding) -> float | None:
        """The heartbeat task for one holding."""
        with self._io:
            return self._run(flows.beat(self._st, holding))

    def _start_cleanup(self, cleanup: flows.Cleanup) -> None:
        holding = cleanup.holding
        notice = cleanup_notice(self, cleanup)
        listener = self._cfg.listener

        def cleanup_then_hand_over() -> None:
            _send(signals.cleanup_requested, self, notice=notice)
            if listener is not None:
                try:
                    listener.on_cleanup_notification(notice)
                except Exception:
                    log.exception(
                        "prioritylock: cleanup listener of %r raised; handing over", self._key
                    )
            released = None
            with self._io:
                try:
                    released = self._run(flows.after_cleanup(self._st, holding))
                except Exception:
                    log.exception("prioritylock: handover of %r after cleanup failed", self._key)
            self._announce_released(released)

        self._hb.spawn(cleanup_then_hand_over, f"prioritylock-cleanup {self._key}")

    def _retry_release_later(self, holding: flows.Holding) -> None:
        """Keep trying to release a holding whose release could not land (never drop it)."""
        log.warning(
            "prioritylock: release of %r did not land; retrying in the background", self._key
        )

        def retry() -> float | None:
            with self._io:
                return self._run(flows.background_release(self._st, holding))

        self._hb.schedule(retry, self._clock.monotonic() + 0.5, f"release {self._key}")

    def _announce_released(self, released: flows.Released | None) -> None:
        if released is None or (self._cfg.listener is None and not signals.released.receivers):
            return
        info = LockInfo.from_lease(released.lease)
        _send(signals.released, self, info=info, handed_over=released.handed_over)
        if self._cfg.listener is not None:
            _call_safely(self._cfg.listener.on_released, self)

    def _lose(self, holding: flows.Holding, reason: str, *, force: bool = False) -> None:
        """Mark a holding lost, once, and tell the listener and the lock_lost receivers."""
        with self._loss_lock:
            if not flows.mark_lost(holding, reason, force=force):
                return
        if holding.entry is not None:
            self._hb.cancel(holding.entry)
        listener = self._cfg.listener
        info = LockInfo.from_lease(holding.lease)
        flows.log_lost(self._st, holding, reason)

        def tell() -> None:
            _send(signals.lock_lost, self, reason=reason, info=info)
            if listener is not None:
                listener.on_lock_lost(self, reason)

        self._hb.dispatch(tell)

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"{self._key!r}: this lock object is closed")


#: How often a wait with a ``cancel`` event looks at it (a release in this process still wakes
#: the wait at once).
_CANCEL_SLICE = 0.05


class _Acquired:
    """What :meth:`Lock.acquire` returns: leaving its ``with`` block releases the lock."""

    def __init__(self, lock: Lock) -> None:
        self._lock = lock

    def __enter__(self) -> Lock:
        return self._lock

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._lock.__exit__(exc_type, exc, tb)


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


def _send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send a signal; a receiver that raises is logged, the others still run."""
    for receiver in signal.receivers_for(sender):
        try:
            receiver(sender, **kwargs)
        except Exception:
            log.exception("prioritylock: a signal receiver raised; ignored")


def _call_safely(fn: Callable[..., object], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("prioritylock: a listener raised; ignored")
