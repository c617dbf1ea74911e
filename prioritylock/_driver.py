"""The lease part of both lock drivers, written once: everything that does no I/O.

In the manner of httpx's ``BaseClient``: :class:`LockBase` holds the properties, the argument
checks, the flows' state, one ``match`` over every lease effect (``_perform_effect``: the ones
every flow shares handed to ``_runner.FlowRunner._perform_shared``, the others done here:
heartbeats, losses, signals and listener news), the holder's notices (``_wake``) and
``__repr__``; the process-wide cache of decoded documents (:class:`DecodedCache`) lives here
too, beside the I/O it saves. What runs any flow (store calls bounded in time, the notice of a
write, the driver's hooks) is ``_runner``'s, shared with Hudi's table lock. ``Lock`` (``_lock``,
threads) and ``AsyncLock`` (``_alock``, asyncio) keep only what differs: how a store call, a
pause, a heartbeat and a callback are run. Neither imports the other.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

from prioritylock import _effects as effects
from prioritylock import _flows as flows
from prioritylock import _state as lockstate
from prioritylock import signals
from prioritylock._config import LockConfig
from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    LockHeld,
    LockTimeout,
    StoreUnavailable,
)
from prioritylock._hints import HINTS
from prioritylock._info import LockInfo
from prioritylock._lease import MAX_MESSAGE_CHARS, Lease
from prioritylock._listener import CleanupNotice
from prioritylock._reserve import boot_id
from prioritylock._runner import (
    MIN_WAIT,
    CallPool,
    Done,
    FlowRun,
    FlowRunner,
    News,
    StoreCall,
    StoreCalls,
    T,
    call_pool,
    call_safely,
    check_timeout,
    log,
    send,
    when_all_done,
)
from prioritylock._wake import GRACE, NOTICES, Stamp, Watching
from prioritylock.stores._base import ConditionalReader, UnsyncedWriter

__all__ = [
    "MIN_WAIT",
    "T",
    "CallPool",
    "FlowRun",
    "LockBase",
    "News",
    "StoreCall",
    "StoreCalls",
    "call_pool",
    "call_safely",
    "check_force_unlock",
    "check_timeout",
    "document_name",
    "log",
    "new_state",
    "send",
    "when_all_done",
]


def document_name(store: object, key: str) -> tuple[str, str] | None:
    """This document, process-wide; only on stores that name what they address (a store
    object's id can be reused by another store once it is gone)."""
    namespace = getattr(store, "namespace", None)
    return (namespace, key) if isinstance(namespace, str) and namespace else None


#: What ``LockBase._start_acquire`` gives its driver when it took the lock itself.
_TOOK: Done[bool] = Done(True)


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


class LockBase(FlowRunner):
    """Everything of a lease lock object that does no I/O; the drivers add how it waits and
    calls."""

    #: The class name ``__repr__`` shows.
    _kind: ClassVar[str]

    def __init__(self, config: LockConfig) -> None:
        FlowRunner.__init__(self, config.store, config.key, config.clock)
        self._cfg = config
        self._st = new_state(config)
        self._beat_name = f"lease {self._key}"  # the heartbeat's name, on every acquire
        #: The heartbeat of the current (or, once kept, the last) holding, and how many
        #: holdings in a row were brief (see ``_end_heartbeat``).
        self._beating: _Beat | None = None
        self._brief = 0
        # Other processes can write this document: its acquisitions record a hint (``_hints``).
        self._hinted = config.store.capabilities.shared_across_processes

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
        if holding is None or holding.ended:  # (every try_lock asks first): no clock to read
            return False
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
        if self._closed:  # (``_check_open``, spelled out: every acquire asks)
            raise ConfigError(f"{self._key!r}: this lock object is closed")
        holding = self._st.holding  # (every acquire asks: not held is the common answer)
        if holding is not None and not holding.ended and self.is_current_owner():
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

    # -- the uncontended cycle, made here: no flow to drive ----------------------------------

    def _start_acquire(
        self, lock_id: str, blocking: bool, deadline: float | None
    ) -> effects.Flow[bool]:
        """An acquire's flow, for the driver's ``_run``: ``Done`` when its first round took
        the lock here and now, else the flow from the start, or from where this left it
        (``_flows.acquire_after``).

        On a driver that makes its store calls here anyway (:attr:`_straight`) and with the
        document known, the first round (:func:`_flows.first_write`, the write, then
        :func:`_flows.took`) is made without a flow: the effects it would yield are done as
        ``_perform_effect`` does them, in the flow's order. Every decision is the flow's."""
        st = self._st
        seen = st.seen
        if not self._straight or seen is None:
            return self._acquire_flow(lock_id, blocking, deadline)
        hint = HINTS.hint_for(lock_id, self._place.where) if self._hinted else None
        claim, lining = st.claim(lock_id, hint), flows.new_lining(st, blocking, hint)
        if blocking:
            self._perform_shared(effects.ARM)
        clock = self._clock
        mono, wall = clock.monotonic(), clock.time()
        step, write = flows.first_write(
            st, claim, seen, mono, wall, lining=lining, deadline=deadline
        )
        if write is None:
            attempt = flows.new_attempt(st, claim, blocking, deadline, lining)
            return flows.acquire_after(st, attempt, seen, step, mono)
        lease, put = write
        try:
            version = self._call_straight(put)
        except (ConditionFailed, StoreUnavailable) as exc:
            attempt = flows.new_attempt(st, claim, blocking, deadline, lining)
            return flows.acquire_after(st, attempt, seen, step, mono, write=(lease, put, exc))
        hint_sent, hold = flows.took(st, claim, seen, lease, version, mono=mono)
        if hint_sent is not None:
            self._perform_shared(hint_sent)
        self._hold(hold)
        return _TOOK

    def _start_release(self) -> effects.Flow[lockstate.Released | None]:
        """An unlock's flow, for the driver's ``_run``: ``Done`` (what to announce) when its
        first write landed here and now, else the flow from the start, or from where this left
        it (``_flows.release_after``). As :meth:`_start_acquire`: made without a flow on a
        driver that calls its store here."""
        holding = self._require_holding()
        if not self._straight:
            return flows.release(self._st, holding, cleanup_done=False)
        st, clock = self._st, self._clock
        mono, wall = clock.monotonic(), clock.time()
        first = flows.release_first(st, holding, mono, wall)
        if first is None:  # expired meanwhile: the flow tells the loss
            return flows.release(st, holding, cleanup_done=False)
        deadline, nxt, put = first
        try:
            version = self._call_straight(put)
        except (ConditionFailed, StoreUnavailable) as exc:
            return flows.release_after(st, holding, deadline, (nxt, put, exc))
        hint_sent, released = flows.release_landed(st, holding, nxt, version)
        if hint_sent is not None:
            self._perform_shared(hint_sent)
        self._end_heartbeat(holding)  # ``End``
        return Done(released)

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

    # -- effects that need no waiting ----------------------------------------------------------

    def _perform_effect(self, effect: effects.Effect) -> Any:
        """Perform one effect. A waiting one (a store call, a sleep, a pause) is handed to the
        driver's own way of doing it (for ``AsyncLock``, what comes back is to be awaited);
        the others need no waiting and are the same on both drivers."""
        match effect:
            case effects.Now():  # the commonest effect: done here, not handed on
                return self._clock.monotonic(), self._clock.time()
            case effects.Put(request=False) | effects.Read():  # the next commonest: straight on
                if self._straight:
                    return self._call_straight(effect)
                return self._store_call(self._calls.of(effect))
            case effects.Waits() | effects.Arm() | effects.Hint():  # the rest of effects.Shared
                return self._perform_shared(effect)
            case effects.Hold():
                self._hold(effect)
            case effects.Lose(holding=holding, reason=reason, force=force):
                self._lose(holding, reason, force=force)
            case effects.End(holding=holding):
                # The release (or handover) write told the others (``_after_write``).
                self._end_heartbeat(holding)
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
            case _:
                effects.assert_never(effect)
        return None

    def _settle_later(self, lock_id: str) -> None:
        """An acquire ended without the lock after a write of its claim whose outcome it could
        not settle: once the calls we stopped waiting for have ended (so that a late write has
        landed or failed), take back what of its claim the lease shows, in the background, until
        a claim nobody renews would have expired anyway. The same settling an asyncio task
        cancelled mid-acquire gets (``settle_abandoned``)."""
        st = self._st
        until = self._clock.monotonic() + st.lease_timeout + st.store_timeout
        self._when_settled(
            lambda: flows.background_settle(self._st, lock_id, until), f"settle {self._key}"
        )

    def _hold(self, hold: effects.Hold) -> None:
        """Schedule the holding's heartbeat (renew and watch), and hear notices for it. A
        heartbeat kept past the last holding (``_end_heartbeat``) is the new one's: its run due
        for the last holding comes first (brought forward if need be) and goes on from there."""
        holding = hold.holding
        # A write to the document by another lock of the process (a request, an override, a
        # force unlock) brings the watch forward: the holder hears it now, not at next_watch.
        # The store's own notices (another process's writes) may wait for the first heartbeat,
        # GRACE from now, when this process holds the document in quick bursts (``_wake``).
        now = self._clock.monotonic()
        beat = self._beating
        if beat is None or beat.entry is None:
            beat = self._beating = _Beat(self, holding, hold.tolerance, now)
        else:
            beat.holding, beat.tolerance, beat.started = holding, hold.tolerance, now
        watching, beat.watching = beat.watching, None  # kept with the heartbeat, if it was
        if watching is None:
            watching = NOTICES.watch_at(self._place, self, beat.poke, started=now)
        else:
            watching.started = now
        holding.watching = watching
        due, tolerance = hold.due, hold.tolerance
        if not watching.fed:
            # On a grid of GRACE, so that a burst of holdings shares the scheduler's wakeups.
            due, tolerance = min(due, math.ceil((now + GRACE) / GRACE) * GRACE), GRACE
        entry = beat.entry
        if entry is None:
            entry = beat.entry = self._schedule(
                self._task(beat),
                due,
                self._beat_name,
                # An in-process store answers in microseconds: run its heartbeat on the
                # scheduler's own thread (or inside the loop's runner) rather than pay a
                # hand-off per renewal.
                inline=self._st.inline,
                tolerance=tolerance,
            )
        else:
            entry.tolerance = tolerance
            if due < entry.when:
                self._bring_forward(entry, due)
        holding.entry = entry

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

    def _end_heartbeat(self, holding: lockstate.Holding) -> None:
        """The holding was released: stop its heartbeat. A lock object that takes and releases
        the lock in quick bursts (:data:`KEEP_STREAK` holdings in a row that ended within
        ``_wake.GRACE`` of their start) keeps the heartbeat's scheduled run for its next
        holding rather than cancel it and schedule another: the run, if it comes first, finds
        the holding over and ends there (``_Beat.__call__``)."""
        beat, now = self._beating, self._clock.monotonic()
        if beat is None or beat.holding is not holding or now - beat.started >= GRACE:
            self._brief = 0
        elif self._brief < KEEP_STREAK:
            self._brief += 1
        else:
            self._stop_heartbeat(holding, now, keep=True)
            return
        self._stop_heartbeat(holding, now)

    def _stop_heartbeat(
        self, holding: lockstate.Holding, now: float | None = None, *, keep: bool = False
    ) -> None:
        if self._hinted:
            HINTS.forget(holding.lock_id)
        beat = self._beating
        watching, holding.watching = holding.watching, None
        if keep:
            assert beat is not None
            if (
                watching is not None
                and not watching.heard
                and not (watching.fed and self._place.feed)
            ):
                # Its notice interest too, unless a notice reached it (the next holding then
                # subscribes at once: ``_wake``) or a store subscription rides on it (a store
                # that notices changes itself would go on reading our own writes' events).
                beat.watching, watching = watching, None
        elif beat is not None and beat.holding is holding:
            self._beating = None
            beat.entry = None
            if beat.watching is not None:
                NOTICES.unwatch(beat.watching)
                beat.watching = None
        if holding.entry is not None and not keep:
            self._unschedule(holding.entry)
        if watching is not None:
            NOTICES.unwatch(watching, self._clock.monotonic() if now is None else now)

    def _lose(self, holding: lockstate.Holding, reason: str, *, force: bool = False) -> None:
        """Mark a holding lost, once, and tell the listener and the lock_lost receivers."""
        with self._flags_lock:  # one process-wide lock, held for an instant
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
        if holding is not None and lockstate.expired(holding, self._clock.monotonic()):
            self._lose(holding, "expired")  # (as ``is_current_owner`` notices it)
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

    def _acquire_flow(
        self, lock_id: str, blocking: bool, deadline: float | None
    ) -> effects.Flow[bool]:
        """The acquire, hinted (``_hints``) from before its first write until it ends without
        the lock (the driver then calls :meth:`_acquire_ended`), or its holding ends
        (:meth:`_stop_heartbeat`)."""
        hint = HINTS.hint_for(lock_id, self._place.where) if self._hinted else None
        return flows.acquire(self._st, lock_id, blocking=blocking, deadline=deadline, hint=hint)

    def _acquire_ended(self, lock_id: str) -> None:
        """The acquire ``lock_id`` ended without the lock (returned False, raised, or was
        cancelled): its hint means nothing from now on."""
        if self._hinted:
            HINTS.forget(lock_id)

    def _line_length(self) -> int:
        """How many waiters the lock's line showed at this object's last read or write (the
        service's ``prioritylock_line_length``)."""
        seen = self._st.seen
        return 0 if seen is None or seen.lease is None else len(seen.lease.line)

    def _start_cleanup(self, cleanup: effects.Cleanup) -> None:
        raise NotImplementedError


#: Brief holdings in a row after which a lock object keeps its heartbeat's run scheduled
#: past a release (``LockBase._end_heartbeat``).
KEEP_STREAK = 3


class _Beat:
    """A holding's heartbeat flow and the callback of its notices: one small object, not a
    chain of closures. A process may hold 100,000 leases, and every full collection of the
    garbage collector walks what each keeps. A lock object that holds in quick bursts keeps it
    for its next holding (``LockBase._end_heartbeat``): ``entry`` is its scheduled run while
    the scheduler keeps one (read and set under the lock object's guard, as the run is)."""

    __slots__ = ("entry", "holding", "lock", "started", "tolerance", "watching")

    def __init__(
        self, lock: LockBase, holding: lockstate.Holding, tolerance: float, started: float
    ) -> None:
        self.lock, self.holding, self.tolerance, self.started = lock, holding, tolerance, started
        self.entry: Any = None
        #: The holder's notice interest, kept with it for the next holding (``_wake``).
        self.watching: Watching | None = None

    def __call__(self) -> effects.Flow[float | None]:
        holding = self.holding
        if not holding.active:
            self.entry = None  # kept past its holding: this run is its last
            if self.watching is not None:
                NOTICES.unwatch(self.watching)
                self.watching = None
        return self.lock._beat(holding, self.tolerance)

    def poke(self, stamp: Stamp | None = None) -> None:
        self.lock._poke(self.holding, stamp)


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
