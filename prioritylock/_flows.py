"""The lock's flows, written once: every step a lock takes, as generators of effects.

The pure decisions live in ``_protocol`` (what to write next, when a lease is expired) and
``_reserve`` (fences); this module strings them into the flows a lock runs: acquire, confirm a
handover, withdraw a request, renew, watch and examine, release or hand over, the background
release, force unlock, and the settling of writes whose outcome is unknown. Like ``_protocol``,
it does no I/O, never sleeps and never reads a clock: a flow *yields* an effect (read the
document, write it, what time is it, pause, tell the holder it lost) and is *sent* the result,
or has the store's exception thrown in at the ``yield``. The synchronous ``Lock`` (``_lock``) and
the asyncio ``AsyncLock`` (``_alock``) drive the very same flows; neither contains a rule.

The shape is httpx's ``Auth.auth_flow``: a plain generator driven by a sync and an async loop.
Generators (rather than a state machine of callbacks) keep each flow readable top to bottom,
with its retries and its ``try``/``except`` where they apply, and cost well under a microsecond
per effect.

Three rules hold everywhere:

- Every write carries a fresh nonce, and any write whose outcome is unclear (a timeout, a lost
  response, a 412 that may answer an SDK retry of a write that landed) is settled by reading the
  document back: if it carries our nonce, the write landed.
- A holder believes it holds the lock only until ``start of its last successful renew +
  lease_timeout`` on its own monotonic clock, whatever the store says later.
- A releasing holder stops believing before its release is written.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Generator
from typing import Any, Literal, TypeVar

import attrs

from prioritylock import _protocol as proto
from prioritylock._errors import (
    ConditionFailed,
    CorruptLease,
    LockCancelled,
    LockLost,
    NotLockOwner,
    PreemptionTimeout,
    StoreUnavailable,
)
from prioritylock._lease import Event, Lease, decode, encode, new_nonce, salvage_fence
from prioritylock._reserve import plan_write
from prioritylock.stores._base import NOT_MODIFIED, ReadResult, Versioned

__all__ = [
    "NOW",
    "ARM",
    "Backoff",
    "Cleanup",
    "Denied",
    "End",
    "Flow",
    "Hold",
    "Holding",
    "LockState",
    "Lose",
    "Pause",
    "Put",
    "Read",
    "Released",
    "Renewed",
    "RetryRelease",
    "Seen",
    "Sleep",
    "Written",
]

log = logging.getLogger("prioritylock")

T = TypeVar("T")

#: A flow: yields effects, is sent their results, returns its outcome.
Flow = Generator[Any, Any, T]

#: Why a holding was lost (a heartbeat that can no longer prove ownership says why in words).
LossReason = Literal["expired", "preempted", "overridden", "forced", "superseded"]

#: Reasons a holder loses its lock, by the event that took it.
LOSS_REASONS: dict[str, LossReason] = {
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


# -- effects: what a flow asks its driver to do ----------------------------------------------


@attrs.frozen
class Read:
    """Read the document once (conditionally against ``known`` when the store can).
    Result: what the store's read returns; store errors are thrown in."""

    known: str | None


@attrs.frozen
class Put:
    """One conditional write: create when ``create``, else replace ``version`` (skipping the sync
    when ``unsynced``). Result: the new version; store errors are thrown in."""

    data: bytes
    version: str | None
    create: bool
    unsynced: bool


class _Now:
    """What time is it? Result: ``(monotonic, wall)`` on the lock's clock."""

    def __repr__(self) -> str:
        return "NOW"


NOW = _Now()


@attrs.frozen
class Sleep:
    """Back off before retrying a store call; the lock stays busy meanwhile."""

    seconds: float


class _Arm:
    """Be ready to be woken by a release of this lock in this process (before reading)."""

    def __repr__(self) -> str:
        return "ARM"


ARM = _Arm()


@attrs.frozen
class Pause:
    """Wait between attempts to acquire: up to ``seconds``, or until a release in this process
    wakes us (if armed); then arm again. Other calls on the lock may run meanwhile. Result:
    True when the wait is to end now (cancelled, or the lock object closed)."""

    seconds: float


