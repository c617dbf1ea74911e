"""The lock's flows, written once: every step a lock takes, as generators of effects.

The effects a flow yields are in ``_effects``, what a lock object knows in ``_state``; the pure
decisions live in ``_protocol`` (what to write next, when a lease is expired) and
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
import os
import random
from collections.abc import Callable
from typing import Any, Literal, Protocol

import attrs

from prioritylock import _protocol as proto
from prioritylock._effects import (
    ARM,
    NOW,
    Cleanup,
    Denied,
    End,
    Flow,
    Hint,
    Hold,
    Lose,
    Pause,
    Put,
    Read,
    Renewed,
    RetryRelease,
    SharedFlow,
    Sleep,
    Unsettled,
    Withdrawn,
)
from prioritylock._errors import (
    ConditionFailed,
    CorruptLease,
    LockCancelled,
    LockTimeout,
    PreemptionTimeout,
    StoreUnavailable,
)
from prioritylock._lease import Event, Lease, decode, encode, new_nonce, salvage_fence
from prioritylock._reserve import plan_write
from prioritylock._state import (
    LOSS_REASONS,
    Holding,
    LockState,
    Released,
    Seen,
    Told,
    Written,
    cleanup_deadline,
    guard_failed,
    holder_name,
    raise_if_lost,
)
from prioritylock.stores._base import NOT_MODIFIED, ReadResult, Versioned

__all__ = [
    "LATE_GRACE",
    "TRY_STORE_TIMEOUT",
    "Attempt",
    "Backoff",
    "Bounded",
    "acquire",
    "acquire_after",
    "after_cleanup",
    "background_release",
    "background_settle",
    "beat",
    "first_write",
    "force_unlock",
    "limit",
    "new_attempt",
    "new_lining",
    "now",
    "read",
    "release",
    "release_after",
    "release_first",
    "release_landed",
    "renew_now",
    "retrying",
    "settle_abandoned",
    "took",
    "write",
]

log = logging.getLogger("prioritylock")

#: The library's own random numbers (jitter, the renewal spread): never the ``random`` module's
#: shared generator, whose state belongs to the application (a seeded program, or hypothesis, which
#: fails a test when a strategy's draw sees that state move under it: a heartbeat thread drawing
#: beside it did). Reseeded in a forked child, as the module's is, so parent and child differ.
_random = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_random.seed)

#: The random draw, uniform in [0, 1), that places a holding's next renewal in its window
#: (:func:`_protocol.next_renewal`); a test that scripts exact times pins it.
spread_draw: Callable[[], float] = _random.random


class Backoff:
    """Exponential backoff with jitter: each pause is 0.5-1.5 x the current step, so on average
    it is the step; the step doubles up to ``cap``."""

    def __init__(self, cap: float, *, start: float = 0.005) -> None:
        self._cap = cap
        self._next = min(start, cap)

    def next(self) -> float:
        current = self._next
        self._next = min(self._cap, current * 2)
        return current * (0.5 + _random.random())

    def at_least(self, step: float) -> None:
        """Go on from ``step`` (at most the cap) if this backoff is not that deep yet."""
        self._next = max(self._next, min(step, self._cap))


class JoinBackoff(Backoff):
    """How long a waiter steps back after its join (or beat) lost a race, before it writes
    again on the version it read before the step: jittered, growing to the poll interval. Its
    own, not the acquire's backoff (which tests slow down to show that notices wake a
    waiter)."""


# -- store access: reads, writes and their unknown outcomes --------------------------------------


def now() -> SharedFlow[float]:
    mono, _wall = yield NOW
    return float(mono)


#: A store operation begun at or past the caller's deadline (``lock(timeout=0)``, or taking back
#: a request once the wait ran out) still makes its one attempt, bounded by this many seconds
#: (or the store timeout, if shorter).
LATE_GRACE = 1.0

#: ``try_lock`` waits for neither the lock nor a failing store: it stops retrying a store
#: operation after this many seconds (or the store timeout, if shorter). A request in flight is
#: still given the store timeout: a store that answers slowly is not a failing one.
TRY_STORE_TIMEOUT = 2.0


class Bounded(Protocol):
    """What the store-access steps need of a lock's state (a lease's ``LockState``, Hudi's
    ``HudiState``): its key, for the log, and its store timeout."""

    @property
    def key(self) -> str: ...

    @property
    def store_timeout(self) -> float: ...


def limit(
    state: Bounded, mono: float, cap: float | None = None, timeout: float | None = None
) -> float:
    """When a store operation starting at ``mono`` must have ended, retries and the request in
    flight included: ``timeout`` (default: the store timeout) from now, or the caller's
    deadline ``cap`` if that comes first, but never sooner than :data:`LATE_GRACE` from now."""
    timeout = state.store_timeout if timeout is None else timeout
    end = mono + timeout
    if cap is not None:
        end = min(end, max(cap, mono + min(LATE_GRACE, timeout)))
    return end


def op_deadline(
    state: LockState, cap: float | None = None, timeout: float | None = None
) -> Flow[float]:
    mono, _wall = yield NOW
    return limit(state, float(mono), cap, timeout)


def retrying(
    state: Bounded, effect: Read, deadline: float, bound: float | None = None
) -> SharedFlow[Any]:
    """Perform ``effect`` until it succeeds, retrying transient failures until ``deadline``.
    Each request in flight is bounded by ``bound`` (default: ``deadline``). One attempt is
    always made."""
    effect = Read(effect.known, deadline if bound is None else bound)  # (not attrs.evolve: slow)
    backoff: Backoff | None = None  # made at the first failure (most reads have none)
    while True:
        try:
            return (yield effect)
        except StoreUnavailable as exc:
            mono, _wall = yield NOW
            if mono >= deadline:
                raise
            backoff = backoff or Backoff(1.0, start=0.02)
            pause = min(backoff.next(), deadline - mono)
            log.info("prioritylock: %r: %s; retrying in %.3f s", state.key, exc, pause)
            yield Sleep(pause)


def read(state: LockState, deadline: float | None = None, bound: float | None = None) -> Flow[Seen]:
    """Read and decode the document, retrying transient failures until ``deadline`` (default:
    the store timeout from now); ``bound``: see :func:`retrying`."""
    if deadline is None:
        deadline = yield from op_deadline(state)
    cached = state.seen
    conditional = state.conditional
    if cached is None and conditional:
        cached = None if state.shared is None else state.shared.get(state.name)  # another lock's
    known = cached.version if conditional and cached is not None else None
    found: ReadResult = yield from retrying(state, Read(known), deadline, bound)
    if found is None:
        seen = Seen(None, None)
    elif found is NOT_MODIFIED:
        assert cached is not None
        seen = cached  # unchanged since we last decoded it (a watch read, mostly)
    elif cached is not None and cached.version == found.version and cached.lease is not None:
        seen = cached  # a store without conditional reads, or one that ignored the condition
    else:
        assert isinstance(found, Versioned)
        shared = state.shared
        other = None if shared is None else shared.get(state.name)
        if other is not None and other.version == found.version and other.lease is not None:
            # Another lock object of this process decoded this version (a version names its
            # bytes): a release that wakes a line of waiters is decoded once, not by each.
            seen = other
        else:
            seen = Seen(decode(state.key, found.data, name=state.key), found.version)
            if shared is not None:
                shared.put(state.name, seen)
    state.seen = seen
    return seen


def _landed_seen(
    state: LockState, lease: Lease, version: str, replaced: Lease | None, me: str | None
) -> tuple[Seen, Hint | None]:
    """Our write of ``lease`` landed as ``version``: the document as it now is (shared with
    the other lock objects of the process), and the hint to send whom it concerns (None:
    nobody)."""
    seen = Seen(lease, version)
    if state.shared is not None:
        state.shared.put(state.name, seen)
    hints = () if replaced is None else proto.hinted(replaced, lease, me)
    return seen, Hint(hints) if hints else None


def _landed_at(
    state: LockState, lease: Lease, version: str, replaced: Lease | None, me: str | None
) -> tuple[Written, Hint | None]:
    """:func:`_landed_seen`, as what was written."""
    _seen, hint = _landed_seen(state, lease, version, replaced, me)
    return Written(lease, version), hint


def _landed(
    state: LockState, lease: Lease, version: str, replaced: Lease | None, me: str | None
) -> Flow[Written]:
    """:func:`_landed_at`, with its hint sent."""
    written, hint = _landed_at(state, lease, version, replaced, me)
    if hint is not None:
        yield hint
    return written


def _put(
    state: LockState,
    lease: Lease,
    version: str | None,
    *,
    create: bool,
    by: float,
    quiet: bool = False,
    request: bool = False,
) -> tuple[Lease, Put]:
    """The first attempt of a conditional write of ``lease`` (see :func:`write`): the lease as
    written (on a store that can skip the sync, with its fence reservation set:
    ``_reserve.plan_write``) and the effect that writes it."""
    unsynced = False
    if state.unsynced:
        # Unsynced only when the version we replace is the one we last saw; when unsure, sync.
        base = state.seen
        known = base.lease if not create and base is not None and base.version == version else None
        lease, unsynced = plan_write(lease, known, state.boot)
    creating = create or version is None
    data = encode(lease, state.terms)
    put = Put(data, None if creating else version, creating, unsynced, quiet, by, request)
    return lease, put


def write(
    state: LockState,
    lease: Lease,
    version: str | None,
    *,
    create: bool,
    deadline: float,
    bound: float | None = None,
    quiet: bool = False,
    request: bool = False,
    replaced: Lease | None = None,
    me: str | None = None,
) -> Flow[Written | Seen]:
    """Write ``lease`` conditionally. Returns what was written (on a store that can skip the
    sync, with its fence reservation set: ``_reserve.plan_write``), or what is there instead.
    ``quiet``: a renewal, of no news to the other locks of the process; ``request``: a request
    for the lock (``Put.request``). Retries end at
    ``deadline``; each request in flight by ``bound`` (default: ``deadline``).

    ``replaced``: the lease the write replaces, written by the acquisition ``me`` (None: an
    operator): once the write landed, the parties it concerns are hinted (``_protocol.hinted``).

    Unknown outcomes are settled by reading back and looking for our nonce (:func:`settle`).
    An acquire's first round and a release spell these steps out with their own pieces (a
    generator layer the less on every cycle, and the same pieces a driver calls when it makes
    the round itself: :func:`first_write`/:func:`took`, :func:`release_first`/
    :func:`release_landed`): the first attempt (:func:`_put`), its outcome settled by
    :func:`settle` if it failed, else landed (:func:`_landed_seen`). This tail is
    :func:`_landed`, spelled out too: every renewal passes here.
    """
    by = deadline if bound is None else bound
    lease, put = _put(state, lease, version, create=create, by=by, quiet=quiet, request=request)
    try:
        new_version = yield put
    except (ConditionFailed, StoreUnavailable) as exc:
        return (
            yield from settle(
                state, lease, version, put, exc, deadline=deadline, replaced=replaced, me=me
            )
        )
    written, hint = _landed_at(state, lease, new_version, replaced, me)
    if hint is not None:
        yield hint
    return written


def settle(
    state: LockState,
    lease: Lease,
    version: str | None,
    put: Put,
    error: ConditionFailed | StoreUnavailable,
    *,
    deadline: float,
    replaced: Lease | None,
    me: str | None,
) -> Flow[Written | Seen]:
    """The attempt ``put`` of a write of ``lease`` over ``version`` failed with ``error``:
    settle its outcome by reading back (our nonce there: it landed), and write again while it
    surely did not land (the document unchanged after a store error), until ``deadline``.
    Returns what :func:`write` returns."""
    backoff: Backoff | None = None  # made at the first failure (most writes have none)
    by = deadline if put.by is None else put.by
    while True:
        if isinstance(error, ConditionFailed):
            fresh = yield from read(state, deadline, by)
            if fresh.lease is not None and fresh.lease.nonce == lease.nonce:
                assert fresh.version is not None
                # The 412 answered a retry of it.
                return (yield from _landed(state, lease, fresh.version, replaced, me))
            return fresh
        mono, _wall = yield NOW
        if mono >= deadline:
            raise error
        backoff = backoff or Backoff(1.0, start=0.02)
        yield Sleep(min(backoff.next(), max(0.0, deadline - mono)))
        fresh = yield from read(state, deadline, by)
        if fresh.lease is not None and fresh.lease.nonce == lease.nonce:
            assert fresh.version is not None
            return (yield from _landed(state, lease, fresh.version, replaced, me))
        if fresh.version != version:
            return fresh  # unchanged means it did not land: try again; else re-decide
        try:
            new_version = yield put
        except (ConditionFailed, StoreUnavailable) as exc:
            error = exc
            continue
        return (yield from _landed(state, lease, new_version, replaced, me))


# -- acquiring ---------------------------------------------------------------------------------


@attrs.define
class Attempt:
    """One acquire's own knowledge between its steps (the lock's is in ``LockState``)."""

    claim: proto.Claim
    blocking: bool
    deadline: float | None
    #: The backoff between its rounds (:meth:`backoff`: made when first needed).
    delay: Backoff | None
    # A cached document is only a guess: good enough to attempt a conditional write (the store
    # checks it), never enough to refuse or wait on.
    cached: bool
    #: How long each store operation of this acquire retries (shorter for a try_lock).
    timeout: float
    mine: proto.MyRequest | None = None  # our pending request, once written
    may_request: bool = True
    #: A blocking acquire of a fair lock: its place in the line (None: it never joins).
    lining: proto.Lining | None = None
    #: A write of our claim was attempted: if we end without the lock, settle it.
    touched: bool = False
    #: How long a join or beat that lost its race steps back (made at the first such loss).
    joins: JoinBackoff | None = None

    def backoff(self, state: LockState) -> Backoff:
        """The backoff between this acquire's rounds."""
        if self.delay is None:
            self.delay = Backoff(state.poll_interval)
        return self.delay

    def until(self, state: LockState, mono: float) -> float:
        """When a store operation of this acquire starting at ``mono`` stops retrying."""
        return limit(state, mono, self.deadline, self.timeout)

    def bound(self, state: LockState, mono: float) -> float:
        """When its requests in flight are given up (the store timeout, not the try's)."""
        return limit(state, mono, self.deadline)

    def read(self, state: LockState) -> Flow[Seen]:
        mono = yield from now()
        return (yield from read(state, self.until(state, mono), self.bound(state, mono)))


