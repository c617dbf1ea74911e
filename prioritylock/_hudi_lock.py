"""Holding Apache Hudi's own table lock: prioritylock clients and Java writers under one lock.

``HudiTableLock`` reads and writes ``<base path>/.hoodie/.locks/table_lock.json`` exactly as
Hudi's ``StorageBasedLockProvider`` does (the document and its rules are in ``_hudi``), through
the store seam: ``create`` is Hudi's ``If-None-Match: *`` (GCS ``ifGenerationMatch=0``),
``replace`` its ``If-Match: <etag>`` (GCS the generation). Requests: an uncontended acquire 2
(read, write), a renewal 1, a release 1, like Hudi's.

What carries over from prioritylock's own lease, and what doesn't:

- expiry is Hudi's rule on wall clocks (free when released, or when the reader's wall clock is
  past ``validUntil`` + drift), because Java writers judge our holdings by it; this mode assumes
  the writers' wall clocks agree within ``max_clock_drift``. The holder stops believing it holds
  ``lease_timeout - max_clock_drift`` after it *started* its last successful write, on its own
  monotonic clock, so no writer whose clock is within the drift sees it free while it holds.
- no fencing token: a Java renewal rewrites the document with only Hudi's three fields.
- no preemption: a Java holder can't be asked. Every requestor, whatever its priority and
  forceful or not, waits until the holder releases or its lease lapses.

It runs on the machinery every ``Lock`` of the process shares: the process's scheduler
(``_scheduler.default_scheduler()``) renews each held lock, on the scheduler's own thread for an
in-process store and on its small worker pool otherwise, never a thread per lock; ``on_lost`` is
told on the scheduler's notifier thread. A waiting :meth:`HudiTableLock.lock` arms a waiter on the
process's notices board (``_wake.NOTICES``) before each read and pauses on it, and every write of
this module that may have landed (acquire, release, force; not a renewal, which frees nothing) is
a notice there: a release in this process, or on a store that watches its keys (``LocalStore``)
in another, ends the wait at once. A Java writer sends no notice; its release is seen at the
next poll. Notices only bring a read forward: every decision is Hudi's rule on what the read
returns, as before. The decisions (``_hudi``) are still driven here, not by ``_driver.LockBase``:
the lease flows' effects (fences, requests, preemption) have no counterpart in Hudi's document.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import NoReturn, TypeVar

import attrs

from prioritylock import _hudi as hudi
from prioritylock._builder import LockBuilder
from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._config import (
    DEFAULT_MAX_CLOCK_DRIFT,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_STORE_TIMEOUT,
    default_owner,
)
from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    LockCancelled,
    LockHeld,
    LockLost,
    LockTimeout,
    NotLockOwner,
    StoreUnavailable,
)
from prioritylock._hudi_config import DEFAULT_RENEW, DEFAULT_VALIDITY, HudiSettings
from prioritylock._lock import _CANCEL_SLICE
from prioritylock._scheduler import ScheduledTask, Scheduler, default_scheduler
from prioritylock._wake import NOTICES, ThreadWaiter
from prioritylock.stores._base import ObjectStore, Versioned

__all__ = [
    "KEY",
    "HudiLockInfo",
    "HudiTableBuilder",
    "HudiTableLock",
    "force_unlock",
    "read_info",
]

log = logging.getLogger("prioritylock")

#: The lock's key in a store rooted at the table's base path.
KEY = f"{hudi.LOCKS_FOLDER}/{hudi.LOCK_FILE}"

T = TypeVar("T")


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


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _written(store: ObjectStore, key: str, write: Callable[[], str], source: object) -> str:
    """``write()`` (a write of ``key``), then the notice the lease drivers give a write
    (``_wake.Notices.after_write``: unless it surely did not land) to the process's locks on the
    document (``source``, the lock that wrote, is not told)."""
    try:
        version = write()
    except BaseException as exc:
        NOTICES.after_write(store, key, exc, source=source)
        raise
    NOTICES.after_write(store, key, None, source=source)
    return version


def _read(store: ObjectStore, key: str) -> tuple[hudi.HudiLockData, Versioned] | None:
    seen = store.read(key)
    return None if seen is None else (hudi.decode(seen.data, key=key), seen)


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
    found = _read(store, key)
    if found is None:
        return None
    data, seen = found
    return HudiLockInfo.of(data, seen.version, _ms(clock.time()), _ms(max_clock_drift))


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
    that took the lock since makes it fail, and nothing is written. The holder, if alive, learns
    at its next renewal (its condition fails), as Hudi's holders do.

    :returns: the lock as written.
    :raises ConditionFailed: absent, or not the owner and ``validUntil`` given, or changed between
        the read and the write.
    :raises CorruptLease: the object is not a Hudi lock document.
    :raises StoreError: the store failed.
    """
    found = _read(store, key)
    if found is None:
        raise ConditionFailed(key, "no lock document")
    data, seen = found
    if data.owner != if_owner or data.valid_until_ms != if_valid_until_ms:
        raise ConditionFailed(
            key, f"the lock now shows owner {data.owner}, validUntil {data.valid_until_ms}"
        )
    written = hudi.forced(data)
    body = hudi.encode(written)
    version = _written(store, key, lambda: store.replace(key, body, seen.version), None)
    return HudiLockInfo.of(written, version, _ms(clock.time()), _ms(max_clock_drift))


