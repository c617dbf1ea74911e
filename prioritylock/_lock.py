"""The synchronous lock: drives the pure protocol (``_protocol``) against a store and a clock.

Three rules hold everywhere in this module:

- Every write carries a fresh nonce, and any write whose outcome is unclear (a timeout, a lost
  response, a 412 that may follow an SDK retry of a write that landed) is settled by reading the
  document back: if it carries our nonce, the write landed.
- Store I/O for one lock object happens under its ``_io`` lock, so the heartbeat and the user's
  own calls never interleave their compare-and-swaps; callbacks and signals run outside it.
- A holder believes it holds the lock only until ``start of its last successful renew +
  lease_timeout`` on its own monotonic clock, whatever the store says later.
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

import attrs
from blinker import Signal

from prioritylock import _protocol as proto
from prioritylock import signals
from prioritylock._config import LockConfig
from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    CorruptLease,
    LockHeld,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    StoreUnavailable,
)
from prioritylock._heartbeat import Heartbeat, ScheduledTask, default_heartbeat
from prioritylock._info import LockInfo
from prioritylock._lease import (
    MAX_MESSAGE_CHARS,
    Event,
    Lease,
    decode,
    encode,
    new_lock_id,
    new_nonce,
)
from prioritylock._listener import CleanupNotice
from prioritylock._reserve import plan_write
from prioritylock.stores._base import NOT_MODIFIED, ConditionalReader, UnsyncedWriter

__all__ = ["Lock"]

log = logging.getLogger("prioritylock")

T = TypeVar("T")

#: Reasons a holder loses its lock, by the event that took it.
_LOSS_REASONS = {
    "expired_takeover": "expired",
    "preempted": "preempted",
    "forceful_takeover": "preempted",
    "handover": "preempted",
    "override": "overridden",
    "force_unlock": "forced",
    # The break-glass event that ended our lease was overwritten before we looked.
    "acquired": "superseded",
    "released": "superseded",
}


@attrs.frozen
class _Seen:
    """A document as read: the lease (None: absent) and its version."""

    lease: Lease | None
    version: str | None


@attrs.frozen
class _Written:
    """A write that landed: the lease as written and its new version."""

    lease: Lease
    version: str


@attrs.define
class _Holding:
    """What a lock object knows while it holds the lock."""

    lock_id: str
    lease: Lease
    version: str
    deadline: float
    next_renew: float
    next_watch: float
    entry: ScheduledTask | None = None
    lost: str | None = None
    ended: bool = False
    notified: str | None = None  # requestor id whose cleanup we started
    cleaning: bool = False  # a cleanup callback is running
    # Set before the release (or handover) is written: from then on we no longer believe we
    # hold the lock, so nobody can take it while we still do.
    releasing: bool = False
    # When our latest observation that showed no pending request *started*: any request we see
    # later landed after it, so its requestor's wait (counted from after its write returned)
    # ends no sooner than quiet_since + its wait. The cleanup deadline is counted from here.
    quiet_since: float = 0.0
    request_seen: proto.Sighting | None = None

    @property
    def fence(self) -> int:
        return self.lease.fence

    @property
    def active(self) -> bool:
        return not self.ended and self.lost is None


def _namespace(store: object) -> object:
    # Stores that know what they address (a directory, a bucket) say so in ``namespace``, so
    # lock objects with separate store objects on the same data share what they learn.
    return getattr(store, "namespace", None) or id(store)


class _Decoded:
    """The document each lock of this process last read or wrote, decoded, with its version.

    A lock object that has not seen its document yet reads it conditionally against this
    version: when nothing changed (HTTP 304 on the cloud stores) it takes the decoded lease from
    here instead of receiving and decoding the body. Still one read: only a lock object's own
    knowledge lets it skip the read. Bounded: emptied when full. Keyed by the store's
    ``namespace``, within which versions never repeat.
    """

    def __init__(self, size: int = 1024) -> None:
        self._size = size
        self._items: dict[tuple[str, str], _Seen] = {}

    def get(self, name: tuple[str, str] | None) -> _Seen | None:
        return None if name is None else self._items.get(name)

    def put(self, name: tuple[str, str] | None, seen: _Seen) -> None:
        if name is None:
            return
        items = self._items
        if len(items) >= self._size:
            items.clear()
        items[name] = seen


_decoded = _Decoded()


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


class Lock:
    """A distributed lock on one lease document. Build it with :class:`~prioritylock.LockBuilder`.

    Not reentrant. One lock object holds the lock at most once at a time; use one object per
    client (threads that contend should each build their own).
    """

    def __init__(self, config: LockConfig) -> None:
        self._cfg = config
        self._store = config.store
        # Stores that can answer "unchanged" (HTTP 304) spare the body and its decoding.
        self._reader = config.store if isinstance(config.store, ConditionalReader) else None
        # Stores that sync every write (LocalStore) may skip it where a lost write is harmless.
        self._unsynced = config.store if isinstance(config.store, UnsyncedWriter) else None
        self._key = config.key
        # This document, process-wide; only on stores that name what they address (a store
        # object's id can be reused by another store once it is gone).
        namespace = getattr(config.store, "namespace", None)
        self._name = (namespace, config.key) if isinstance(namespace, str) and namespace else None
        self._clock = config.clock
        self._hb: Heartbeat = config.heartbeat or default_heartbeat()
        self._io = threading.RLock()
        self._seen: _Seen | None = None
        self._holder_seen: proto.Sighting | None = None
        self._request_seen: proto.Sighting | None = None
        self._holding: _Holding | None = None
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
        :raises CorruptLease: the lease document can't be trusted; it was left untouched.
        :raises StoreError: the store failed past the store timeout.
        """
        self._check_open()
        if self.is_current_owner():
            raise LockHeld(f"{self._key!r}: this lock object already holds the lock")
        return self._acquire(blocking=False, deadline=None)

    def lock(self, timeout: float | None = None) -> None:
        """Wait until this object holds the lock.

        :param timeout: seconds to wait (None: forever).
        :raises LockTimeout: not acquired within ``timeout``.
        :raises LockHeld: this lock object already holds the lock.
        :raises CorruptLease: the lease document can't be trusted.
        :raises StoreError: the store failed past the store timeout.
        """
        self._check_open()
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0
        ):
            raise ConfigError(f"timeout: must be None or a non-negative number, got {timeout!r}")
        if self.is_current_owner():
            raise LockHeld(f"{self._key!r}: this lock object already holds the lock")
        deadline = None if timeout is None else self._clock.monotonic() + float(timeout)
        if not self._acquire(blocking=True, deadline=deadline):
            raise LockTimeout(f"{self._key!r}: not acquired within {timeout} s")

    def renew(self) -> None:
        """Renew the lease now (the heartbeat also does this on its own).

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it.
        """
        with self._io:
            holding = self._require_holding()
            self._renew(holding)
            self._raise_if_lost(holding)

    def unlock(self) -> None:
        """Release the lock; with a higher-priority request pending, pass it to the requestor.

        :raises NotLockOwner: this object does not hold the lock.
        :raises LockLost: it held the lock and lost it before this call.
        :raises StoreUnavailable: the release could not land within the store timeout; it is
            retried in the background until it lands or the lease is no longer ours.
        """
        with self._io:
            holding = self._require_holding()
            announce = self._release(holding, cleanup_done=False)
        if announce is not None:
            announce()

    def info(self) -> LockInfo | None:
        """The lease as stored now (one read), or None if the lock was never taken.

        :raises CorruptLease: the document can't be trusted.
        :raises StoreError: the store failed.
        """
        with self._io:
            seen = self._read()
        return None if seen.lease is None else LockInfo.from_lease(seen.lease)

    def is_current_owner(self) -> bool:
        """Whether this object holds the lock now, judged on its own clock (no request)."""
        holding = self._holding
        if holding is None or not holding.active or holding.releasing:
            return False
        if self._clock.monotonic() >= holding.deadline:
            self._lose(holding, "expired")
            return False
        return True

    @property
    def fencing_token(self) -> int:
        """The fence of the current holding: pass it to the resource you protect.

        :raises NotLockOwner: not held. :raises LockLost: held and lost.
        """
        return self._require_holding().fence

    @property
    def lock_id(self) -> str:
        """The unguessable id of the current holding, made by the library.

        :raises NotLockOwner: not held. :raises LockLost: held and lost.
        """
        return self._require_holding().lock_id

    def force_unlock(
        self, message: str, *, by: str | None = None, overwrite_corrupt: bool = False
    ) -> LockInfo | None:
        """Free the lock whoever holds it (break-glass; recorded with ``message``; fence + 1).

        :param overwrite_corrupt: also replace a corrupt or foreign document with a free lease.
            Its fence is then unknown, so the new fence is the wall clock in milliseconds (or
            the old fence + 1 if that can still be read and is larger): far beyond any fence
            reached by counting, so fencing tokens keep growing.
        :returns: the lease as it was before, or None if the lock was never taken (or the
            document was corrupt).
        :raises ConfigError: no message.
        :raises CorruptLease: the document is corrupt and ``overwrite_corrupt`` is false.
        """
        if not isinstance(message, str) or not message.strip() or len(message) > MAX_MESSAGE_CHARS:
            raise ConfigError("message: force_unlock needs a message saying why")
        who = by or self._cfg.owner
        with self._io:
            try:
                seen = self._read()
            except CorruptLease:
                if not overwrite_corrupt:
                    raise
                self._overwrite_corrupt(who, message)
                return None
            while seen.lease is not None:
                before = seen.lease
                freed = proto.forced_free(before, by=who, message=message, wall=self._clock.time())
                result = self._write(
                    freed, seen.version, create=False, deadline=self._op_deadline()
                )
                if isinstance(result, _Written):
                    log.warning(
                        "prioritylock: %r force-unlocked by %s: %s", self._key, who, message
                    )
                    return LockInfo.from_lease(before)
                seen = result
        return None

    def _overwrite_corrupt(self, who: str, message: str) -> None:
        """Replace a corrupt document (break-glass), compare-and-swap on the version we read."""
        while True:
            found = self._retrying(lambda: self._store.read(self._key), self._op_deadline())
            if found is None:
                return
            try:
                decode(self._key, found.data, name=self._key)
            except CorruptLease:
                pass
            else:
                return  # somebody repaired it meanwhile; the caller may force_unlock again
            fence = max(int(self._clock.time() * 1000), _salvage_fence(found.data) + 1)
            event = Event(
                "force_unlock", self._clock.time(), who, f"overwrote a corrupt lease: {message}"
            )
            fresh = Lease(self._key, fence, new_nonce(), None, None, event)
            try:
                self._store.replace(self._key, encode(fresh), found.version)
            except ConditionFailed:
                continue
            log.warning(
                "prioritylock: %r: corrupt lease overwritten by %s: %s", self._key, who, message
            )
            self._seen = None
            return

    def close(self) -> None:
        """Release the lock if held and stop renewing; the object is not used afterwards."""
        if self._closed:
            return
        holding = self._holding
        try:
            if holding is not None and not holding.ended and holding.lost is None:
                with contextlib.suppress(NotLockOwner):
                    self.unlock()
        finally:
            self._closed = True

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

    # -- acquiring -------------------------------------------------------------------------------

    def _claim(self) -> proto.Claim:
        cfg = self._cfg
        return proto.Claim(
            lock_id=new_lock_id(),
            owner=cfg.owner,
            message=cfg.message,
            priority=cfg.priority,
            lease_timeout=cfg.lease_timeout,
            cleanup_timeout=cfg.cleanup_timeout,
            waiting_timeout=cfg.waiting_timeout,
            forceful=cfg.forceful,
        )

    def _acquire(self, *, blocking: bool, deadline: float | None) -> bool:
        claim = self._claim()
        mine: proto.MyRequest | None = None
        may_request = True
        delay = _Backoff(self._cfg.poll_interval)
        with self._io:
            # A cached document is only a guess: good enough to attempt a conditional write
            # (the store checks it), never enough to refuse or wait on.
            cached = self._seen is not None
            # Take the wakeup event before reading, so a release that lands after our read
            # still wakes us. A try_lock waits only for a handover: it takes the event when it
            # first has to wait (costing at most one short first pause).
            wake = _wakeups.current(self._store, self._key) if blocking else None
            seen = self._seen if self._seen is not None else self._read()
        while True:
            with self._io:
                now = self._clock.monotonic()
                self._sight(seen.lease, now)
                step = proto.acquire_step(
                    seen.lease,
                    self._key,
                    claim,
                    now=now,
                    wall=self._clock.time(),
                    drift=self._cfg.max_clock_drift,
                    holder_seen=self._holder_seen,
                    request_seen=self._request_seen,
                    mine=mine,
                    may_request=may_request,
                )
                if isinstance(step, proto.Write):
                    cached = False  # the store checked the version; what comes back is fresh
                    started = self._clock.monotonic()
                    result = self._write(
                        step.lease, seen.version, create=step.create, deadline=self._op_deadline()
                    )
                    if not isinstance(result, _Written):
                        seen = result  # lost a race: decide again on what is there now
                        continue
                    seen = _Seen(result.lease, result.version)
                    if step.outcome == "acquired":
                        self._become_holder(claim, result.lease, result.version, started)
                        break
                    if step.outcome == "requested":
                        assert step.lease.holder is not None
                        wait = proto.request_wait(
                            claim.waiting_timeout, step.lease.holder.cleanup_timeout
                        )
                        # Count the wait from when the request had surely landed: the holder
                        # counts its cleanup window from before it could have seen it.
                        mine = proto.MyRequest(self._clock.monotonic(), wait)
                        continue
                    if blocking:
                        # lock(timeout): keep waiting like any other contender, without
                        # asking again, until our own timeout.
                        may_request = False
                        mine = None
                        continue
                    raise PreemptionTimeout(
                        f"{self._key!r}: holder {_holder_name(step.lease)} did not hand over "
                        f"within {mine.wait if mine else 0:g} s; the request was withdrawn"
                    )
                if cached:
                    cached = False
                    if not isinstance(step, proto.Write):
                        seen = self._read()
                        continue
                if isinstance(step, proto.Owned):
                    confirmed = self._confirm_handover(claim, seen)
                    if confirmed is None:
                        break
                    seen = confirmed
                    continue
                if isinstance(step, proto.Refused):
                    mine = None
                    self._notify_denied(seen.lease)
                    if not blocking:
                        return False
                    step = proto.Wait(None, "busy")
                if step.reason == "busy" and not blocking:
                    return False
                now = self._clock.monotonic()
                if deadline is not None and now >= deadline:
                    if mine is not None and self._withdraw(claim, seen):
                        break
                    return False
            pause = delay.next()
            if step.until is not None:
                pause = min(pause, max(0.0, step.until - now))
            if deadline is not None:
                pause = min(pause, max(0.0, deadline - now))
            if wake is None:
                self._clock.sleep(pause)
            else:
                self._clock.wait(wake, pause)
            wake = _wakeups.current(self._store, self._key)
            with self._io:
                seen = self._read()
        self._announce_acquired()
        return True

    def _confirm_handover(self, claim: proto.Claim, seen: _Seen) -> _Seen | None:
        """The lease names us as holder (handed over, or our write landed unseen). Our lease
        clock must start at a write of our own: renew, and hold from its start. Returns None
        once we hold, or what is there instead if the renewal lost a race."""
        assert seen.lease is not None and seen.version is not None
        started = self._clock.monotonic()
        beat = proto.renewed(seen.lease, self._clock.time())
        result = self._write(beat, seen.version, create=False, deadline=self._op_deadline())
        if not isinstance(result, _Written):
            return result
        self._become_holder(claim, result.lease, result.version, started)
        return None

    def _withdraw(self, claim: proto.Claim, seen: _Seen) -> bool:
        """Take our pending request back (our own deadline ran out). If the lock was handed to us
        meanwhile, confirm it and return True (we hold it)."""
        while seen.lease is not None:
            lease = seen.lease
            if lease.holder is not None and lease.holder.lock_id == claim.lock_id:
                confirmed = self._confirm_handover(claim, seen)
                if confirmed is None:
                    return True
                seen = confirmed
                continue
            if lease.requestor is None or lease.requestor.requestor_id != claim.lock_id:
                return False
            withdrawn = lease.rewritten(requestor=None)
            result = self._write(
                withdrawn, seen.version, create=False, deadline=self._op_deadline()
            )
            if isinstance(result, _Written):
                self._seen = _Seen(result.lease, result.version)
                return False
            seen = result
        return False

    def _sight(self, lease: Lease | None, now: float) -> None:
        self._holder_seen = proto.sight(self._holder_seen, proto.heartbeat_ident(lease), now)
        self._request_seen = proto.sight(self._request_seen, proto.request_ident(lease), now)

    def _become_holder(
        self, claim: proto.Claim, lease: Lease, version: str, started: float
    ) -> None:
        cfg = self._cfg
        holding = _Holding(
            lock_id=claim.lock_id,
            lease=lease,
            version=version,
            deadline=started + cfg.lease_timeout,
            next_renew=started + cfg.renew_interval,
            next_watch=started + cfg.watch_interval,
            quiet_since=started,
        )
        self._holding = holding
        self._seen = _Seen(lease, version)
        holding.entry = self._hb.schedule(
            lambda: self._beat(holding),
            min(holding.next_renew, holding.next_watch),
            f"lease {self._key}",
            # An in-process store answers in microseconds: run its heartbeat on the scheduler's
            # own thread rather than pay a hand-off to the pool for every renewal.
            inline=not self._store.capabilities.shared_across_processes,
            # Up to 50 ms late (a tenth of the shortest interval for short ones): renewals of
            # many leases then share the scheduler's wakeups. Ownership itself is judged on the
            # clock, so a late check can only make a loss known later, never a lease longer.
            tolerance=min(0.05, cfg.watch_interval / 10, cfg.renew_interval / 10),
        )

    def _announce_acquired(self) -> None:
        holding = self._holding
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

    def _require_holding(self) -> _Holding:
        holding = self._holding
        if holding is not None and not holding.ended:
            self.is_current_owner()  # notices an expired lease
        if holding is not None:
            self._raise_if_lost(holding)
        if holding is None or holding.ended:
            raise NotLockOwner(f"{self._key!r}: this lock object does not hold the lock")
        return holding

    def _raise_if_lost(self, holding: _Holding) -> None:
        if holding.lost is not None:
            raise LockLost(f"{self._key!r}: lock lost ({holding.lost})", reason=holding.lost)

    def _beat(self, holding: _Holding) -> float | None:
        """The heartbeat task for one holding: renew when due, watch in between."""
        with self._io:
            if holding.ended or holding.lost is not None or self._holding is not holding:
                return None
            now = self._clock.monotonic()
            if now >= holding.deadline:
                self._lose(holding, "expired")
                return None
            try:
                if now >= holding.next_renew:
                    self._renew(holding)
                elif now >= holding.next_watch:
                    self._watch(holding)
            except StoreUnavailable as exc:
                retry = min(holding.deadline, now + min(1.0, self._cfg.renew_interval / 4))
                log.warning("prioritylock: heartbeat of %r failed (%s); retrying", self._key, exc)
                return retry
            except Exception as exc:
                # Anything else (a corrupt document, a credential problem) means we can no
                # longer prove ownership: say so rather than believe it silently.
                log.error("prioritylock: heartbeat of %r cannot go on: %s", self._key, exc)
                self._lose(holding, f"heartbeat failed: {exc}")
                return None
            if not holding.active:
                return None
            return min(holding.next_renew, holding.next_watch, holding.deadline)

    def _renew(self, holding: _Holding) -> None:
        for _ in range(8):
            if not holding.active:
                return
            started = self._clock.monotonic()
            if started >= holding.deadline:
                self._lose(holding, "expired")
                return
            beat = proto.renewed(holding.lease, self._clock.time())
            result = self._write(beat, holding.version, create=False, deadline=holding.deadline)
            if isinstance(result, _Written):
                holding.lease, holding.version = result.lease, result.version
                self._seen = _Seen(result.lease, result.version)
                holding.deadline = started + self._cfg.lease_timeout
                holding.next_renew = started + self._cfg.renew_interval
                holding.next_watch = started + self._cfg.watch_interval
                if proto.pending_request_for(beat, self._cfg.priority) is None:
                    holding.quiet_since = started
                if signals.renewed.receivers:
                    self._hb.dispatch(lambda: _send(signals.renewed, self, fence=holding.fence))
                return
            if not self._examine(holding, result):
                return
        raise StoreUnavailable(f"{self._key!r}: renewal kept losing races")

    def _watch(self, holding: _Holding) -> None:
        started = self._clock.monotonic()
        # A failing read must neither outlive the lease nor hold up a renewal that falls due.
        seen = self._read(min(holding.deadline, holding.next_renew))
        holding.next_watch = self._clock.monotonic() + self._cfg.watch_interval
        if (
            seen.lease is not None
            and proto.pending_request_for(seen.lease, self._cfg.priority) is None
        ):
            holding.quiet_since = started
        self._examine(holding, seen)

    def _examine(self, holding: _Holding, seen: _Seen) -> bool:
        """Look at a fresh read as holder: still ours? A request to clean up for?"""
        lease = seen.lease
        if lease is None or lease.holder is None or lease.holder.lock_id != holding.lock_id:
            kind = lease.event.kind if lease is not None and lease.event is not None else "released"
            self._lose(holding, _LOSS_REASONS.get(kind, kind))
            return False
        assert seen.version is not None
        holding.lease, holding.version = lease, seen.version
        now = self._clock.monotonic()
        holding.request_seen = proto.sight(holding.request_seen, proto.request_ident(lease), now)
        request = proto.pending_request_for(lease, lease.holder.priority)
        if (
            request is not None
            and holding.notified != request.requestor_id
            and not holding.cleaning
        ):
            # One cleanup at a time: when it returns, the lock goes to whoever is pending then.
            holding.notified = request.requestor_id
            holding.cleaning = True
            self._start_cleanup(holding, lease)
        return holding.active  # an inline cleanup (manual heartbeat) may have handed over

    def _start_cleanup(self, holding: _Holding, lease: Lease) -> None:
        assert lease.requestor is not None and lease.holder is not None
        r = lease.requestor
        window = proto.request_wait(r.waiting_timeout, lease.holder.cleanup_timeout)
        # Never promise more than the requestor will wait: count from before the request could
        # have landed, less the drift allowance for clock rates.
        deadline = max(
            holding.quiet_since, holding.quiet_since + window - self._cfg.max_clock_drift
        )
        now = self._clock.monotonic()
        notice = CleanupNotice(
            lock=self,
            requestor_owner=r.owner,
            requestor_priority=r.priority,
            requestor_message=r.message,
            forceful=r.forceful,
            deadline=deadline,
            deadline_wall=self._clock.time() + (deadline - now),
        )
        listener = self._cfg.listener

        def cleanup() -> None:
            _send(signals.cleanup_requested, self, notice=notice)
            if listener is None:
                holding.cleaning = False
                return  # not cooperating: we keep the lock until unlock() or a forceful takeover
            try:
                listener.on_cleanup_notification(notice)
            except Exception:
                log.exception(
                    "prioritylock: cleanup listener of %r raised; handing over", self._key
                )
            announce = None
            with self._io:
                if not holding.active or self._holding is not holding:
                    return
                try:
                    announce = self._release(holding, cleanup_done=True)
                except Exception:
                    log.exception("prioritylock: handover of %r after cleanup failed", self._key)
            if announce is not None:
                announce()

        self._hb.spawn(cleanup, f"prioritylock-cleanup {self._key}")

    def _release(self, holding: _Holding, *, cleanup_done: bool) -> Callable[[], None] | None:
        """Write the release (or the handover, with a request pending). Caller holds ``_io``.

        Returns the announcement to make once ``_io`` is released.
        """
        self._raise_if_lost(holding)
        holding.releasing = True
        deadline = self._op_deadline()
        while True:
            now = self._clock.monotonic()
            if now >= holding.deadline and not cleanup_done:
                self._lose(holding, "expired")
                self._raise_if_lost(holding)
            lease = holding.lease
            nxt = proto.after_cleanup(
                lease,
                now=now,
                wall=self._clock.time(),
                drift=self._cfg.max_clock_drift,
                request_seen=holding.request_seen,
            )
            try:
                result = self._write(nxt, holding.version, create=False, deadline=deadline)
            except StoreUnavailable:
                self._end(holding)
                self._retry_release_later(holding)
                raise
            if isinstance(result, _Written):
                nxt = result.lease
                self._seen = _Seen(nxt, result.version)
                handed = nxt.holder is not None
                self._end(holding)
                if handed and cleanup_done:
                    self._lose(holding, "preempted", force=True)
                    return None
                if self._cfg.listener is None and not signals.released.receivers:
                    return None
                return lambda: self._announce_released(nxt, handed)
            if not self._examine(holding, result):
                self._raise_if_lost(holding)
                return None

    def _retry_release_later(self, holding: _Holding) -> None:
        """Keep trying to release a holding whose release could not land (never drop it)."""
        log.warning(
            "prioritylock: release of %r did not land; retrying in the background", self._key
        )

        def retry() -> float | None:
            with self._io:
                try:
                    seen = self._read()
                    lease = seen.lease
                    if (
                        lease is None
                        or lease.holder is None
                        or lease.holder.lock_id != holding.lock_id
                    ):
                        return None  # no longer ours: nothing to release
                    assert seen.version is not None
                    nxt = proto.released(lease, self._clock.time())
                    result = self._write(
                        nxt, seen.version, create=False, deadline=self._op_deadline()
                    )
                    if isinstance(result, _Written):
                        log.info("prioritylock: background release of %r landed", self._key)
                        return None
                    return self._clock.monotonic()
                except StoreUnavailable as exc:
                    log.warning(
                        "prioritylock: background release of %r failed again: %s", self._key, exc
                    )
                    return self._clock.monotonic() + 1.0
                except Exception:
                    log.exception("prioritylock: background release of %r gave up", self._key)
                    return None

        self._hb.schedule(retry, self._clock.monotonic() + 0.5, f"release {self._key}")

    def _end(self, holding: _Holding) -> None:
        holding.ended = True
        if holding.entry is not None:
            self._hb.cancel(holding.entry)
        _wakeups.fire(self._store, self._key)

    def _announce_released(self, lease: Lease, handed_over: bool) -> None:
        _send(signals.released, self, info=LockInfo.from_lease(lease), handed_over=handed_over)
        if self._cfg.listener is not None:
            _call_safely(self._cfg.listener.on_released, self)

    def _lose(self, holding: _Holding, reason: str, *, force: bool = False) -> None:
        """Mark a holding lost, once, and tell the listener and the lock_lost receivers."""
        with self._loss_lock:
            if holding.lost is not None or (holding.ended and not force):
                return
            holding.lost = reason
            holding.ended = True
        if holding.entry is not None:
            self._hb.cancel(holding.entry)
        listener = self._cfg.listener
        info = LockInfo.from_lease(holding.lease)
        log.warning("prioritylock: lost %r (%s)", self._key, reason)

        def tell() -> None:
            _send(signals.lock_lost, self, reason=reason, info=info)
            if listener is not None:
                listener.on_lock_lost(self, reason)

        self._hb.dispatch(tell)

    # -- store access ------------------------------------------------------------------------------

    def _op_deadline(self) -> float:
        return self._clock.monotonic() + self._cfg.store_timeout

    def _read(self, deadline: float | None = None) -> _Seen:
        """Read and decode the document, retrying transient failures until ``deadline`` (default:
        the store timeout from now). One attempt is always made."""
        if deadline is None:
            deadline = self._op_deadline()
        cached = self._seen
        reader = self._reader
        if cached is None and reader is not None:
            cached = _decoded.get(self._name)  # what another lock object saw
        if reader is not None and cached is not None and cached.version is not None:
            known = cached.version
            found = self._retrying(lambda: reader.read_if_changed(self._key, known), deadline)
        else:
            found = self._retrying(lambda: self._store.read(self._key), deadline)
        if found is None:
            seen = _Seen(None, None)
        elif found is NOT_MODIFIED:
            assert cached is not None
            seen = cached  # unchanged since we last decoded it (a watch read, mostly)
        elif cached is not None and cached.version == found.version and cached.lease is not None:
            seen = cached  # a store without conditional reads, or one that ignored the condition
        else:
            seen = _Seen(decode(self._key, found.data, name=self._key), found.version)
            _decoded.put(self._name, seen)
        self._seen = seen
        return seen

    def _write(
        self, lease: Lease, version: str | None, *, create: bool, deadline: float
    ) -> _Written | _Seen:
        """Write ``lease`` conditionally. Returns what was written (on a store that can skip the
        sync, with its fence reservation set: ``_reserve.plan_write``), or what is there instead.

        Unknown outcomes are settled by reading back and looking for our nonce.
        """
        unsynced: UnsyncedWriter | None = None
        if self._unsynced is not None:
            # Unsynced only when the version we replace is the one we last saw; when unsure, sync.
            base = self._seen
            known = (
                base.lease if not create and base is not None and base.version == version else None
            )
            lease, skip_sync = plan_write(lease, known)
            unsynced = self._unsynced if skip_sync else None
        data = encode(lease)
        backoff = _Backoff(1.0, start=0.02)
        while True:
            try:
                if create or version is None:
                    return self._wrote(lease, self._store.create(self._key, data))
                if unsynced is not None:
                    return self._wrote(lease, unsynced.replace_unsynced(self._key, data, version))
                return self._wrote(lease, self._store.replace(self._key, data, version))
            except ConditionFailed:
                fresh = self._read(deadline)
                if fresh.lease is not None and fresh.lease.nonce == lease.nonce:
                    assert fresh.version is not None
                    return self._wrote(lease, fresh.version)  # the 412 answered a retry of it
                return fresh
            except StoreUnavailable:
                if self._clock.monotonic() >= deadline:
                    raise
                self._clock.sleep(min(backoff.next(), max(0.0, deadline - self._clock.monotonic())))
                fresh = self._read(deadline)
                if fresh.lease is not None and fresh.lease.nonce == lease.nonce:
                    assert fresh.version is not None
                    return self._wrote(lease, fresh.version)
                if fresh.version != version:
                    return fresh  # unchanged means it did not land: try again; else re-decide

    def _wrote(self, lease: Lease, version: str) -> _Written:
        _decoded.put(self._name, _Seen(lease, version))
        return _Written(lease, version)

    def _retrying(self, call: Callable[[], T], deadline: float) -> T:
        backoff = _Backoff(1.0, start=0.02)
        while True:
            try:
                return call()
            except StoreUnavailable as exc:
                now = self._clock.monotonic()
                if now >= deadline:
                    raise
                pause = min(backoff.next(), deadline - now)
                log.info(
                    "prioritylock: store busy on %r (%s); retrying in %.3f s", self._key, exc, pause
                )
                self._clock.sleep(pause)

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigError(f"{self._key!r}: this lock object is closed")


class _Backoff:
    """Exponential backoff with jitter: each pause is 0.5-1.5 x the current step, so on average
    it is the step; the step doubles up to ``cap``."""

    def __init__(self, cap: float, *, start: float = 0.005) -> None:
        self._cap = cap
        self._next = min(start, cap)

    def next(self) -> float:
        current = self._next
        self._next = min(self._cap, current * 2)
        return current * (0.5 + random.random())


def _salvage_fence(data: bytes) -> int:
    """The fence of a corrupt document, if one can still be read (else 0)."""
    from prioritylock._lease import salvage_fence

    return salvage_fence(data)


def _holder_name(lease: Lease) -> str:
    return repr(lease.holder.owner) if lease.holder is not None else "(none)"


def _send(signal: Signal, sender: Any, **kwargs: Any) -> None:
    """Send a signal; a receiver that raises is logged, the others still run."""
    for receiver in signal.receivers_for(sender):
        try:
            receiver(sender, **kwargs)
        except Exception:
            log.exception("prioritylock: a signal receiver raised; ignored")


def _call_safely(fn: Callable[..., None], *args: Any) -> None:
    try:
        fn(*args)
    except Exception:
        log.exception("prioritylock: a listener raised; ignored")