def acquire(
    state: LockState,
    lock_id: str,
    *,
    blocking: bool,
    deadline: float | None,
    hint: str | None = None,
) -> Flow[bool]:
    """Try to take the lock (``blocking``: until ``deadline``); True once we hold it. ``hint``:
    where this acquisition hears hints (``_hints``), recorded with it as holder or requestor.

    A blocking acquire of a fair lock (``LockState.fair``) that can't take the lock joins its
    line (recording ``hint``, where it hears hints) and renews its entry every renew interval
    while it waits; it leaves the line when it takes the lock or stops waiting.

    Each round reads the clock once and decides on what was read (:func:`decide`), then does
    what was decided: a write (:func:`take`), a confirmation of a handover, or a wait
    (:func:`wait_to_retry`). The first round's commonest outcome (a free lock taken: one clock
    read, one write, the holding) is :func:`first_write` and :func:`took`, which a driver may
    also run itself, without a flow (``LockBase._start_acquire``); anything else (another step,
    a write that did not land, a store error) goes on in :func:`_acquire` where that round
    would have been (for such a driver, :func:`acquire_after`).

    Deadlines: every store operation (retries and the request in flight included) ends by the
    store timeout from its start or by ``deadline``, whichever comes first (:func:`limit`); a
    try_lock stops retrying after :data:`TRY_STORE_TIMEOUT`. When the store fails up to the
    caller's deadline, the acquire ends with ``LockTimeout`` (its cause the last
    ``StoreUnavailable``); when it fails for the whole store timeout first, with
    ``StoreUnavailable``. Either way, a write of the claim that may have landed is settled
    afterwards (:class:`~prioritylock._effects.Unsettled`).

    :raises PreemptionTimeout: a non-blocking request's wait ran out (withdrawn).
    :raises LockCancelled: the driver ended the wait (nothing left claimed).
    :raises ConditionFailed: an operator's guard no longer matches the lease.
    :raises LockTimeout: the store could not be reached before ``deadline``.
    :raises StoreUnavailable: the store failed for a whole store timeout.
    """
    claim, lining = state.claim(lock_id, hint), new_lining(state, blocking, hint)
    attempt = new_attempt(state, claim, blocking, deadline, lining)
    try:
        # Be woken by a release that lands after our read. A try_lock waits only for a
        # handover: it arms when it first has to wait (costing at most one short first pause).
        if blocking:
            yield ARM
        seen = state.seen if state.seen is not None else (yield from attempt.read(state))
        mono, wall = yield NOW
        step, write = first_write(state, claim, seen, mono, wall, lining=lining, deadline=deadline)
        if write is None:
            return (yield from _acquire(state, attempt, seen, step, mono))
        lease, put = write
        attempt.cached = False  # the store checks the version; what comes back is fresh
        attempt.touched = True
        try:
            version = yield put
        except (ConditionFailed, StoreUnavailable) as exc:
            return (yield from _settle_first(state, attempt, seen, (lease, put, exc), mono))
        hint_sent, hold = took(state, claim, seen, lease, version, mono=mono)
        if hint_sent is not None:
            yield hint_sent
        yield hold
        return True
    except StoreUnavailable as exc:
        error = yield from _failed(state, attempt, exc)
        if error is exc:
            raise
        raise error from exc


