"""Holding Apache Hudi's own table lock: prioritylock clients and Java writers under one lock.

``HudiTableLock`` (threads) and ``AsyncHudiTableLock`` (asyncio) read and write
``<base path>/.hoodie/.locks/table_lock.json`` exactly as Hudi's ``StorageBasedLockProvider``
does (the document and its rules are in ``_hudi``), through the store seam: ``create`` is
Hudi's ``If-None-Match: *`` (GCS ``ifGenerationMatch=0``), ``replace`` its ``If-Match: <etag>``
(GCS the generation). Requests: an uncontended acquire 2 (read, write), a renewal 1, a release
1, like Hudi's.

What carries over from prioritylock's own lease, and what doesn't:

- expiry is Hudi's rule on wall clocks (free when released, or when the reader's wall clock is
  past ``validUntil`` + drift), because Java writers judge our holdings by it; this mode assumes
  the writers' wall clocks agree within ``max_clock_drift``. The holder stops believing it holds
  ``lease_timeout - max_clock_drift`` after it *started* its last successful write, on its own
  monotonic clock, so no writer whose clock is within the drift sees it free while it holds.
- no fencing token: a Java renewal rewrites the document with only Hudi's three fields.
- no preemption: a Java holder can't be asked. Every requestor, whatever its priority and
  forceful or not, waits until the holder releases or its lease lapses.

The lock runs Hudi's rules as flows (``_hudi_flows``) on the drivers every ``Lock`` runs on
(``_lock.ThreadRunner``, ``_alock.LoopRunner``): the same store-call deadlines, retries, pauses
woken by notices, cancellation and scheduler. :class:`HudiBase` is what the two twins share (the
state, the ``match`` over Hudi's effects, renewals and losses); they differ only in how they
wait. A holder hears that it lost the lock (taken after it lapsed, or forced free) at its next
read of the document: its next renewal, or at once when a write in the process (or, on a
``LocalStore``, on the machine) is noticed; ``on_lost`` and the ``lock_lost`` signal are told.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Any, ClassVar

import attrs

from prioritylock import _effects as effects
from prioritylock import _hudi as hudi
from prioritylock import _hudi_flows as hf
from prioritylock import signals
from prioritylock._alock import LoopRunner, shielded
from prioritylock._ascheduler import AsyncScheduler
from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._config import (
    DEFAULT_MAX_CLOCK_DRIFT,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_STORE_TIMEOUT,
    default_owner,
)
from prioritylock._errors import LockHeld, LockTimeout, NotLockOwner
from prioritylock._flows import now
from prioritylock._hudi_config import DEFAULT_RENEW, DEFAULT_VALIDITY
from prioritylock._lock import ThreadRunner
from prioritylock._runner import FlowRunner, News, check_timeout, log
from prioritylock._scheduler import Scheduler
from prioritylock._wake import NOTICES
from prioritylock.stores._base import ObjectStore

__all__ = [
    "KEY",
    "AsyncHudiTableLock",
    "HudiBase",
    "HudiLockInfo",
    "HudiTableLock",
    "force_unlock",
    "read_info",
]

#: The lock's key in a store rooted at the table's base path.
KEY = f"{hudi.LOCKS_FOLDER}/{hudi.LOCK_FILE}"


@attrs.frozen
class HudiLockInfo:
    """Hudi's lock as one read found it.

    :ivar free: Hudi's writers would take it now (released, or ``validUntil`` + drift passed).
    :ivar time_left: seconds until it is free by Hudi's rule (0 when free).
    :ivar version: the store's version token (S3/Azure ETag, GCS generation) of what was read.
    """

    owner: str
    valid_until_ms: int
    expired: bool
    free: bool
    time_left: float
    version: str

    @classmethod
    def of(cls, data: hudi.HudiLockData, version: str, now_ms: int, drift_ms: int) -> HudiLockInfo:
        return cls(
            owner=data.owner,
            valid_until_ms=data.valid_until_ms,
            expired=data.expired,
            free=hudi.is_free(data, now_ms, drift_ms),
            time_left=hudi.time_left_ms(data, now_ms, drift_ms) / 1000,
            version=version,
        )


def read_info(
    store: ObjectStore,
    key: str = KEY,
    *,
    clock: Clock = SYSTEM_CLOCK,
    max_clock_drift: float = DEFAULT_MAX_CLOCK_DRIFT,
) -> HudiLockInfo | None:
    """Hudi's lock now (one read), or None when the table was never locked.

    :raises CorruptLease: the object is not a Hudi lock document.
    :raises StoreError: the store failed.
    """
    return _one_off(store, key, clock, max_clock_drift).info()


def force_unlock(
    store: ObjectStore,
    key: str = KEY,
    *,
    if_owner: str,
    if_valid_until_ms: int,
    clock: Clock = SYSTEM_CLOCK,
    max_clock_drift: float = DEFAULT_MAX_CLOCK_DRIFT,
) -> HudiLockInfo:
    """Mark Hudi's lock released (``expired: true``), only while it shows what the operator saw.

    One read and one conditional write over the version read: a holder that renewed or a writer
    that took the lock since makes it fail, and nothing is written. A holder in this process
    (or, on a ``LocalStore``, on this machine) hears it at once, any other at its next renewal
    (its condition fails), as Hudi's holders do.

    :returns: the lock as written.
    :raises ConditionFailed: absent, or not the owner and ``validUntil`` given, or changed between
        the read and the write.
    :raises CorruptLease: the object is not a Hudi lock document.
    :raises StoreError: the store failed.
    """
    lock = _one_off(store, key, clock, max_clock_drift)
    return lock.force_unlock(if_owner=if_owner, if_valid_until_ms=if_valid_until_ms)


def _one_off(store: ObjectStore, key: str, clock: Clock, drift: float) -> HudiTableLock:
    return HudiTableLock(store, key=key, clock=clock, max_clock_drift=drift, heartbeat=False)


class HudiBase(FlowRunner):
    """What ``HudiTableLock`` and ``AsyncHudiTableLock`` share: the state, the checks, the
    ``match`` over Hudi's effects, renewals scheduled and lost, and news of a loss."""

    _kind: ClassVar[str]

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str,
        lease_timeout: float,
        renew_interval: float,
        max_clock_drift: float,
        poll_interval: float,
        store_timeout: float,
        name: str,
        clock: Clock,
        on_lost: Callable[[str], object] | None,
        heartbeat: bool,
    ) -> None:
        FlowRunner.__init__(self, store, key, clock)
        #: Hudi's owner field: a random UUID per lock object, as per Java lock provider.
        self.owner_id = str(uuid.uuid4())
        self.name = name or default_owner()
        self._on_lost = on_lost
        self._heartbeat_on = heartbeat
        # An in-process store answers at once: renew on the scheduler's own thread (as Lock).
        self._inline = not store.capabilities.shared_across_processes
        self._drift = max_clock_drift
        self._st = hf.HudiState(
            key,
            self.owner_id,
            validity=lease_timeout,
            renew_interval=renew_interval,
            drift=max_clock_drift,
            poll_interval=poll_interval,
            store_timeout=store_timeout,
        )
        self._loss_lock = threading.Lock()

    @property
    def key(self) -> str:
        return self._key

    @property
    def store(self) -> ObjectStore:
        return self._store

    def is_current_owner(self) -> bool:
        """Whether this object holds the lock now, judged on its own clock (no request)."""
        holding = self._st.holding
        if holding is None:
            return False
        now = self._clock.monotonic()
        if now >= holding.deadline and holding.active and not holding.releasing:
            self._lose("expired")
        return holding.believes(now)

    def __repr__(self) -> str:
        state = "held" if self.is_current_owner() else "not held"
        return f"{self._kind}(key={self._key!r}, owner_id={self.owner_id!r}, {state})"

    # -- checks and flows the twins share ---------------------------------------------------------

    def _check_not_held(self) -> None:
        if self.is_current_owner():
            raise LockHeld(f"{self._key}: this lock object already holds the lock")

    def _deadline(self, timeout: float | None) -> float | None:
        check_timeout(timeout)
        self._check_not_held()
        return None if timeout is None else self._clock.monotonic() + float(timeout)

    def _timed_out(self, timeout: float | None) -> LockTimeout:
        return LockTimeout(f"{self._key}: not acquired within {timeout} s")

    def _info(self, found: hf.Found | None) -> HudiLockInfo | None:
        if found is None:
            return None
        now_ms = hf.ms(self._clock.time())
        return HudiLockInfo.of(found.data, found.version, now_ms, hf.ms(self._drift))

    def _read_flow(self) -> effects.HudiFlow[hf.Found | None]:
        mono = yield from now()
        return (yield from hf.read(self._st, mono + self._st.store_timeout))

    def _forced(self, written: tuple[hudi.HudiLockData, str]) -> HudiLockInfo:
        info = self._info(hf.Found(*written))
        assert info is not None
        return info

    def _begin_close(self) -> bool:
        """Mark this object closed, end its wait; whether it still holds the lock."""
        self._closed = True
        armed = self._armed
        if armed is not None:
            armed.notify()  # the wait wakes and sees it closed
        holding = self._st.holding
        return holding is not None and holding.active and not holding.releasing

    # -- Hudi's effects ---------------------------------------------------------------------------

    def _perform_effect(self, effect: effects.HudiEffect) -> Any:
        match effect:
            case effects.Waits() | effects.Now() | effects.Arm() | effects.Hint():  # effects.Shared
                return self._perform_shared(effect)
            case effects.HudiHeld(due=due):
                self._hold(due)
            case effects.HudiLost(reason=reason):
                self._lose(reason)
            case effects.HudiEnded():
                self._stop_heartbeat()
            case effects.HudiUnsettled():
                st = self._st
                until = self._clock.monotonic() + st.validity + st.store_timeout
                self._when_settled(lambda: hf.background_settle(st, until), f"settle {self._key}")
            case _:
                effects.assert_never(effect)
        return None

    def _hold(self, due: float) -> None:
        """Renew the new holding from ``due`` on the scheduler; a notice brings a read forward."""
        holding = self._st.holding
        if not self._heartbeat_on or holding is None:
            return
        task = self._task(lambda: hf.beat(self._st, holding))
        try:
            holding.entry = self._schedule(task, due, f"hudi {self._key}", inline=self._inline)
        except RuntimeError:  # the scheduler is closed: the process is ending
            log.warning("hudi lock %s: no heartbeat; it lapses unless renewed", self._key)
            return
        holding.watching = NOTICES.watch(
            self._store, self._key, self, lambda _stamp: self._poke(holding)
        )

    def _poke(self, holding: hf.HudiHolding) -> None:
        """A notice for the document (any thread): the renewal task reads it now."""
        holding.poked = True
        entry = holding.entry
        if entry is not None and holding.active:
            self._bring_forward(entry)

    def _stop_heartbeat(self) -> None:
        holding = self._st.holding
        if holding is None:
            return
        entry, holding.entry = holding.entry, None
        if entry is not None:
            self._unschedule(entry)
        watching, holding.watching = holding.watching, None
        if watching is not None:
            NOTICES.unwatch(watching)

    def _lose(self, reason: str) -> None:
        """Mark the holding lost, once: stop renewing, tell ``on_lost`` and ``lock_lost``."""
        with self._loss_lock:
            holding = self._st.holding
            if holding is None or not holding.active:
                return
            holding.lost = self._st.lost = reason
        self._stop_heartbeat()
        log.error("hudi lock %s lost by %s: %s", self._key, self.owner_id, reason)
        info = self._info(hf.Found(holding.data, holding.version))
        self._tell(
            News(signals.lock_lost, {"reason": reason, "info": info}, self._on_lost, (reason,))
        )