@attrs.frozen
class Hold:
    """We hold the lock now: schedule its heartbeat (renew and watch) at ``due``."""

    holding: Holding
    due: float
    tolerance: float


@attrs.frozen
class Lose:
    """The holding is lost for ``reason``: unless it already was (or ended, without ``force``),
    mark it, stop its heartbeat and tell the holder once (``mark_lost``). Result: None."""

    holding: Holding
    reason: str
    force: bool = False


@attrs.frozen
class End:
    """The holding ended (released or handed over; already marked): stop its heartbeat and
    wake this process's waiters."""

    holding: Holding


@attrs.frozen
class Cleanup:
    """A higher priority asks for the lock: tell the holder (signal, listener) and, when its
    cleanup returns, run :func:`after_cleanup`."""

    holding: Holding
    requestor: Any  # the Requestor
    deadline: float
    deadline_wall: float


@attrs.frozen
class Denied:
    """Our pending request was displaced: tell the requestor."""

    lease: Lease | None


@attrs.frozen
class Renewed:
    """The lease was renewed (tell the ``renewed`` receivers, if any)."""

    holding: Holding


@attrs.frozen
class RetryRelease:
    """A release could not land: run :func:`background_release` until it returns None."""

    holding: Holding


# -- state ------------------------------------------------------------------------------------


@attrs.frozen
class Seen:
    """A document as read: the lease (None: absent) and its version."""

    lease: Lease | None
    version: str | None


@attrs.frozen
class Written:
    """A write that landed: the lease as written and its new version."""

    lease: Lease
    version: str


@attrs.frozen
class Released:
    """A release or handover that landed and is to be announced."""

    lease: Lease
    handed_over: bool


@attrs.define(eq=False)
class Holding:
    """What a lock object knows while it holds the lock."""

    lock_id: str
    lease: Lease
    version: str
    deadline: float
    next_renew: float
    next_watch: float
    entry: Any = None  # the driver's handle on the scheduled heartbeat
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
        self._items: dict[tuple[str, str], Seen] = {}

    def get(self, name: tuple[str, str] | None) -> Seen | None:
        return None if name is None else self._items.get(name)

    def put(self, name: tuple[str, str] | None, seen: Seen) -> None:
        if name is None:
            return
        items = self._items
        if len(items) >= self._size:
            items.clear()
        items[name] = seen


#: Shared by every lock object of the process, sync and async.
DECODED = DecodedCache()


class LockState:
    """Everything one lock object knows, mutated only by the flows (under the driver's lock).

    :param name: ``(namespace, key)`` naming the document process-wide, or None (see
        :class:`DecodedCache`).
    :param conditional: the store can read "only if changed".
    :param unsynced: the store can skip the sync of a write.
    :param cooperates: the holder has a listener, so a request's cleanup ends in a handover.
    :param boot: the boot of the machine this process runs in (``_reserve.boot_id()``).
    """

    def __init__(
        self,
        key: str,
        cfg: Any,  # LockConfig (not imported: the core does not know the builder's world)
        *,
        name: tuple[str, str] | None,
        conditional: bool,
        unsynced: bool,
        cooperates: bool,
        inline: bool,
        boot: str | None = None,
    ) -> None:
        self.key = key
        self.owner: str = cfg.owner
        self.priority: int = cfg.priority
        self.claim_terms = cfg
        self.lease_timeout: float = cfg.lease_timeout
        self.renew_interval: float = cfg.renew_interval
        self.watch_interval: float = cfg.watch_interval
        self.drift: float = cfg.max_clock_drift
        self.poll_interval: float = cfg.poll_interval
        self.store_timeout: float = cfg.store_timeout
        self.name = name
        self.conditional = conditional
        self.unsynced = unsynced
        self.cooperates = cooperates
        self.inline = inline
        self.boot = boot  # this machine's boot, for fence reservations (``_reserve``)
        self.seen: Seen | None = None
        self.holder_seen: proto.Sighting | None = None
        self.request_seen: proto.Sighting | None = None
        self.holding: Holding | None = None

    def claim(self, lock_id: str) -> proto.Claim:
        cfg = self.claim_terms
        return proto.Claim(
            lock_id=lock_id,
            owner=cfg.owner,
            message=cfg.message,
            priority=cfg.priority,
            lease_timeout=cfg.lease_timeout,
            cleanup_timeout=cfg.cleanup_timeout,
            waiting_timeout=cfg.waiting_timeout,
            forceful=cfg.forceful,
            if_fence=cfg.if_fence,
            if_owner=cfg.if_owner,
            boot=self.boot,
        )

    def sight(self, lease: Lease | None, now: float) -> None:
        self.holder_seen = proto.sight(self.holder_seen, proto.heartbeat_ident(lease), now)
        self.request_seen = proto.sight(self.request_seen, proto.request_ident(lease), now)