def new_lining(state: LockState, blocking: bool, hint: str | None) -> proto.Lining | None:
    """An acquire's place in the line: a blocking acquire of a fair lock joins it."""
    return proto.Lining(hint) if blocking and state.fair else None


def new_attempt(
    state: LockState,
    claim: proto.Claim,
    blocking: bool,
    deadline: float | None,
    lining: proto.Lining | None,
) -> Attempt:
    """An acquire's own knowledge at its start (:func:`acquire`), before its first write."""
    return Attempt(
        claim,
        blocking,
        deadline,
        None,
        cached=state.seen is not None,
        timeout=state.store_timeout if blocking else min(state.store_timeout, TRY_STORE_TIMEOUT),
        lining=lining,
    )


def first_write(
    state: LockState,
    claim: proto.Claim,
    seen: Seen,
    mono: float,
    wall: float,
    *,
    lining: proto.Lining | None,
    deadline: float | None,
) -> tuple[proto.Step, tuple[Lease, Put] | None]:
    """An acquire's first round up to its write: the step decided on ``seen`` (the clock read
    at ``mono``, ``wall``) for a ``claim`` nothing was written of yet and, when it is a free
    lock taken, the lease to write and the ``Put`` that writes it (else None: the round goes on
    in :func:`_acquire`)."""
    step = _decide(state, claim, seen, mono, wall, lining=lining)
    if not isinstance(step, proto.Write) or step.outcome != "acquired":
        return step, None
    by = limit(state, mono, deadline)  # ``Attempt.bound``
    return step, _put(state, step.lease, seen.version, create=step.create, by=by)


def took(
    state: LockState, claim: proto.Claim, seen: Seen, lease: Lease, version: str, *, mono: float
) -> tuple[Hint | None, Hold]:
    """The first round's write of ``lease`` (:func:`first_write`) landed as ``version``: the
    hint to send first (None: nobody to hint) and the holding's ``Hold``."""
    now, hint = _landed_seen(state, lease, version, seen.lease, claim.lock_id)
    return hint, become_holder(state, claim, lease, version, mono, seen=now)