class HudiTableLock(ThreadRunner, HudiBase):
    """Apache Hudi's table lock, held the way Hudi's ``StorageBasedLockProvider`` holds it.

    Build one with :meth:`LockBuilder.hudi_table` or from a writer configuration that names
    Hudi's storage lock provider (:meth:`HudiTableBuilder.from_properties`). One lock object is
    one client, as a ``Lock``: not reentrant, and a second thread acquiring with it while one
    waits raises ``LockHeld`` (threads that contend build one object each); any thread may call
    the other methods. While it is held, the process's scheduler renews it every
    ``renew_interval`` (measured on the scheduler's clock); ``on_lost`` and the ``lock_lost``
    signal are told on the scheduler's notifier thread. ``scheduler`` replaces the process's one
    (tests pass a manual ``Scheduler(clock, threaded=False)`` on the lock's fake clock);
    ``heartbeat=False`` renews only when :meth:`renew` is called.
    """

    _kind: ClassVar[str] = "HudiTableLock"
    _who: ClassVar[str] = "thread"

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str = KEY,
        lease_timeout: float = DEFAULT_VALIDITY,
        renew_interval: float = DEFAULT_RENEW,
        max_clock_drift: float = DEFAULT_MAX_CLOCK_DRIFT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
        name: str = "",
        clock: Clock = SYSTEM_CLOCK,
        on_lost: Callable[[str], object] | None = None,
        heartbeat: bool = True,
        scheduler: Scheduler | None = None,
    ) -> None:
        HudiBase.__init__(
            self,
            store,
            key=key,
            lease_timeout=lease_timeout,
            renew_interval=renew_interval,
            max_clock_drift=max_clock_drift,
            poll_interval=poll_interval,
            store_timeout=store_timeout,
            name=name,
            clock=clock,
            on_lost=on_lost,
            heartbeat=heartbeat,
        )
        self._init_threads(scheduler)

    _perform = HudiBase._perform_effect

    def try_lock(self) -> bool:
        """Take the lock if Hudi's rule says it is free now (one read, then one write).

        It waits for no failing store: it stops retrying a store operation after min(store
        timeout, 2 s); a request the store never answers is given up at the store timeout.

        :returns: whether this object now holds the lock.
        :raises LockHeld: this object already holds it, or another thread is acquiring with it.
        :raises CorruptLease: the object is not a Hudi lock document (left untouched).
        :raises StoreError: the store failed, or could not be reached, within the bound above.
        """
        self._check_not_held()
        with self._acquisition(), self._io:
            return self._run(hf.acquire(self._st, blocking=False, deadline=None))

    def lock(self, timeout: float | None = None, *, cancel: threading.Event | None = None) -> None:
        """Wait for the lock, backed off as ``Lock``'s waiters are (up to ``poll_interval``
        between reads, 0.5-1.5x it), and read at once when a lock of this process (or, on a store
        that watches its keys such as ``LocalStore``, of this machine) writes the document: a
        release is taken without waiting for the next poll. A Java writer's release is seen at
        the next poll.

        :param timeout: seconds to wait at most (None: no limit).
        :param cancel: set it (from any thread) to end the wait with ``LockCancelled``.
        :raises LockTimeout: not acquired within ``timeout``, whatever the store does: also when
            the store could not be reached until then (its ``__cause__`` is the last
            ``StoreUnavailable``).
        :raises LockCancelled: ``cancel`` was set, or the lock closed.
        :raises LockHeld: this object already holds the lock, or another thread is acquiring
            with it.
        :raises CorruptLease: the object is not a Hudi lock document.
        :raises StoreError: the store failed for a whole store timeout before the deadline.
        """
        deadline = self._deadline(timeout)
        with self._acquisition(), self._io:
            self._cancel = cancel
            try:
                got = self._run(hf.acquire(self._st, blocking=True, deadline=deadline))
            finally:
                self._armed = self._cancel = None
        if got and (self._closed or (cancel is not None and cancel.is_set())):
            # Closed (or cancelled) while the last write was on its way: never hold on.
            with contextlib.suppress(NotLockOwner):
                self.unlock()
            raise self._cancelled()
        if not got:
            raise self._timed_out(timeout)

    def unlock(self) -> None:
        """Release: one conditional write of ``expired: true`` over this holder's version.

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it (expired, taken by others, forced free)
            before this call or meanwhile.
        :raises StoreError: the release could not land within ``store_timeout``; it is retried
            in the background (and Hudi's writers take the lock once its ``validUntil`` +
            drift has passed).
        """
        with self._io:
            self._run(hf.release(self._st))

    def renew(self) -> None:
        """Extend the lease now: one conditional write of a fresh ``validUntil``.

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it was taken by others (or forced free) since this holder's last write.
        :raises StoreError: the write failed past ``store_timeout``; the heartbeat keeps trying.
        """
        with self._io:
            self._run(hf.renew(self._st, self._st.require_holding()))

    def info(self) -> HudiLockInfo | None:
        """Hudi's lock as stored now (one read), or None if the table was never locked.

        :raises CorruptLease: the object is not a Hudi lock document.
        :raises StoreError: the store failed.
        """
        with self._io:
            return self._info(self._run(self._read_flow()))

    def force_unlock(self, *, if_owner: str, if_valid_until_ms: int) -> HudiLockInfo:
        """Mark the lock released whoever holds it, only while it shows what the operator saw
        (see :func:`force_unlock`: one read, one conditional write).

        :raises ConditionFailed: the lock shows something else (nothing written).
        :raises CorruptLease: the object is not a Hudi lock document.
        :raises StoreError: the store failed.
        """
        flow = hf.force_unlock(self._st, if_owner=if_owner, if_valid_until_ms=if_valid_until_ms)
        with self._io:
            return self._forced(self._run(flow))

    def close(self) -> None:
        """Release if held (best effort), end waits, stop the heartbeat."""
        if self._begin_close():
            try:
                self.unlock()
            except Exception as exc:  # closing must not raise for a lock it can't release
                log.warning("hudi lock %s: release on close failed: %s", self._key, exc)
        self._stop_heartbeat()

    def __enter__(self) -> HudiTableLock:
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