# -- plain decisions about a holding (no effects) ------------------------------------------------


def log_lost(st: LockState, holding: Holding, reason: str) -> None:
    """Tell the operator (the ``prioritylock`` logger) that a holding was lost."""
    log.warning(
        "prioritylock: %r lost by %s, fence %d (%s)", st.key, st.owner, holding.fence, reason
    )


def mark_lost(holding: Holding, reason: str, *, force: bool = False) -> bool:
    """Mark a holding lost, once; True when this call marked it (so the holder is told now).
    A holding that ended (released) is not lost, unless ``force`` (a handover after cleanup)."""
    if holding.lost is not None or (holding.ended and not force):
        return False
    holding.lost = reason
    holding.ended = True
    return True


def expired(holding: Holding | None, now: float) -> bool:
    """Whether a believed holding ran past its deadline (the driver then loses it: expired)."""
    return (
        holding is not None and holding.active and not holding.releasing and now >= holding.deadline
    )


def believes(holding: Holding | None, now: float) -> bool:
    """Whether this object holds the lock now, judged on its own clock."""
    return (
        holding is not None and holding.active and not holding.releasing and now < holding.deadline
    )


def raise_if_lost(key: str, holding: Holding) -> None:
    if holding.lost is not None:
        raise LockLost(f"{key!r}: lock lost ({holding.lost})", reason=holding.lost)


def require_holding(key: str, holding: Holding | None) -> Holding:
    """The current holding, or the error saying why there is none.

    :raises LockLost: it was held and lost. :raises NotLockOwner: not held.
    """
    if holding is not None:
        raise_if_lost(key, holding)
    if holding is None or holding.ended:
        raise NotLockOwner(f"{key!r}: this lock object does not hold the lock")
    return holding


def heartbeat_tolerance(watch_interval: float, renew_interval: float) -> float:
    """How late a heartbeat may run so that many leases share wakeups: up to 50 ms (a tenth of
    the shortest interval for short ones). Ownership itself is judged on the clock, so a late
    check can only make a loss known later, never a lease longer."""
    return min(0.05, watch_interval / 10, renew_interval / 10)


def cleanup_deadline(holding: Holding, lease: Lease, drift: float) -> float:
    """When the holder's cleanup window ends, on its own clock: never promise more than the
    requestor will wait, so count from before the request could have landed, less the drift
    allowance for clock rates."""
    assert lease.requestor is not None and lease.holder is not None
    r = lease.requestor
    window = proto.request_wait(r.waiting_timeout, lease.holder.cleanup_timeout)
    return max(holding.quiet_since, holding.quiet_since + window - drift)


def holder_name(lease: Lease | None) -> str:
    return repr(lease.holder.owner) if lease is not None and lease.holder is not None else "(none)"


def guard_failed(lease: Lease | None) -> str:
    if lease is None:
        return "the lease does not exist; nothing written"
    owner = repr(lease.holder.owner) if lease.holder is not None else "nobody"
    return f"the lease now shows fence {lease.fence}, held by {owner}; nothing written"


class Backoff:
    """Exponential backoff with jitter: each pause is 0.5-1.5 x the current step, so on average
    it is the step; the step doubles up to ``cap``."""

    def __init__(self, cap: float, *, start: float = 0.005) -> None:
        self._cap = cap
        self._next = min(start, cap)

    def next(self) -> float:
        current = self._next
        self._next = min(self._cap, current * 2)
        return current * (0.5 + random.random())


# -- store access: reads, writes and their unknown outcomes --------------------------------------


def now() -> Flow[float]:
    mono, _wall = yield NOW
    return float(mono)