def acquire_after(
    state: LockState,
    attempt: Attempt,
    seen: Seen,
    step: proto.Step,
    mono: float,
    *,
    write: tuple[Lease, Put, ConditionFailed | StoreUnavailable] | None = None,
) -> Flow[bool]:
    """An acquire from where a driver that made its first round itself (:func:`first_write`,
    :func:`took`) left it: ``step`` decided on ``seen`` at ``mono`` was not a free lock taken
    (``write`` None), or it was and its write raised (``write``: the lease, the ``Put`` and
    the error). Goes on exactly as :func:`acquire` does from there."""
    try:
        if write is None:
            return (yield from _acquire(state, attempt, seen, step, mono))
        attempt.cached = False  # the store checked the version; what comes back is fresh
        attempt.touched = True
        return (yield from _settle_first(state, attempt, seen, write, mono))
    except StoreUnavailable as exc:
        error = yield from _failed(state, attempt, exc)
        if error is exc:
            raise
        raise error from exc


def _settle_first(
    state: LockState,
    attempt: Attempt,
    seen: Seen,
    write: tuple[Lease, Put, ConditionFailed | StoreUnavailable],
    mono: float,
) -> Flow[bool]:
    """The first round's write (the lease, its ``Put``) raised the error: settle it; lost a
    race, decide again."""
    lease, put, error = write
    result = yield from settle(
        state,
        lease,
        seen.version,
        put,
        error,
        deadline=attempt.until(state, mono),
        replaced=seen.lease,
        me=attempt.claim.lock_id,
    )
    if not isinstance(result, Written):
        return (yield from _acquire(state, attempt, result))  # lost a race: decide again
    yield become_holder(state, attempt.claim, result.lease, result.version, mono)
    return True


def _failed(state: LockState, attempt: Attempt, exc: StoreUnavailable) -> Flow[Exception]:
    """The store failed an acquire with ``exc``: a claim it may have written is settled later
    (``Unsettled``); what it raises is ``exc``, or ``LockTimeout`` (from ``exc``) once its
    deadline passed."""
    if attempt.touched:
        yield Unsettled(attempt.claim.lock_id)
    deadline = attempt.deadline
    if deadline is None or (yield from now()) < deadline:
        return exc
    return LockTimeout(
        f"{state.key!r}: not acquired by the deadline: the store could not be reached ({exc})"
    )


def _acquire(
    state: LockState,
    attempt: Attempt,
    seen: Seen,
    step: proto.Step | None = None,
    mono: float = 0.0,
) -> Flow[bool]:
    """The rounds of :func:`acquire` after its first, from the document ``seen``, on which
    ``step`` was decided at ``mono`` (None: decide on it first)."""
    while True:
        if step is None:
            mono, wall = yield NOW
            step = decide(state, attempt, seen, mono, wall)
        if isinstance(step, proto.Write):
            attempt.cached = False  # the store checked the version; what comes back is fresh
            attempt.touched = True
            taken = yield from take(state, attempt, step, seen, mono)
            if taken is True:
                return True
            seen = taken
        elif attempt.cached:
            attempt.cached = False
            seen = yield from attempt.read(state)
        elif isinstance(step, proto.Owned):
            attempt.touched = True
            confirmed = yield from confirm_handover(state, attempt, seen)
            if confirmed is None:
                return True
            seen = confirmed
        else:
            ended = yield from wait_to_retry(state, attempt, step, seen)
            if ended is not None:
                return ended
            seen = yield from attempt.read(state)
        step = None


def decide(state: LockState, attempt: Attempt, seen: Seen, mono: float, wall: float) -> proto.Step:
    """What to do next on the lease as ``seen``, the clock read at ``mono`` and ``wall`` (the
    decision is ``_protocol``'s; what was sighted is kept in ``state``)."""
    return _decide(
        state,
        attempt.claim,
        seen,
        mono,
        wall,
        lining=attempt.lining,
        mine=attempt.mine,
        may_request=attempt.may_request,
    )


def _decide(
    state: LockState,
    claim: proto.Claim,
    seen: Seen,
    mono: float,
    wall: float,
    *,
    lining: proto.Lining | None,
    mine: proto.MyRequest | None = None,
    may_request: bool = True,
) -> proto.Step:
    """:func:`decide`, for ``claim`` (``mine``: its request, if written; ``may_request``:
    whether it may still write one; ``lining``: its place in the line)."""
    state.sight(seen.lease, mono)
    return proto.acquire_step(
        seen.lease,
        state.key,
        claim,
        now=mono,
        wall=wall,
        drift=state.drift,
        holder_seen=state.holder_seen,
        request_seen=state.request_seen,
        mine=mine,
        may_request=may_request,
        free_seen=state.free_seen,
        line_seen=state.line_seen,
        lining=lining,
    )


def take(
    state: LockState, attempt: Attempt, step: proto.Write, seen: Seen, started: float
) -> Flow[Seen | Literal[True]]:
    """Write what :func:`decide` chose at ``started`` (the write's deadlines count from there,
    and a holding's lease clock). True once we hold the lock; else the document to decide on
    again (ours as written, or what beat us to it).

    :raises PreemptionTimeout: a try_lock's request ran out and was withdrawn.
    """
    early = proto.early_hint(seen.lease, attempt.claim) if step.outcome == "requested" else None
    if early is not None:
        # A hinted holder hints us when it hands over: be woken by that (a try_lock is not armed
        # yet), and poll only as the fallback (``_protocol.HINTED_POLL``).
        yield ARM
        attempt.backoff(state).at_least(proto.HINTED_POLL)
        # The window rule (docs/protocol.md): the holder reads now, before our request can
        # land, and counts its cleanup window from that read; then we write.
        yield Hint((early,))
        yield Sleep(proto.EARLY_HINT_GAP)
        started = yield from now()
    until, bound = attempt.until(state, started), attempt.bound(state, started)
    result = yield from write(
        state,
        step.lease,
        seen.version,
        create=step.create,
        deadline=until,
        bound=bound,
        # A join tells nobody anything: the holder and the other waiters need not read it.
        quiet=step.outcome == "joined",
        request=step.outcome == "requested",
        replaced=seen.lease,
        me=attempt.claim.lock_id,
    )
    if not isinstance(result, Written):
        if (
            step.outcome == "joined"
            and seen.lease is not None  # a join is written on a document
            and proto.line_moved(seen.lease, result.lease)
        ):
            # A herd of waiters (only the line moved): step back, then decide on what we read
            # *before* it, so that our next join lands only if nobody wrote meanwhile (one
            # loop's tasks that read afresh after the step kept landing joins, and the holder,
            # or the head taking a freed lock, kept losing to them). The holder writes again at
            # once: it comes first. A join that lost to a holder's write (a take, a release, a
            # renewal) decides again at once: under a steady run of holdings a waiter that
            # stepped back after those never joined, and the lock went to whoever re-took it.
            attempt.joins = attempt.joins or JoinBackoff(state.poll_interval)
            yield Sleep(attempt.joins.next())
        return result  # lost a race: decide again on what is there now
    if step.outcome == "joined":
        assert attempt.lining is not None
        attempt.lining = proto.Lining(attempt.lining.hint, started + state.renew_interval)
        return Seen(result.lease, result.version)
    if step.outcome == "acquired":
        yield become_holder(state, attempt.claim, result.lease, result.version, started)
        return True
    if step.outcome == "requested":
        assert step.lease.holder is not None
        wait = proto.request_wait(attempt.claim.waiting_timeout, step.lease.holder.cleanup_timeout)
        # Count the wait from when the request had surely landed: the holder counts its
        # cleanup window from before it could have seen it.
        attempt.mine = proto.MyRequest((yield from now()), wait)
    elif attempt.blocking and state.keep_waiting:
        # lock(timeout): keep waiting like any other contender, without asking again, until
        # our own timeout.
        attempt.may_request = False
        attempt.mine = None
    else:
        mine = attempt.mine
        raise PreemptionTimeout(
            f"{state.key!r}: holder {holder_name(step.lease)} did not hand over "
            f"within {mine.wait if mine else 0:g} s; the request was withdrawn"
        )
    return Seen(result.lease, result.version)