class AsyncHudiTableLock(LoopRunner, HudiBase):
    """:class:`HudiTableLock` for asyncio: the same options, errors, document and rules, every
    call awaited (:meth:`is_current_owner` excepted: it needs no request). Build it with
    :meth:`HudiTableBuilder.build_async`. Use it from one event loop; the loop's scheduler
    renews it.

    A task cancelled in :meth:`lock`/:meth:`try_lock` first lets the store call in flight
    finish, then takes back what it may have written (released if it landed); :meth:`unlock`
    and the exit of ``async with`` complete even when the surrounding task is cancelled.
    """

    _kind: ClassVar[str] = "AsyncHudiTableLock"
    _who: ClassVar[str] = "task"

    def __init__(
        self,
        store: ObjectStore,
        *,
        key: str = KEY,
        lease_timeout: float = DEFAULT_VALIDITY,
        renew_interval: float = DEFAULT_RENEW,
        max_clock_drift: float = DEFAULT_MAX_CLOCK_DRIFT,
        poll_interval: float = DEFAULT_POLL_INTERVAL,
        store_timeout: float = DEFAULT_STORE_TIMEOUT,
        name: str = "",
        clock: Clock = SYSTEM_CLOCK,
        on_lost: Callable[[str], object] | None = None,
        heartbeat: bool = True,
        scheduler: AsyncScheduler | None = None,
    ) -> None:
        HudiBase.__init__(
            self,
            store,
            key=key,
            lease_timeout=lease_timeout,
            renew_interval=renew_interval,
            max_clock_drift=max_clock_drift,
            poll_interval=poll_interval,
            store_timeout=store_timeout,
            name=name,
            clock=clock,
            on_lost=on_lost,
            heartbeat=heartbeat,
        )
        self._init_loop(scheduler)

    async def try_lock(self) -> bool:
        """As :meth:`HudiTableLock.try_lock`, awaited."""
        self._check_not_held()
        return await self._acquire(blocking=False, deadline=None)

    async def lock(self, timeout: float | None = None) -> None:
        """As :meth:`HudiTableLock.lock`, awaited (cancel the task to end the wait)."""
        if not await self._acquire(blocking=True, deadline=self._deadline(timeout)):
            raise self._timed_out(timeout)

    async def unlock(self) -> None:
        """As :meth:`HudiTableLock.unlock`, awaited; completes even if the calling task is
        cancelled meanwhile (shielded; bounded by the store timeout)."""
        await shielded(self._guarded(hf.release(self._st)))

    async def renew(self) -> None:
        """As :meth:`HudiTableLock.renew`, awaited."""
        await self._guarded(hf.renew(self._st, self._st.require_holding()))

    async def info(self) -> HudiLockInfo | None:
        """As :meth:`HudiTableLock.info`, awaited."""
        return self._info(await self._guarded(self._read_flow()))

    async def force_unlock(self, *, if_owner: str, if_valid_until_ms: int) -> HudiLockInfo:
        """As :meth:`HudiTableLock.force_unlock`, awaited."""
        flow = hf.force_unlock(self._st, if_owner=if_owner, if_valid_until_ms=if_valid_until_ms)
        return self._forced(await self._guarded(flow))

    async def aclose(self) -> None:
        """Release if held (best effort), end waits, stop renewing."""
        if self._begin_close():
            try:
                await self.unlock()
            except Exception as exc:  # closing must not raise for a lock it can't release
                log.warning("hudi lock %s: release on close failed: %s", self._key, exc)
        self._stop_heartbeat()

    async def __aenter__(self) -> AsyncHudiTableLock:
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

    async def _guarded(self, flow: effects.HudiFlow[Any]) -> Any:
        async with self._guard():
            return await self._run(flow)

    async def _acquire(self, *, blocking: bool, deadline: float | None) -> bool:
        with self._acquisition():
            return await self._acquire_guarded(blocking, deadline)

    async def _acquire_guarded(self, blocking: bool, deadline: float | None) -> bool:
        guard = self._guard()
        try:
            await guard.acquire()
            self._guard_held = True
            try:
                flow = hf.acquire(self._st, blocking=blocking, deadline=deadline)
                got: bool = await self._run(flow)
            finally:
                self._armed = None
                if self._guard_held:
                    self._guard_held = False
                    guard.release()
            if got and self._closed:
                # Closed while the last write was on its way: never hold on.
                with contextlib.suppress(NotLockOwner):
                    await self.unlock()
                raise self._cancelled()
        except asyncio.CancelledError:
            await shielded(self._abandon())
            raise
        return got

    async def _abandon(self) -> None:
        """A cancelled acquire: let the store call in flight finish, then release what we hold
        or take back what of our claim the document shows."""
        inflight = self._inflight
        for call in {*self._late, *([inflight] if inflight is not None else [])}:
            with contextlib.suppress(Exception):
                await call
        self._inflight = None
        holding = self._st.holding
        try:
            if holding is not None and holding.active and not holding.releasing:
                await self._guarded(hf.release(self._st))
            else:
                await self._guarded(hf.settle(self._st))
        except Exception:
            log.exception("hudi lock %s: could not settle a cancelled acquire", self._key)