def op_deadline(st: LockState) -> Flow[float]:
    mono, _wall = yield NOW
    return float(mono) + st.store_timeout


def retrying(st: LockState, effect: Any, deadline: float) -> Flow[Any]:
    """Perform ``effect`` until it succeeds, retrying transient failures until ``deadline``.
    One attempt is always made."""
    backoff = Backoff(1.0, start=0.02)
    while True:
        try:
            return (yield effect)
        except StoreUnavailable as exc:
            mono, _wall = yield NOW
            if mono >= deadline:
                raise
            pause = min(backoff.next(), deadline - mono)
            log.info("prioritylock: %r: %s; retrying in %.3f s", st.key, exc, pause)
            yield Sleep(pause)


def read(st: LockState, deadline: float | None = None) -> Flow[Seen]:
    """Read and decode the document, retrying transient failures until ``deadline`` (default:
    the store timeout from now)."""
    if deadline is None:
        deadline = yield from op_deadline(st)
    cached = st.seen
    conditional = st.conditional
    if cached is None and conditional:
        cached = DECODED.get(st.name)  # what another lock object saw
    known = cached.version if conditional and cached is not None else None
    found: ReadResult = yield from retrying(st, Read(known), deadline)
    if found is None:
        seen = Seen(None, None)
    elif found is NOT_MODIFIED:
        assert cached is not None
        seen = cached  # unchanged since we last decoded it (a watch read, mostly)
    elif cached is not None and cached.version == found.version and cached.lease is not None:
        seen = cached  # a store without conditional reads, or one that ignored the condition
    else:
        assert isinstance(found, Versioned)
        seen = Seen(decode(st.key, found.data, name=st.key), found.version)
        DECODED.put(st.name, seen)
    st.seen = seen
    return seen


def _wrote(st: LockState, lease: Lease, version: str) -> Written:
    DECODED.put(st.name, Seen(lease, version))
    return Written(lease, version)


def write(
    st: LockState, lease: Lease, version: str | None, *, create: bool, deadline: float
) -> Flow[Written | Seen]:
    """Write ``lease`` conditionally. Returns what was written (on a store that can skip the
    sync, with its fence reservation set: ``_reserve.plan_write``), or what is there instead.

    Unknown outcomes are settled by reading back and looking for our nonce.
    """
    unsynced = False
    if st.unsynced:
        # Unsynced only when the version we replace is the one we last saw; when unsure, sync.
        base = st.seen
        known = base.lease if not create and base is not None and base.version == version else None
        lease, unsynced = plan_write(lease, known, st.boot)
    data = encode(lease)
    backoff = Backoff(1.0, start=0.02)
    creating = create or version is None
    while True:
        try:
            new_version = yield Put(data, None if creating else version, creating, unsynced)
            return _wrote(st, lease, new_version)
        except ConditionFailed:
            fresh = yield from read(st, deadline)
            if fresh.lease is not None and fresh.lease.nonce == lease.nonce:
                assert fresh.version is not None
                return _wrote(st, lease, fresh.version)  # the 412 answered a retry of it
            return fresh
        except StoreUnavailable:
            mono, _wall = yield NOW
            if mono >= deadline:
                raise
            yield Sleep(min(backoff.next(), max(0.0, deadline - mono)))
            fresh = yield from read(st, deadline)
            if fresh.lease is not None and fresh.lease.nonce == lease.nonce:
                assert fresh.version is not None
                return _wrote(st, lease, fresh.version)
            if fresh.version != version:
                return fresh  # unchanged means it did not land: try again; else re-decide


# -- acquiring ---------------------------------------------------------------------------------