def wait_to_retry(
    state: LockState, attempt: Attempt, step: proto.Wait | proto.Refused, seen: Seen
) -> Flow[bool | None]:
    """Wait before deciding again (backed off; woken early by a notice). Returns the outcome
    when the acquire ends here, None to read and decide again.

    :raises ConditionFailed: an operator's guard no longer matches the lease.
    :raises LockCancelled: the driver ended the wait.
    """
    if isinstance(step, proto.Refused):
        if step.reason == "changed":
            raise ConditionFailed(state.key, guard_failed(seen.lease))
        attempt.mine = None
        yield Denied(seen.lease)
        if not attempt.blocking:
            return False
        step = proto.Wait(None, "busy")
    if step.reason == "busy" and not attempt.blocking:
        return False
    mono = yield from now()
    deadline, mine = attempt.deadline, attempt.mine
    if deadline is not None and mono >= deadline:
        # Our request may have been handed the lock meanwhile: withdraw() confirms it.
        if mine is not None and (yield from withdraw(state, attempt, seen)):
            return True
        yield from leave(state, attempt, seen)
        return False
    # The line is full: we poll, unlined, without writing, and a notice does not wake us (a
    # release goes to the line's head; a herd woken with it would all read, and all join at the
    # one free place). Closing the lock object or cancelling still ends the wait at once.
    full = step.reason == "full"
    pause = (
        state.poll_interval * (0.5 + _random.random()) if full else attempt.backoff(state).next()
    )
    if step.until is not None:
        pause = min(pause, max(0.0, step.until - mono))
    if deadline is not None:
        pause = min(pause, max(0.0, deadline - mono))
    behind = _behind(attempt, seen) if step.reason == "busy" else None
    if (yield Pause(pause, woken=not full, behind=behind)):
        # The caller gave up (cancelled, or closed the lock object): take our request back,
        # and if the lock came to us meanwhile, let it go again.
        if mine is not None and (yield from withdraw(state, attempt, seen)):
            assert state.holding is not None
            yield from release(state, state.holding, cleanup_done=False)
        else:
            yield from leave(state, attempt, seen)
        raise LockCancelled(f"{state.key!r}: the wait for the lock was cancelled")
    return None


def _behind(attempt: Attempt, seen: Seen) -> tuple[int, float] | None:
    """Where a waiter that waits in the line behind its head stands in the line's order
    (``Pause.behind``), or None: not lined, the head, or one who may act on the holder's or the
    request's news (a pending request of its own, or a priority above the holder's)."""
    lease, claim = seen.lease, attempt.claim
    if attempt.lining is None or attempt.mine is not None or lease is None or not lease.line:
        return None
    holder = lease.holder
    if holder is not None and claim.priority > holder.priority:
        return None
    for at, entry in enumerate(lease.line):
        if entry.entry_id == claim.lock_id:
            return None if at == 0 else (-entry.priority, entry.since)
    return None


def confirm_handover(state: LockState, attempt: Attempt, seen: Seen) -> Flow[Seen | None]:
    """The lease names us as holder (handed over, or our write landed unseen). Our lease clock
    must start at a write of our own: renew, and hold from its start. Returns None once we hold,
    or what is there instead if the renewal lost a race."""
    assert seen.lease is not None and seen.version is not None
    started, wall = yield NOW
    beat = proto.renewed(seen.lease, wall, proto.without(seen.lease.line, attempt.claim.lock_id))
    until, bound = attempt.until(state, started), attempt.bound(state, started)
    result = yield from write(state, beat, seen.version, create=False, deadline=until, bound=bound)
    if not isinstance(result, Written):
        return result
    yield become_holder(state, attempt.claim, result.lease, result.version, started)
    return None


def withdraw(state: LockState, attempt: Attempt, seen: Seen) -> Flow[bool]:
    """Take our pending request back (our own deadline ran out). If the lock was handed to us
    meanwhile, confirm it and return True (we hold it)."""
    claim = attempt.claim
    while seen.lease is not None:
        lease = seen.lease
        if lease.holder is not None and lease.holder.lock_id == claim.lock_id:
            confirmed = yield from confirm_handover(state, attempt, seen)
            if confirmed is None:
                return True
            seen = confirmed
            continue
        if lease.requestor is None or lease.requestor.requestor_id != claim.lock_id:
            return False
        withdrawn = lease.rewritten(requestor=None)
        mono = yield from now()
        until, bound = attempt.until(state, mono), attempt.bound(state, mono)
        result = yield from write(
            state,
            withdrawn,
            seen.version,
            create=False,
            deadline=until,
            bound=bound,
            replaced=lease,
            me=claim.lock_id,
        )
        if isinstance(result, Written):
            state.seen = Seen(result.lease, result.version)
            return False
        seen = result
    return False