class HudiTableLock:
    """Apache Hudi's table lock, held the way Hudi's ``StorageBasedLockProvider`` holds it.

    Build one with :meth:`LockBuilder.hudi_table` or from a writer configuration that names
    Hudi's storage lock provider (:meth:`LockBuilder.from_properties`). Not reentrant; safe to
    call from several threads. While it is held, the process's scheduler renews it every
    ``renew_interval`` (measured on the scheduler's clock); ``on_lost`` is called on the
    scheduler's notifier thread. ``scheduler`` replaces the process's one (tests pass a manual
    ``Scheduler(clock, threaded=False)`` on the lock's fake clock); ``heartbeat=False`` renews
    only when :meth:`renew` is called.
    """

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
        self._store = store
        self._key = key
        self._validity = lease_timeout
        self._renew_interval = renew_interval
        self._drift = max_clock_drift
        self._poll = poll_interval
        self._store_timeout = store_timeout
        self._clock = clock
        self._on_lost = on_lost
        self._heartbeat_on = heartbeat
        self._hb = scheduler or default_scheduler()
        # An in-process store answers at once: renew on the scheduler's own thread (as Lock).
        self._inline = not store.capabilities.shared_across_processes
        #: Hudi's owner field: a random UUID per lock object, as per Java lock provider.
        self.owner_id = str(uuid.uuid4())
        self.name = name or default_owner()
        self._io = threading.RLock()  # one store exchange at a time for this object
        self._mu = threading.Lock()  # the state below
        self._held: hudi.HudiLockData | None = None
        self._version = ""
        self._deadline = 0.0  # monotonic: stop believing we hold it from here on
        self._lost = ""  # why it was lost, until unlock() reports it
        self._closed = threading.Event()
        self._beat: Callable[[], float | None] | None = None  # the holding's renewal task
        self._entry: ScheduledTask | None = None  # ... as the scheduler has it
        self._armed: set[ThreadWaiter] = set()  # waits in lock(): close() ends them

    # -- public ----------------------------------------------------------------------------

    @property
    def key(self) -> str:
        return self._key

    @property
    def store(self) -> ObjectStore:
        return self._store

    def try_lock(self) -> bool:
        """Take the lock if Hudi's rule says it is free now (one read, then one write).

        :returns: whether this object now holds the lock.
        :raises LockHeld: this object already holds it.
        :raises CorruptLease: the object is not a Hudi lock document (left untouched).
        :raises StoreError: the store failed past ``store_timeout``.
        """
        if self.is_current_owner():
            raise LockHeld(f"{self._key}: this lock object already holds the lock")
        with self._io:
            found = self._retry(lambda: _read(self._store, self._key))
            now = _ms(self._clock.time())
            if found is not None and not hudi.is_free(found[0], now, _ms(self._drift)):
                return False
            wanted = hudi.acquired(self.owner_id, now, _ms(self._validity))
            start = self._clock.monotonic()
            body = hudi.encode(wanted)
            try:
                if found is None:
                    version = self._write(lambda: self._store.create(self._key, body))
                else:
                    prior = found[1].version
                    version = self._write(lambda: self._store.replace(self._key, body, prior))
            except (ConditionFailed, StoreUnavailable) as exc:
                # A lost race, or a write that may have landed (a lost response; an SDK retry of
                # a write that landed, answered 412): the document says which.
                if isinstance(exc, StoreUnavailable) and not exc.outcome_unknown:
                    raise
                landed = self._landed(wanted)
                if landed is None:
                    return False
                version = landed
            self._take(wanted, version, start)
        log.info("hudi lock %s taken by %s (%s)", self._key, self.owner_id, self.name)
        return True

    def lock(self, timeout: float | None = None, *, cancel: threading.Event | None = None) -> None:
        """Wait for the lock: a read every ``poll_interval`` on average (0.5-1.5x it), and one at
        once when a lock of this process (or, on a store that watches its keys such as
        ``LocalStore``, of this machine) writes the document: a release is taken without waiting
        for the next poll. A Java writer's release is seen at the next poll.

        :param timeout: seconds to wait at most (None: no limit).
        :raises LockTimeout: the wait ran out.
        :raises LockCancelled: ``cancel`` was set, or the lock closed.
        """
        start = self._clock.monotonic()
        while True:
            if self._closed.is_set() or (cancel is not None and cancel.is_set()):
                raise LockCancelled(f"{self._key}: the wait for the lock was cancelled")
            # Armed before the read: a release that lands after it ends the pause at once.
            waiter = self._arm()
            try:
                try:
                    if self.try_lock():
                        return
                except StoreUnavailable as exc:
                    log.warning("hudi lock %s: store unavailable while waiting: %s", self._key, exc)
                pause = self._poll * random.uniform(0.5, 1.5)
                if timeout is not None:
                    left = start + timeout - self._clock.monotonic()
                    if left <= 0:
                        raise LockTimeout(f"{self._key}: not acquired within {timeout} s")
                    pause = min(pause, left)
                self._pause(waiter, pause, cancel)
            finally:
                with self._mu:
                    self._armed.discard(waiter)

    def unlock(self) -> None:
        """Release: one conditional write of ``expired: true`` over this holder's version.

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it before this call (nothing written).
        :raises StoreError: the release could not land within ``store_timeout``; Hudi's writers
            take the lock once its ``validUntil`` + drift has passed.
        """
        self._stop_heartbeat()
        self.is_current_owner()  # past its own deadline, a holder has lost it: nothing to write
        with self._io:
            with self._mu:
                held, version, lost = self._held, self._version, self._lost
                self._lost = ""
            if held is None:
                if lost:
                    raise LockLost(f"{self._key}: the lock was lost ({lost})", reason=lost)
                raise NotLockOwner(f"{self._key}: this lock object does not hold the lock")
            done = hudi.released(held)
            body = hudi.encode(done)
            try:
                self._write(lambda: self._store.replace(self._key, body, version))
            except (ConditionFailed, StoreUnavailable) as exc:
                unknown = isinstance(exc, ConditionFailed) or exc.outcome_unknown
                landed = self._landed(done) if unknown else None
                if landed is not None and isinstance(exc, ConditionFailed):
                    # It landed after all (a 412 answering an SDK's retry): the waiters' news.
                    NOTICES.notice(self._store, self._key, source=self)
                if landed is None:
                    self._clear()
                    if isinstance(exc, StoreUnavailable):
                        raise
                    raise LockLost(
                        f"{self._key}: the lock was taken by others before release",
                        reason="acquired by others",
                    ) from None
            self._clear()
        log.info("hudi lock %s released by %s", self._key, self.owner_id)

    def renew(self) -> None:
        """Extend the lease now: one conditional write of a fresh ``validUntil``.

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it was taken by others (or forced free) since this holder's last write.
        :raises StoreError: the write failed past ``store_timeout``; the heartbeat keeps trying.
        """
        with self._io:
            with self._mu:
                held, version = self._held, self._version
            if held is None or not self.is_current_owner():
                raise NotLockOwner(f"{self._key}: this lock object does not hold the lock")
            start = self._clock.monotonic()
            wanted = hudi.renewed(held, _ms(self._clock.time()), _ms(self._validity))
            body = hudi.encode(wanted)
            try:
                new_version = self._write(
                    lambda: self._store.replace(self._key, body, version), quiet=True
                )
            except (ConditionFailed, StoreUnavailable) as exc:
                lost = isinstance(exc, ConditionFailed)
                unknown = lost or (isinstance(exc, StoreUnavailable) and exc.outcome_unknown)
                landed = self._landed(wanted) if unknown else None
                if landed is None:
                    if lost:
                        self._lose("acquired by others")
                        raise LockLost(
                            f"{self._key}: lost to another writer", reason="acquired by others"
                        ) from None
                    raise
                new_version = landed
            with self._mu:
                if self._held is not None:
                    self._held, self._version = wanted, new_version
                    self._deadline = start + self._validity - self._drift

    def is_current_owner(self) -> bool:
        """Whether this object holds the lock now, judged on its own clock (no request)."""
        with self._mu:
            held, deadline = self._held, self._deadline
        if held is None:
            return False
        if self._clock.monotonic() >= deadline:
            self._lose("expired")
            return False
        return True

    def info(self) -> HudiLockInfo | None:
        """Hudi's lock as stored now (one read), or None if the table was never locked.

        :raises CorruptLease: the object is not a Hudi lock document.
        :raises StoreError: the store failed.
        """
        return read_info(self._store, self._key, clock=self._clock, max_clock_drift=self._drift)

    def force_unlock(self, *, if_owner: str, if_valid_until_ms: int) -> HudiLockInfo:
        """Mark the lock released whoever holds it, only while it shows what the operator saw
        (see :func:`force_unlock`: one read, one conditional write).

        :raises ConditionFailed: the lock shows something else (nothing written).
        :raises CorruptLease: the object is not a Hudi lock document.
        :raises StoreError: the store failed.
        """
        with self._io:
            return force_unlock(
                self._store,
                self._key,
                if_owner=if_owner,
                if_valid_until_ms=if_valid_until_ms,
                clock=self._clock,
                max_clock_drift=self._drift,
            )

    def close(self) -> None:
        """Release if held (best effort), end waits, stop the heartbeat."""
        self._closed.set()
        with self._mu:
            waiting = list(self._armed)
        for waiter in waiting:
            waiter.notify()  # the wait wakes and sees it closed
        if self._held is not None:
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
        self.unlock()

    def __repr__(self) -> str:
        return f"HudiTableLock(key={self._key!r}, owner_id={self.owner_id!r})"

    # -- internals -------------------------------------------------------------------------

    def _take(self, data: hudi.HudiLockData, version: str, start: float) -> None:
        with self._mu:
            self._held, self._version, self._lost = data, version, ""
            self._deadline = start + self._validity - self._drift
        if self._heartbeat_on:
            self._start_heartbeat()

    def _clear(self) -> None:
        with self._mu:
            self._held, self._version = None, ""

    def _lose(self, reason: str) -> None:
        with self._mu:
            if self._held is None:
                return
            self._held, self._version, self._lost = None, "", reason
        self._stop_heartbeat()
        log.error("hudi lock %s lost by %s: %s", self._key, self.owner_id, reason)
        on_lost = self._on_lost
        if on_lost is not None:

            def tell() -> None:
                on_lost(reason)

            # Off the scheduler's threads; one that raises is logged and stops nothing.
            self._hb.dispatch(tell)

    def _start_heartbeat(self) -> None:
        """Have the scheduler renew this holding every ``renew_interval`` (on its clock)."""

        def beat() -> float | None:
            return self._renew_due(beat)

        with self._mu:
            self._beat = beat
        when = self._hb.clock.monotonic() + self._renew_interval
        try:
            entry = self._hb.schedule(beat, when, f"hudi {self._key}", inline=self._inline)
        except RuntimeError:  # the scheduler is closed: the process is ending
            log.warning("hudi lock %s: no heartbeat; it lapses unless renewed", self._key)
            return
        with self._mu:
            if self._beat is beat:
                self._entry = entry
                return
        self._hb.cancel(entry)  # stopped meanwhile

    def _stop_heartbeat(self) -> None:
        """Renew this holding no more (a renewal running now finds it stopped, or finishes)."""
        with self._mu:
            entry, self._entry, self._beat = self._entry, None, None
        if entry is not None:
            self._hb.cancel(entry)

    def _renew_due(self, beat: Callable[[], float | None]) -> float | None:
        """The scheduler's task for one holding: renew, and say when next (None: stop)."""
        clock = self._hb.clock
        with self._io:
            if self._beat is not beat or not self.is_current_owner():
                return None  # released, lost or taken again since this renewal was due
            try:
                self.renew()
                return clock.monotonic() + self._renew_interval
            except (LockLost, NotLockOwner):
                return None
            except Exception as exc:  # retry sooner; is_current_owner() ends it at the deadline
                log.warning("hudi lock %s: renewal failed, retrying: %s", self._key, exc)
                return clock.monotonic() + min(self._renew_interval, 1.0)

    def _arm(self) -> ThreadWaiter:
        """A waiter woken by the next notice for the lock's document (or by :meth:`close`)."""
        waiter = ThreadWaiter(self)
        with self._mu:
            self._armed.add(waiter)
        NOTICES.arm(self._store, self._key, waiter)
        return waiter

    def _pause(self, waiter: ThreadWaiter, seconds: float, cancel: threading.Event | None) -> None:
        """Wait up to ``seconds``, ended early by a notice, ``cancel`` or :meth:`close`. A thread
        waits on one event: with a ``cancel`` event the wait goes in slices, as ``Lock``'s."""
        end = self._clock.monotonic() + seconds
        while not self._closed.is_set() and not (cancel is not None and cancel.is_set()):
            left = end - self._clock.monotonic()
            if left <= 0 or waiter.event.is_set():
                return
            step = left if cancel is None else min(left, _CANCEL_SLICE)
            self._clock.wait(waiter.event, step)
            if cancel is None:
                return

    def _write(self, write: Callable[[], str], *, quiet: bool = False) -> str:
        """``write``, retried as :meth:`_retry` says, and noticed unless ``quiet`` (a renewal)."""
        if quiet:
            return self._retry(write)
        return _written(self._store, self._key, lambda: self._retry(write), self)

    def _landed(self, wanted: hudi.HudiLockData) -> str | None:
        """After a write whose outcome is unknown: its version if the document is ``wanted``."""
        found = self._retry(lambda: _read(self._store, self._key))
        if found is not None and found[0] == wanted:
            return found[1].version
        return None

    def _retry(self, call: Callable[[], T]) -> T:
        """``call``, retried on throttling and 5xx with backoff until ``store_timeout``; a
        write whose outcome is unknown is not retried (the caller reads back)."""
        deadline = self._clock.monotonic() + self._store_timeout
        pause = 0.05
        while True:
            try:
                return call()
            except StoreUnavailable as exc:
                if exc.outcome_unknown or self._clock.monotonic() + pause > deadline:
                    raise
                self._clock.sleep(pause * random.uniform(0.5, 1.5))
                pause = min(pause * 2, 1.0)