def acquire(st: LockState, lock_id: str, *, blocking: bool, deadline: float | None) -> Flow[bool]:
    """Try to take the lock (``blocking``: until ``deadline``); True once we hold it.

    :raises PreemptionTimeout: a non-blocking request's wait ran out (withdrawn).
    :raises LockCancelled: the driver ended the wait (nothing left claimed).
    :raises ConditionFailed: an operator's guard no longer matches the lease.
    """
    claim = st.claim(lock_id)
    mine: proto.MyRequest | None = None
    may_request = True
    delay = Backoff(st.poll_interval)
    # A cached document is only a guess: good enough to attempt a conditional write (the store
    # checks it), never enough to refuse or wait on.
    cached = st.seen is not None
    # Be woken by a release that lands after our read. A try_lock waits only for a handover: it
    # arms when it first has to wait (costing at most one short first pause).
    if blocking:
        yield ARM
    seen = st.seen if st.seen is not None else (yield from read(st))
    while True:
        mono, wall = yield NOW
        st.sight(seen.lease, mono)
        step = proto.acquire_step(
            seen.lease,
            st.key,
            claim,
            now=mono,
            wall=wall,
            drift=st.drift,
            holder_seen=st.holder_seen,
            request_seen=st.request_seen,
            mine=mine,
            may_request=may_request,
        )
        if isinstance(step, proto.Write):
            cached = False  # the store checked the version; what comes back is fresh
            started = yield from now()
            result = yield from write(
                st,
                step.lease,
                seen.version,
                create=step.create,
                deadline=started + st.store_timeout,
            )
            if not isinstance(result, Written):
                seen = result  # lost a race: decide again on what is there now
                continue
            seen = Seen(result.lease, result.version)
            if step.outcome == "acquired":
                yield from become_holder(st, claim, result.lease, result.version, started)
                return True
            if step.outcome == "requested":
                assert step.lease.holder is not None
                wait = proto.request_wait(claim.waiting_timeout, step.lease.holder.cleanup_timeout)
                # Count the wait from when the request had surely landed: the holder counts its
                # cleanup window from before it could have seen it.
                mine = proto.MyRequest((yield from now()), wait)
                continue
            if blocking:
                # lock(timeout): keep waiting like any other contender, without asking again,
                # until our own timeout.
                may_request = False
                mine = None
                continue
            raise PreemptionTimeout(
                f"{st.key!r}: holder {holder_name(step.lease)} did not hand over "
                f"within {mine.wait if mine else 0:g} s; the request was withdrawn"
            )
        if cached:
            cached = False
            seen = yield from read(st)
            continue
        if isinstance(step, proto.Owned):
            confirmed = yield from confirm_handover(st, claim, seen)
            if confirmed is None:
                return True
            seen = confirmed
            continue
        if isinstance(step, proto.Refused):
            if step.reason == "changed":
                raise ConditionFailed(st.key, guard_failed(seen.lease))
            mine = None
            yield Denied(seen.lease)
            if not blocking:
                return False
            step = proto.Wait(None, "busy")
        if step.reason == "busy" and not blocking:
            return False
        mono = yield from now()
        if deadline is not None and mono >= deadline:
            # Our request may have been handed the lock meanwhile: withdraw() confirms it.
            return mine is not None and (yield from withdraw(st, claim, seen))
        pause = delay.next()
        if step.until is not None:
            pause = min(pause, max(0.0, step.until - mono))
        if deadline is not None:
            pause = min(pause, max(0.0, deadline - mono))
        if (yield Pause(pause)):
            # The caller gave up (cancelled, or closed the lock object): take our request back,
            # and if the lock came to us meanwhile, let it go again.
            if mine is not None and (yield from withdraw(st, claim, seen)):
                assert st.holding is not None
                yield from release(st, st.holding, cleanup_done=False)
            raise LockCancelled(f"{st.key!r}: the wait for the lock was cancelled")
        seen = yield from read(st)


def confirm_handover(st: LockState, claim: proto.Claim, seen: Seen) -> Flow[Seen | None]:
    """The lease names us as holder (handed over, or our write landed unseen). Our lease clock
    must start at a write of our own: renew, and hold from its start. Returns None once we hold,
    or what is there instead if the renewal lost a race."""
    assert seen.lease is not None and seen.version is not None
    started, wall = yield NOW
    beat = proto.renewed(seen.lease, wall)
    result = yield from write(
        st, beat, seen.version, create=False, deadline=started + st.store_timeout
    )
    if not isinstance(result, Written):
        return result
    yield from become_holder(st, claim, result.lease, result.version, started)
    return None