def leave(state: LockState, attempt: Attempt, seen: Seen) -> Flow[None]:
    """We stop waiting without the lock: take our entry out of the line, if we wrote one (a
    write that fails is settled in the background: ``Unsettled``)."""
    lining, lock_id = attempt.lining, attempt.claim.lock_id
    if lining is None or lining.due is None:
        return
    while seen.lease is not None and any(e.entry_id == lock_id for e in seen.lease.line):
        out = seen.lease.rewritten(line=proto.without(seen.lease.line, lock_id))
        mono = yield from now()
        until, bound = attempt.until(state, mono), attempt.bound(state, mono)
        result = yield from write(
            state, out, seen.version, create=False, deadline=until, bound=bound
        )
        if isinstance(result, Written):
            state.seen = Seen(result.lease, result.version)
            return
        seen = result


def become_holder(
    state: LockState,
    claim: proto.Claim,
    lease: Lease,
    version: str,
    started: float,
    *,
    seen: Seen | None = None,
) -> Hold:
    """We hold the lock (``lease``, written as ``version`` by a write that started at
    ``started``; ``seen``: the two, if made already): the holding, kept in ``state``; returns
    the ``Hold`` to yield."""
    holding = Holding(  # (positional, to the first seven fields: made on every acquire)
        claim.lock_id,
        lease,
        version,
        started + state.lease_timeout,  # deadline
        proto.next_renewal(started, state.renew_interval, spread_draw(), first=True),
        started + state.watch_interval,  # next_watch
        quiet_since=started,
    )
    state.holding = holding
    state.seen = Seen(lease, version) if seen is None else seen
    how = lease.event.kind if lease.event is not None else "acquired"
    level = logging.WARNING if how in ("override", "forceful_takeover") else logging.INFO
    if log.isEnabledFor(level):  # checked here: every acquire pays for Logger.log's frame else
        log.log(
            level,
            "prioritylock: %r acquired by %s, fence %d (%s)",
            state.key,
            state.owner,
            lease.fence,
            how,
        )
    return Hold(holding, min(holding.next_renew, holding.next_watch), state.tolerance)


def settle_abandoned(state: LockState, lock_id: str) -> Flow[None]:
    """An acquire was abandoned (its task cancelled, or its time up: ``background_settle``)
    after a write that may have landed: take back whatever of its claim the lease shows, so no
    lease stays claimed for nobody. A lease that names the claim as holder is released; a
    request of it is withdrawn; its entry in the line taken out."""
    seen = yield from read(state)
    while seen.lease is not None:
        lease = seen.lease
        mono, wall = yield NOW
        line = proto.without(lease.line, lock_id)
        if lease.holder is not None and lease.holder.lock_id == lock_id:
            nxt = proto.released(lease, wall)
        elif lease.requestor is not None and lease.requestor.requestor_id == lock_id:
            nxt = lease.rewritten(requestor=None, line=line)
        elif len(line) != len(lease.line):
            nxt = lease.rewritten(line=line)
        else:
            return
        result = yield from write(
            state,
            nxt,
            seen.version,
            create=False,
            deadline=mono + state.store_timeout,
            replaced=lease,
            me=lock_id,
        )
        if isinstance(result, Written):
            state.seen = Seen(result.lease, result.version)
            log.info("prioritylock: %r: an abandoned acquire was taken back", state.key)
            return
        seen = result


def background_settle(state: LockState, lock_id: str, until: float) -> Flow[float | None]:
    """One attempt to settle an acquire that ended without the lock after a write of its claim
    whose outcome was unknown (:class:`~prioritylock._effects.Unsettled`). Returns when to try
    again, or None when done. Gives up at ``until``: by then a claim nobody renews has expired."""
    try:
        yield from settle_abandoned(state, lock_id)
        return None
    except StoreUnavailable as exc:
        mono = yield from now()
        if mono >= until:
            log.warning("prioritylock: %r: gave up settling an acquire: %s", state.key, exc)
            return None
        log.info("prioritylock: %r: settling an acquire failed (%s); retrying", state.key, exc)
        return min(until, mono + 1.0)
    except Exception:
        log.exception("prioritylock: settling an acquire of %r gave up", state.key)
        return None


# -- holding -------------------------------------------------------------------------------------


def beat(state: LockState, holding: Holding) -> Flow[float | None]:
    """The heartbeat of one holding: renew when due, watch in between. Returns when to run
    next, or None once the holding is over."""
    if holding.ended or holding.lost is not None or state.holding is not holding:
        return None
    mono: float
    # (Not ``now()``: a generator the less, on every heartbeat; and what it reads is the start
    # of the renewal or the watch that follows, without a clock read of their own.)
    mono, wall = yield NOW
    if mono >= holding.deadline:
        yield Lose(holding, "expired")
        return None
    try:
        if mono >= holding.next_renew:
            yield from renew(state, holding, (mono, wall))
        elif mono >= holding.next_watch or holding.poked:
            yield from watch(state, holding, mono)
    except StoreUnavailable as exc:
        log.warning("prioritylock: heartbeat of %r failed (%s); retrying", state.key, exc)
        return min(holding.deadline, mono + min(1.0, state.renew_interval / 4))
    except Exception as exc:
        # Anything else (a corrupt document, a credential problem) means we can no longer prove
        # ownership: say so rather than believe it silently.
        log.error("prioritylock: heartbeat of %r cannot go on: %s", state.key, exc)
        yield Lose(holding, f"heartbeat failed: {exc}")
        return None
    if not holding.active:
        return None
    if holding.poked:  # told again while we read: read again, now
        return mono
    return min(holding.next_renew, holding.next_watch, holding.deadline)


def renew(
    state: LockState, holding: Holding, clock: tuple[float, float] | None = None
) -> Flow[None]:
    """Write the next heartbeat, at once again each time it lost its race to waiters only
    (:func:`_protocol.line_moved`); examine any other loss, up to 8 of them. ``clock``: the
    (monotonic, wall) time the caller read just before, taken as the first write's start.

    :raises StoreUnavailable: the store failed, or 8 renewals lost to other writers.
    """
    races = 0
    while races < 8:
        if not holding.active:
            return
        if clock is None:
            started, wall = yield NOW
        else:
            (started, wall), clock = clock, None
        if started >= holding.deadline:
            yield Lose(holding, "expired")
            return
        lease = holding.lease
        # The holder's renewals take the entries of waiters surely gone out of the line.
        line = proto.live(lease.line, state.line_seen, started, state.drift) if lease.line else None
        beat_ = proto.renewed(lease, wall, line)
        holding.poked = False  # a renewal that lands shows nothing changed; one refused, what did
        result = yield from write(
            state, beat_, holding.version, create=False, deadline=holding.deadline, quiet=True
        )
        if isinstance(result, Written):
            holding.lease, holding.version = result.lease, result.version
            state.seen = Seen(result.lease, result.version)
            holding.deadline = started + state.lease_timeout
            holding.next_renew = proto.next_renewal(
                started, state.renew_interval, spread_draw(), first=False
            )
            holding.next_watch = started + state.watch_interval
            if proto.pending_request_for(beat_, state.priority) is None:
                holding.quiet_since = started
            yield Renewed(holding)
            return
        if (yield from rebased(state, holding, result)):
            continue
        races += 1
        if not (yield from examine(state, holding, result)):
            return
    raise StoreUnavailable(f"{state.key!r}: renewal kept losing races")