class HudiTableBuilder(LockBuilder):
    """A :class:`LockBuilder` for Hudi's own table lock; :meth:`build` gives a
    :class:`HudiTableLock`.

    Of the builder's options it uses ``owner`` (shown in logs: Hudi's owner field is a random
    UUID), ``lease_timeout`` (Hudi's validity, default 300 s), ``renew_interval`` (default 30 s,
    or a tenth of the lease timeout when only that is set), ``max_clock_drift`` (default
    Hudi's 0.5 s), ``poll_interval``, ``store_timeout``, ``clock`` and ``scheduler`` (what
    renews it: by default the process's). ``priority`` and ``forceful`` are accepted and change
    nothing: a Java holder can't be asked to yield, so every requestor waits for its lease to end.
    """

    def __init__(self, table: str | ObjectStore, *, settings: HudiSettings | None = None) -> None:
        super().__init__()
        self._table = table
        self._settings = settings

    def config(self) -> NoReturn:
        raise ConfigError(
            "config: a Hudi table lock has no LockConfig; call build()", option="config"
        )

    def build(self) -> HudiTableLock:  # type: ignore[override]
        """A new :class:`HudiTableLock` (not yet acquired).

        :raises ConfigError: options contradict each other or the table path can't be a store.
        """
        opts = self._opts
        for unused in ("store", "scope", "if_fence", "if_owner", "listener"):
            if unused in opts:
                raise ConfigError(
                    f"{unused}: not used by a Hudi table lock (it lives at the table's"
                    f" {KEY}; force it free with prioritylock hudi force-unlock BASE_PATH)",
                    option=unused,
                )
        if opts.get("priority", 0) > 2147483646:
            raise ConfigError(
                "priority: a Java holder can't be overridden; use force-unlock on a dangling lock",
                option="priority",
            )
        lease = opts.get("lease_timeout", DEFAULT_VALIDITY)
        renew = opts.get(
            "renew_interval", DEFAULT_RENEW if "lease_timeout" not in opts else lease / 10
        )
        drift = opts.get("max_clock_drift", DEFAULT_MAX_CLOCK_DRIFT)
        if drift >= lease:
            raise ConfigError(
                f"max_clock_drift: {drift} s must be shorter than lease_timeout ({lease} s)",
                option="max_clock_drift",
            )
        if renew * 2 > lease - drift:
            raise ConfigError(
                f"renew_interval: {renew} s leaves no second try before the lease ends"
                f" (lease_timeout {lease} s - max_clock_drift {drift} s); at most half of that",
                option="renew_interval",
            )
        if isinstance(self._table, str):
            from prioritylock._hudi_config import open_base_store

            settings = self._settings or HudiSettings(
                base_path=self._table.strip().rstrip("/") or self._table,
                storage_provider=True,
                validity=lease,
                renew_interval=renew,
            )
            store = open_base_store(settings)
        else:
            store = self._table
        return HudiTableLock(
            store,
            lease_timeout=lease,
            renew_interval=renew,
            max_clock_drift=drift,
            poll_interval=opts.get("poll_interval", DEFAULT_POLL_INTERVAL),
            store_timeout=opts.get("store_timeout", DEFAULT_STORE_TIMEOUT),
            name=opts.get("owner", ""),
            clock=opts.get("clock", SYSTEM_CLOCK),
            scheduler=opts.get("heartbeat"),
        )