def withdraw(st: LockState, claim: proto.Claim, seen: Seen) -> Flow[bool]:
    """Take our pending request back (our own deadline ran out). If the lock was handed to us
    meanwhile, confirm it and return True (we hold it)."""
    while seen.lease is not None:
        lease = seen.lease
        if lease.holder is not None and lease.holder.lock_id == claim.lock_id:
            confirmed = yield from confirm_handover(st, claim, seen)
            if confirmed is None:
                return True
            seen = confirmed
            continue
        if lease.requestor is None or lease.requestor.requestor_id != claim.lock_id:
            return False
        withdrawn = lease.rewritten(requestor=None)
        result = yield from write(
            st, withdrawn, seen.version, create=False, deadline=(yield from op_deadline(st))
        )
        if isinstance(result, Written):
            st.seen = Seen(result.lease, result.version)
            return False
        seen = result
    return False


def become_holder(
    st: LockState, claim: proto.Claim, lease: Lease, version: str, started: float
) -> Flow[Holding]:
    holding = Holding(
        lock_id=claim.lock_id,
        lease=lease,
        version=version,
        deadline=started + st.lease_timeout,
        next_renew=started + st.renew_interval,
        next_watch=started + st.watch_interval,
        quiet_since=started,
    )
    st.holding = holding
    st.seen = Seen(lease, version)
    how = lease.event.kind if lease.event is not None else "acquired"
    log.log(
        logging.WARNING if how in ("override", "forceful_takeover") else logging.INFO,
        "prioritylock: %r acquired by %s, fence %d (%s)",
        st.key,
        st.owner,
        lease.fence,
        how,
    )
    tolerance = heartbeat_tolerance(st.watch_interval, st.renew_interval)
    yield Hold(holding, min(holding.next_renew, holding.next_watch), tolerance)
    return holding


def settle_abandoned(st: LockState, lock_id: str) -> Flow[None]:
    """An acquire was abandoned (its task cancelled) after a write that may have landed: take
    back whatever of its claim the lease shows, so no lease stays claimed for nobody. A lease
    that names the claim as holder is released; a request of it is withdrawn."""
    seen = yield from read(st)
    while seen.lease is not None:
        lease = seen.lease
        mono, wall = yield NOW
        if lease.holder is not None and lease.holder.lock_id == lock_id:
            nxt = proto.released(lease, wall)
        elif lease.requestor is not None and lease.requestor.requestor_id == lock_id:
            nxt = lease.rewritten(requestor=None)
        else:
            return
        result = yield from write(
            st, nxt, seen.version, create=False, deadline=mono + st.store_timeout
        )
        if isinstance(result, Written):
            st.seen = Seen(result.lease, result.version)
            log.info("prioritylock: %r: a cancelled acquire was taken back", st.key)
            return
        seen = result


# -- holding -------------------------------------------------------------------------------------


def beat(st: LockState, holding: Holding) -> Flow[float | None]:
    """The heartbeat of one holding: renew when due, watch in between. Returns when to run
    next, or None once the holding is over."""
    if holding.ended or holding.lost is not None or st.holding is not holding:
        return None
    mono = yield from now()
    if mono >= holding.deadline:
        yield Lose(holding, "expired")
        return None
    try:
        if mono >= holding.next_renew:
            yield from renew(st, holding)
        elif mono >= holding.next_watch:
            yield from watch(st, holding)
    except StoreUnavailable as exc:
        log.warning("prioritylock: heartbeat of %r failed (%s); retrying", st.key, exc)
        return min(holding.deadline, mono + min(1.0, st.renew_interval / 4))
    except Exception as exc:
        # Anything else (a corrupt document, a credential problem) means we can no longer prove
        # ownership: say so rather than believe it silently.
        log.error("prioritylock: heartbeat of %r cannot go on: %s", st.key, exc)
        yield Lose(holding, f"heartbeat failed: {exc}")
        return None
    if not holding.active:
        return None
    return min(holding.next_renew, holding.next_watch, holding.deadline)