def rebased(state: LockState, holding: Holding, seen: Seen) -> Flow[bool]:
    """After a holder's write lost its race: if only waiters wrote (``_protocol.line_moved``),
    take what was read as the holding's document (sighting the line's beats) and return True:
    the write is to be made again at once on it, nothing else decided anew."""
    if not proto.line_moved(holding.lease, seen.lease):
        return False
    assert seen.lease is not None and seen.version is not None
    holding.lease, holding.version = seen.lease, seen.version
    mono = yield from now()
    state.sight_line(seen.lease, mono)
    return True


def renew_now(state: LockState, holding: Holding) -> Flow[None]:
    """A user's renew(): renew, then say if the lock was lost."""
    yield from renew(state, holding)
    raise_if_lost(state.key, holding)


def watch(state: LockState, holding: Holding, started: float) -> Flow[None]:
    """Read the document as holder (at the watch interval, or at once when a notice says it
    may have changed) and examine what it shows. ``started``: the time just before, on the
    monotonic clock."""
    holding.poked = False
    # A failing read must neither outlive the lease nor hold up a renewal that falls due.
    # The request in flight may take until the lease ends (a slow answer is not a failure).
    seen = yield from read(state, min(holding.deadline, holding.next_renew), holding.deadline)
    read_at, wall = yield NOW
    holding.next_watch = read_at + state.watch_interval
    if seen.lease is not None and proto.pending_request_for(seen.lease, state.priority) is None:
        holding.quiet_since = started
    yield from examine(state, holding, seen, (read_at, wall))


def examine(
    state: LockState, holding: Holding, seen: Seen, clock: tuple[float, float] | None = None
) -> Flow[bool]:
    """Look at a fresh read as holder: still ours? A request to clean up for? True while we
    still hold the lock. ``clock``: the (monotonic, wall) time the caller read when the read
    returned, if it did."""
    lease = seen.lease
    if lease is None or lease.holder is None or lease.holder.lock_id != holding.lock_id:
        kind = lease.event.kind if lease is not None and lease.event is not None else "released"
        yield Lose(holding, LOSS_REASONS.get(kind, kind))
        return False
    assert seen.version is not None
    holding.lease, holding.version = lease, seen.version
    mono, wall = (yield NOW) if clock is None else clock
    holding.request_seen = proto.sight(holding.request_seen, proto.request_ident(lease), mono)
    state.sight_line(lease, mono)
    told = holding.told
    if told is not None and proto.request_withdrawn(lease, told.requestor.requestor_id):
        holding.told = None
        log.info(
            "prioritylock: %r: %s withdrew its request; %s keeps the lock",
            state.key,
            told.requestor.owner,
            state.owner,
        )
        yield Withdrawn(holding, told)
    request = proto.pending_request_for(lease, lease.holder.priority)
    if request is not None and holding.notified != request.requestor_id and not holding.cleaning:
        # One cleanup at a time: when it returns, the lock goes to whoever is pending then.
        holding.notified = request.requestor_id
        deadline = cleanup_deadline(holding, lease, seen.version, state.drift)
        if not proto.tells_cleanup(deadline, mono):
            log.info(
                "prioritylock: %r: %s (priority %d) asked %s for the lock, heard of after the "
                "cleanup window closed (%.1f s ago): not announced",
                state.key,
                request.owner,
                request.priority,
                state.owner,
                mono - deadline,
            )
            return holding.active
        holding.cleaning = True
        log.info(
            "prioritylock: %r: %s (priority %d) asks %s for the lock, fence %d; cleanup window "
            "%.1f s",
            state.key,
            request.owner,
            request.priority,
            state.owner,
            lease.fence,
            deadline - mono,
        )
        holding.told = Told(request, deadline, wall + (deadline - mono))
        yield Cleanup(holding, request, deadline, wall + (deadline - mono))
    return holding.active  # an inline cleanup (manual heartbeat) may have handed over


def after_cleanup(state: LockState, holding: Holding) -> Flow[Released | None]:
    """The holder's cleanup returned (or there is no listener to run it)."""
    if not state.cooperates:
        holding.cleaning = False
        return None  # not cooperating: we keep the lock until unlock() or a forceful takeover
    if not holding.active or state.holding is not holding:
        return None
    return (yield from release(state, holding, cleanup_done=True))


def release(state: LockState, holding: Holding, *, cleanup_done: bool) -> Flow[Released | None]:
    """Write the release (or the handover, with a request pending). Returns what to announce.

    Its first write is :func:`release_first` and :func:`release_landed`, which a driver may
    also make itself, without a flow (``LockBase._start_release``); for such a driver, its
    write raising goes on in :func:`release_after`.

    :raises LockLost: the lock was lost before the release.
    :raises StoreUnavailable: the release could not land; it is retried in the background.
    """
    raise_if_lost(state.key, holding)
    holding.releasing = True
    return (yield from _releasing(state, holding, cleanup_done))


def release_first(
    state: LockState, holding: Holding, mono: float, wall: float
) -> tuple[float, Lease, Put] | None:
    """A release's first write, with the clock read at ``mono``, ``wall``: its deadline (the
    store timeout from there), the lease to write and the ``Put`` that writes it; None when the
    holding has expired meanwhile (:func:`release` tells the loss).

    :raises LockLost: the lock was lost before the release.
    """
    raise_if_lost(state.key, holding)
    if mono >= holding.deadline:
        return None
    holding.releasing = True
    deadline = limit(state, mono)
    nxt, put = _release_put(state, holding, mono, wall, deadline)
    return deadline, nxt, put


def release_landed(
    state: LockState, holding: Holding, nxt: Lease, version: str
) -> tuple[Hint | None, Released]:
    """The release's write of ``nxt`` (:func:`release_first`) landed as ``version``: the hint
    to send (None: nobody to hint) and what to announce; the driver then ends the heartbeat
    (``End``)."""
    state.seen, hint = _landed_seen(state, nxt, version, holding.lease, holding.lock_id)
    return hint, _released(state, holding, nxt)


def release_after(
    state: LockState,
    holding: Holding,
    deadline: float,
    write: tuple[Lease, Put, ConditionFailed | StoreUnavailable],
) -> Flow[Released | None]:
    """A release from where a driver that made its first write itself left it
    (:func:`release_first`): the write (the lease, its ``Put``) raised the error. Goes on
    exactly as :func:`release` does from there."""
    return (yield from _releasing(state, holding, False, deadline, write))