def renew(st: LockState, holding: Holding) -> Flow[None]:
    for _ in range(8):
        if not holding.active:
            return
        started, wall = yield NOW
        if started >= holding.deadline:
            yield Lose(holding, "expired")
            return
        beat_ = proto.renewed(holding.lease, wall)
        result = yield from write(
            st, beat_, holding.version, create=False, deadline=holding.deadline
        )
        if isinstance(result, Written):
            holding.lease, holding.version = result.lease, result.version
            st.seen = Seen(result.lease, result.version)
            holding.deadline = started + st.lease_timeout
            holding.next_renew = started + st.renew_interval
            holding.next_watch = started + st.watch_interval
            if proto.pending_request_for(beat_, st.priority) is None:
                holding.quiet_since = started
            yield Renewed(holding)
            return
        if not (yield from examine(st, holding, result)):
            return
    raise StoreUnavailable(f"{st.key!r}: renewal kept losing races")


def renew_now(st: LockState, holding: Holding) -> Flow[None]:
    """A user's renew(): renew, then say if the lock was lost."""
    yield from renew(st, holding)
    raise_if_lost(st.key, holding)


def watch(st: LockState, holding: Holding) -> Flow[None]:
    started = yield from now()
    # A failing read must neither outlive the lease nor hold up a renewal that falls due.
    seen = yield from read(st, min(holding.deadline, holding.next_renew))
    holding.next_watch = (yield from now()) + st.watch_interval
    if seen.lease is not None and proto.pending_request_for(seen.lease, st.priority) is None:
        holding.quiet_since = started
    yield from examine(st, holding, seen)


def examine(st: LockState, holding: Holding, seen: Seen) -> Flow[bool]:
    """Look at a fresh read as holder: still ours? A request to clean up for? True while we
    still hold the lock."""
    lease = seen.lease
    if lease is None or lease.holder is None or lease.holder.lock_id != holding.lock_id:
        kind = lease.event.kind if lease is not None and lease.event is not None else "released"
        yield Lose(holding, LOSS_REASONS.get(kind, kind))
        return False
    assert seen.version is not None
    holding.lease, holding.version = lease, seen.version
    mono, wall = yield NOW
    holding.request_seen = proto.sight(holding.request_seen, proto.request_ident(lease), mono)
    request = proto.pending_request_for(lease, lease.holder.priority)
    if request is not None and holding.notified != request.requestor_id and not holding.cleaning:
        # One cleanup at a time: when it returns, the lock goes to whoever is pending then.
        holding.notified = request.requestor_id
        holding.cleaning = True
        deadline = cleanup_deadline(holding, lease, st.drift)
        log.info(
            "prioritylock: %r: %s (priority %d) asks %s for the lock, fence %d; cleanup window "
            "%.1f s",
            st.key,
            request.owner,
            request.priority,
            st.owner,
            lease.fence,
            max(0.0, deadline - mono),
        )
        yield Cleanup(holding, request, deadline, wall + (deadline - mono))
    return holding.active  # an inline cleanup (manual heartbeat) may have handed over


def after_cleanup(st: LockState, holding: Holding) -> Flow[Released | None]:
    """The holder's cleanup returned (or there is no listener to run it)."""
    if not st.cooperates:
        holding.cleaning = False
        return None  # not cooperating: we keep the lock until unlock() or a forceful takeover
    if not holding.active or st.holding is not holding:
        return None
    return (yield from release(st, holding, cleanup_done=True))


def release(st: LockState, holding: Holding, *, cleanup_done: bool) -> Flow[Released | None]:
    """Write the release (or the handover, with a request pending). Returns what to announce.

    :raises LockLost: the lock was lost before the release.
    :raises StoreUnavailable: the release could not land; it is retried in the background.
    """
    raise_if_lost(st.key, holding)
    holding.releasing = True
    deadline = yield from op_deadline(st)
    while True:
        mono, wall = yield NOW
        if mono >= holding.deadline and not cleanup_done:
            yield Lose(holding, "expired")
            raise_if_lost(st.key, holding)
        nxt = proto.after_cleanup(
            holding.lease,
            now=mono,
            wall=wall,
            drift=st.drift,
            request_seen=holding.request_seen,
            boot=st.boot,
        )
        try:
            result = yield from write(st, nxt, holding.version, create=False, deadline=deadline)
        except StoreUnavailable:
            holding.ended = True
            yield End(holding)
            yield RetryRelease(holding)
            raise
        if isinstance(result, Written):
            nxt = result.lease
            st.seen = Seen(nxt, result.version)
        elif not proto.release_landed(result.lease, nxt):
            if not (yield from examine(st, holding, result)):
                raise_if_lost(st.key, holding)
                return None
            continue
        # Landed (or proven landed: the lock moved on before we could read our write back, its
        # answer lost or a retry of it refused with a 412): the release is done, not a loss.
        handed = nxt.holder is not None
        holding.ended = True
        if handed:
            assert nxt.holder is not None
            log.info(
                "prioritylock: %r handed over by %s to %s, fence %d",
                st.key,
                st.owner,
                nxt.holder.owner,
                nxt.fence,
            )
        else:
            log.info("prioritylock: %r released by %s, fence %d", st.key, st.owner, nxt.fence)
        yield End(holding)
        if handed and cleanup_done:
            yield Lose(holding, "preempted", force=True)
            return None
        return Released(nxt, handed)


def background_release(st: LockState, holding: Holding) -> Flow[float | None]:
    """One attempt of the background release of a holding whose release could not land.
    Returns when to try again, or None when done (landed, or no longer ours)."""
    try:
        seen = yield from read(st)
        lease = seen.lease
        if lease is None or lease.holder is None or lease.holder.lock_id != holding.lock_id:
            return None  # no longer ours: nothing to release
        assert seen.version is not None
        mono, wall = yield NOW
        nxt = proto.released(lease, wall)
        result = yield from write(
            st, nxt, seen.version, create=False, deadline=mono + st.store_timeout
        )
        if isinstance(result, Written):
            log.info("prioritylock: background release of %r landed", st.key)
            return None
        return (yield from now())
    except StoreUnavailable as exc:
        log.warning("prioritylock: background release of %r failed again: %s", st.key, exc)
        return (yield from now()) + 1.0
    except Exception:
        log.exception("prioritylock: background release of %r gave up", st.key)
        return None


# -- operators ----------------------------------------------------------------------------------


def force_unlock(
    st: LockState,
    *,
    by: str,
    message: str,
    overwrite_corrupt: bool,
    if_fence: int | None,
    if_owner: str | None,
) -> Flow[Lease | None]:
    """Free the lock whoever holds it; returns the lease as it was (None: absent or corrupt)."""
    guarded = if_fence is not None or if_owner is not None
    try:
        seen = yield from read(st)
    except CorruptLease:
        if not overwrite_corrupt or guarded:
            raise
        yield from overwrite_corrupt_lease(st, by, message)
        return None
    while True:
        if not proto.shows(seen.lease, if_fence, if_owner):
            raise ConditionFailed(st.key, guard_failed(seen.lease))
        if seen.lease is None:
            return None
        before = seen.lease
        mono, wall = yield NOW
        freed = proto.forced_free(before, by=by, message=message, wall=wall, boot=st.boot)
        result = yield from write(
            st, freed, seen.version, create=False, deadline=mono + st.store_timeout
        )
        if isinstance(result, Written):
            log.warning(
                "prioritylock: %r force-unlocked by %s (was %s, fence %d; now fence %d): %s",
                st.key,
                by,
                holder_name(before),
                before.fence,
                result.lease.fence,
                message,
            )
            return before
        seen = result


def overwrite_corrupt_lease(st: LockState, by: str, message: str) -> Flow[None]:
    """Replace a corrupt document (break-glass), compare-and-swap on the version we read."""
    while True:
        deadline = yield from op_deadline(st)
        found: ReadResult = yield from retrying(st, Read(None), deadline)
        if found is None:
            return
        assert isinstance(found, Versioned)
        try:
            decode(st.key, found.data, name=st.key)
        except CorruptLease:
            pass
        else:
            return  # somebody repaired it meanwhile; the caller may force_unlock again
        _mono, wall = yield NOW
        fence = max(int(wall * 1000), salvage_fence(found.data) + 1)
        event = Event("force_unlock", wall, by, f"overwrote a corrupt lease: {message}")
        fresh = Lease(st.key, fence, new_nonce(), None, None, event)
        try:
            yield Put(encode(fresh), found.version, False, False)
        except ConditionFailed:
            continue
        log.warning("prioritylock: %r: corrupt lease overwritten by %s: %s", st.key, by, message)
        st.seen = None
        return