def _release_put(
    state: LockState, holding: Holding, mono: float, wall: float, deadline: float
) -> tuple[Lease, Put]:
    """The release (or handover) to write now, and its first attempt."""
    nxt = proto.after_cleanup(
        holding.lease,
        now=mono,
        wall=wall,
        drift=state.drift,
        request_seen=holding.request_seen,
        boot=state.boot,
    )
    return _put(state, nxt, holding.version, create=False, by=deadline)


def _released(state: LockState, holding: Holding, nxt: Lease) -> Released:
    """The release (or handover) ``nxt`` landed: the holding is over."""
    holding.ended = True
    if nxt.holder is not None:
        log.info(
            "prioritylock: %r handed over by %s to %s, fence %d",
            state.key,
            state.owner,
            nxt.holder.owner,
            nxt.fence,
        )
        return Released(nxt, True)
    if log.isEnabledFor(logging.INFO):  # every release pays for Logger.info's frame else
        log.info("prioritylock: %r released by %s, fence %d", state.key, state.owner, nxt.fence)
    return Released(nxt, False)


def _releasing(
    state: LockState,
    holding: Holding,
    cleanup_done: bool,
    deadline: float | None = None,
    first: tuple[Lease, Put, ConditionFailed | StoreUnavailable] | None = None,
) -> Flow[Released | None]:
    """:func:`release`'s rounds (``first``: the first write, made by the driver, and what it
    raised)."""
    while True:
        replaced = holding.lease
        try:
            if first is None:
                mono, wall = yield NOW
                if deadline is None:  # the store timeout counts from the first clock read
                    deadline = limit(state, float(mono))
                if mono >= holding.deadline and not cleanup_done:
                    yield Lose(holding, "expired")
                    raise_if_lost(state.key, holding)
                nxt, put = _release_put(state, holding, mono, wall, deadline)
                try:
                    landed = yield put
                except (ConditionFailed, StoreUnavailable) as exc:
                    error: ConditionFailed | StoreUnavailable | None = exc
                else:
                    error = None
            else:
                (nxt, put, error), first = first, None
            if error is None:
                result: Written | Seen
                result, sent = _landed_at(state, nxt, landed, replaced, holding.lock_id)
                if sent is not None:
                    yield sent
            else:
                assert deadline is not None
                result = yield from settle(
                    state,
                    nxt,
                    holding.version,
                    put,
                    error,
                    deadline=deadline,
                    replaced=replaced,
                    me=holding.lock_id,
                )
        except StoreUnavailable:
            holding.ended = True
            yield End(holding)
            yield RetryRelease(holding)
            raise
        if isinstance(result, Written):
            state.seen = Seen(result.lease, result.version)
            released = _released(state, holding, result.lease)
        elif proto.release_landed(result.lease, nxt):
            # Proven landed: the lock moved on before we could read our write back (its answer
            # lost, or a retry of it refused with a 412): the release is done, not a loss.
            released = _released(state, holding, nxt)
        elif (yield from rebased(state, holding, result)):
            continue  # only waiters wrote: the same release (or handover) again, at once
        elif not (yield from examine(state, holding, result)):
            raise_if_lost(state.key, holding)
            return None
        else:
            continue
        yield End(holding)
        if released.handed_over and cleanup_done:
            yield Lose(holding, "preempted", force=True)
            return None
        return released


def background_release(state: LockState, holding: Holding) -> Flow[float | None]:
    """One attempt of the background release of a holding whose release could not land.
    Returns when to try again, or None when done (landed, or no longer ours)."""
    try:
        seen = yield from read(state)
        lease = seen.lease
        if lease is None or lease.holder is None or lease.holder.lock_id != holding.lock_id:
            return None  # no longer ours: nothing to release
        assert seen.version is not None
        mono, wall = yield NOW
        nxt = proto.released(lease, wall)
        result = yield from write(
            state,
            nxt,
            seen.version,
            create=False,
            deadline=mono + state.store_timeout,
            replaced=lease,
            me=holding.lock_id,
        )
        if isinstance(result, Written):
            log.info("prioritylock: background release of %r landed", state.key)
            return None
        return (yield from now())
    except StoreUnavailable as exc:
        log.warning("prioritylock: background release of %r failed again: %s", state.key, exc)
        return (yield from now()) + 1.0
    except Exception:
        log.exception("prioritylock: background release of %r gave up", state.key)
        return None


# -- operators ----------------------------------------------------------------------------------


def force_unlock(
    state: LockState,
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
        seen = yield from read(state)
    except CorruptLease:
        if not overwrite_corrupt or guarded:
            raise
        yield from overwrite_corrupt_lease(state, by, message)
        return None
    while True:
        if not proto.shows(seen.lease, if_fence, if_owner):
            raise ConditionFailed(state.key, guard_failed(seen.lease))
        if seen.lease is None:
            return None
        before = seen.lease
        mono, wall = yield NOW
        freed = proto.forced_free(before, by=by, message=message, wall=wall, boot=state.boot)
        result = yield from write(
            state,
            freed,
            seen.version,
            create=False,
            deadline=mono + state.store_timeout,
            replaced=before,
        )
        if isinstance(result, Written):
            log.warning(
                "prioritylock: %r force-unlocked by %s (was %s, fence %d; now fence %d): %s",
                state.key,
                by,
                holder_name(before),
                before.fence,
                result.lease.fence,
                message,
            )
            return before
        seen = result


def overwrite_corrupt_lease(state: LockState, by: str, message: str) -> Flow[None]:
    """Replace a corrupt document (break-glass), compare-and-swap on the version we read."""
    while True:
        deadline = yield from op_deadline(state)
        found: ReadResult = yield from retrying(state, Read(None), deadline)
        if found is None:
            return
        assert isinstance(found, Versioned)
        try:
            decode(state.key, found.data, name=state.key)
        except CorruptLease:
            pass
        else:
            return  # somebody repaired it meanwhile; the caller may force_unlock again
        _mono, wall = yield NOW
        fence = max(int(wall * 1000), salvage_fence(found.data) + 1)
        event = Event("force_unlock", wall, by, f"overwrote a corrupt lease: {message}")
        fresh = Lease(state.key, fence, new_nonce(), None, None, event)
        try:
            yield Put(encode(fresh), found.version, False, False, by=deadline)
        except ConditionFailed:
            continue
        log.warning("prioritylock: %r: corrupt lease overwritten by %s: %s", state.key, by, message)
        state.seen = None
        return
