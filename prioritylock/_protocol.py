"""The lease protocol's decisions, pure: no I/O, no sleeping, no reading of clocks.

Every function takes what a client has observed (the lease it read, and when it first saw the
holder's heartbeat or the pending request, on *its own* monotonic clock) and returns what to do
next: write a new document, wait until a moment, or stop with an outcome. The flows in
``_flows.py`` string them together; the drivers (``_lock.py``, ``_alock.py``) run those.

How expiry is judged (docs/protocol.md, mutual exclusion): a holder believes it holds
the lock until ``start of its last successful renew + lease_timeout``. A waiter starts counting
when it first *sees* a holder's heartbeat ``(lock_id, beat)``, and takes over only after that
heartbeat stayed unchanged for ``lease_timeout + max_clock_drift``. The heartbeat landed after
the holder started its renew and before the waiter saw it, so with sane clock *rates* the holder
always gives up first. Requests written into the lease change its version but not the
heartbeat, so they never extend a dead holder's life.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from prioritylock._lease import (
    MAX_LINE,
    MAX_LINE_BYTES,
    OVERRIDE_PRIORITY,
    Entry,
    Event,
    EventKind,
    Holder,
    Lease,
    Requestor,
    encode_line,
    new_nonce,
)
from prioritylock._reserve import next_fence

__all__ = [
    "EARLY_HINT_GAP",
    "FIRST_RENEW_SPREAD",
    "HINTED_POLL",
    "RENEW_SPREAD",
    "Claim",
    "Lining",
    "MyRequest",
    "Owned",
    "Refused",
    "Sighting",
    "Step",
    "Wait",
    "Write",
    "acquire_step",
    "after_cleanup",
    "ahead",
    "early_hint",
    "expires_at",
    "forced_free",
    "free_ident",
    "hinted",
    "line_moved",
    "live",
    "next_renewal",
    "pending_request_for",
    "release_landed",
    "released",
    "renewed",
    "request_wait",
    "request_withdrawn",
    "shows",
    "sight",
    "sight_line",
    "tells_cleanup",
    "window_start",
    "without",
]


@attrs.define  # made on every acquire: not frozen (see _lease's _made)
class Claim:
    """What a client asks for when it tries to take the lock."""

    lock_id: str
    owner: str
    message: str
    priority: int
    lease_timeout: float
    cleanup_timeout: float
    waiting_timeout: float
    forceful: bool
    # An operator's guard: act only while the lease still shows this fence / holder's owner.
    if_fence: int | None = None
    if_owner: str | None = None
    #: The boot of the client's machine, for fence reservations (``_reserve``).
    boot: str | None = None
    #: Where this acquisition hears hints (``_hints``), recorded with it; None: nowhere.
    hint: str | None = None

    @property
    def override(self) -> bool:
        return self.priority == OVERRIDE_PRIORITY

    def as_holder(self, wall: float) -> Holder:
        return Holder(  # (positional, in the fields' order: made on every acquire)
            self.lock_id,
            self.owner,
            self.message,
            self.priority,
            self.lease_timeout,
            self.cleanup_timeout,
            self.forceful,
            wall,  # acquired_at
            wall,  # renewed_at
            0,  # beat
            self.hint,
        )

    def as_requestor(self, wall: float) -> Requestor:
        return Requestor(
            requestor_id=self.lock_id,
            owner=self.owner,
            message=self.message,
            priority=self.priority,
            waiting_timeout=self.waiting_timeout,
            forceful=self.forceful,
            requested_at=wall,
            lease_timeout=self.lease_timeout,
            cleanup_timeout=self.cleanup_timeout,
            hint=self.hint,
        )


@attrs.define  # made on every acquire: not frozen (see _lease's _made)
class Sighting:
    """When this client first saw something (a heartbeat, a request), on its own clock."""

    ident: str
    since: float


def sight(previous: Sighting | None, ident: str | None, now: float) -> Sighting | None:
    """Keep the first sighting of ``ident``; start a new one when it changed."""
    if ident is None:
        return None
    if previous is not None and previous.ident == ident:
        return previous
    return Sighting(ident, now)


def shows(lease: Lease | None, if_fence: int | None, if_owner: str | None) -> bool:
    """Whether the lease still shows what an operator saw: its fence and its holder's owner
    (None: not checked). A free or absent lease shows no owner."""
    if if_fence is not None and (lease is None or lease.fence != if_fence):
        return False
    return if_owner is None or (
        lease is not None and lease.holder is not None and lease.holder.owner == if_owner
    )


def heartbeat_ident(lease: Lease | None) -> str | None:
    """What identifies the holder's current heartbeat: its lock id and renewal count."""
    if lease is None or lease.holder is None:
        return None
    return f"{lease.holder.lock_id}#{lease.holder.beat}"


def request_ident(lease: Lease | None) -> str | None:
    if lease is None or lease.requestor is None:
        return None
    return lease.requestor.requestor_id


def free_ident(lease: Lease | None) -> str | None:
    """What identifies a period in which the lock stays free: its fence (the next holder bumps
    it; a force unlock too). None while held or absent."""
    if lease is None or lease.holder is not None:
        return None
    return f"free#{lease.fence}"


def sight_line(
    previous: Mapping[str, float], line: tuple[Entry, ...], now: float
) -> dict[str, float]:
    """When this client first saw each entry's current beat (``Entry.ident``), on its own
    clock: kept for the beats it saw before, ``now`` for new ones."""
    return {e.ident: previous.get(e.ident, now) for e in line}


def _dead_at(entry: Entry, seen: Mapping[str, float], now: float, drift: float) -> float:
    """When a waiter whose entry shows this beat is surely gone (it rewrites its beat at least
    every ``ttl``), on the observer's clock."""
    return seen.get(entry.ident, now) + entry.ttl + drift


def live(
    line: tuple[Entry, ...], seen: Mapping[str, float], now: float, drift: float
) -> tuple[Entry, ...]:
    """The entries of ``line`` whose waiters are not surely gone (see :func:`_dead_at`)."""
    return tuple(e for e in line if now < _dead_at(e, seen, now, drift))


def without(line: tuple[Entry, ...], entry_id: str) -> tuple[Entry, ...]:
    """``line`` without the entry ``entry_id`` (a waiter that leaves, or takes the lock)."""
    return tuple(e for e in line if e.entry_id != entry_id)


def ahead(
    lease: Lease,
    me: Claim,
    free_since: float,
    *,
    now: float,
    drift: float,
    seen: Mapping[str, float],
) -> float | None:
    """Whether a waiter of the line goes before ``me`` at a lock free (or expired) since
    ``free_since`` on our clock: None if nobody does; else until when we wait at most (the
    moment that waiter is surely gone, or passed over).

    The line's order is the store's: the head goes first. A waiter judged gone (its beat
    unchanged for its ``ttl`` plus the drift allowance) is skipped. A live head that does not
    take the lock within its ``ttl`` plus the drift allowance of it falling free is passed
    over, then the next the same. A strictly higher priority than a waiter's goes before it;
    a waiter never goes before itself."""
    turn = free_since
    for entry in lease.line:
        if entry.entry_id == me.lock_id:
            return None
        dead_at = _dead_at(entry, seen, now, drift)
        if now >= dead_at:
            continue
        if me.priority > entry.priority:
            return None
        turn += entry.ttl + drift
        if now < turn:
            return min(dead_at, turn)
    return None


def expires_at(lease: Lease, seen: Sighting, drift: float) -> float:
    """The moment (on the observer's clock) after which the observed holder is surely gone."""
    assert lease.holder is not None
    return seen.since + lease.holder.lease_timeout + drift


def request_wait(waiting_timeout: float, cleanup_timeout: float) -> float:
    """How long a request waits: min(its waiting timeout, the holder's cleanup timeout)."""
    return min(waiting_timeout, cleanup_timeout)


@attrs.frozen
class Lining:
    """A blocking acquire of a fair lock (one that joins the line while it waits): where it
    hears a hint (recorded in its entry, as given), and when its entry is next due for a beat
    (None: not written in this acquire)."""

    hint: str | None = None
    due: float | None = None


@attrs.frozen
class MyRequest:
    """A request this client wrote: when its write had returned (so surely landed), and how
    long it may wait from then."""

    started: float
    wait: float


# -- steps -------------------------------------------------------------------------------------


@attrs.define  # made on every acquire: not frozen (see _lease's _made)
class Write:
    """Write ``lease`` (create it when ``create``); ``outcome`` says what a success means.

    outcomes: ``acquired`` (we hold it), ``requested`` (our request is recorded),
    ``withdrawn`` (our request timed out and is removed), ``joined`` (our entry in the line is
    written, or its beat renewed).
    """

    lease: Lease
    create: bool
    outcome: Literal["acquired", "requested", "withdrawn", "joined"]


@attrs.frozen
class Owned:
    """The lease names us as holder (a handover, or a write of ours that landed)."""


@attrs.frozen
class Wait:
    """Nothing to write now. ``until`` is when the state changes by itself (expiry, the end of
    our request's wait), or None; ``reason`` is ``busy`` (held, we can't preempt),
    ``handover`` (our request is pending) or ``full`` (we would join the line, but it is full:
    we wait unlined)."""

    until: float | None
    reason: Literal["busy", "handover", "full"]


@attrs.frozen
class Refused:
    """Stop: ``denied`` (a higher request displaced ours), or ``changed`` (the lease no longer
    shows what an operator's guard expects)."""

    reason: Literal["denied", "changed"]


Step = Write | Owned | Wait | Refused


def acquire_step(
    lease: Lease | None,
    name: str,
    me: Claim,
    *,
    now: float,
    wall: float,
    drift: float,
    holder_seen: Sighting | None,
    request_seen: Sighting | None,
    mine: MyRequest | None,
    may_request: bool = True,
    free_seen: Sighting | None = None,
    line_seen: Mapping[str, float] | None = None,
    lining: Lining | None = None,
) -> Step:
    """Decide the next move of a client trying to take the lock.

    :param lease: the document as last read (None: absent).
    :param holder_seen: when we first saw the current heartbeat (see :func:`sight`).
    :param request_seen: when we first saw the pending request.
    :param mine: our own pending request, if we wrote one in this attempt.
    :param may_request: False once a request of ours timed out in a blocking ``lock()``: from
        then on we wait for a release or an expiry like any other contender.
    :param free_seen: when we first saw the lock free in its current free period
        (:func:`free_ident`).
    :param line_seen: when we first saw each entry's beat (:func:`sight_line`).
    :param lining: a blocking acquire that joins the line while it waits; None: it never joins
        (a ``try_lock``, or ``fair(False)``), though it never goes before a live head either.
    """
    if not shows(lease, me.if_fence, me.if_owner):
        return Refused("changed")
    if lease is None:
        holder = me.as_holder(wall)
        event = Event("override" if me.override else "acquired", wall, me.owner, me.message)
        return Write(
            Lease(name, 1, new_nonce(), holder, None, event), create=True, outcome="acquired"
        )
    seen = {} if line_seen is None else line_seen
    # The line of waiters, less those surely gone: what a write of ours leaves there.
    rest = live(without(lease.line, me.lock_id), seen, now, drift) if lease.line else ()

    def busy(until: float | None) -> Step:
        return _wait_or_join(lease, me, until, now=now, wall=wall, rest=rest, lining=lining)

    holder_now = lease.holder
    if holder_now is None:
        if me.override:
            return _take(lease, me, wall, "override", rest)
        if lease.line:
            assert free_seen is not None, "the driver sights every free lock it reads"
            turn = ahead(lease, me, free_seen.since, now=now, drift=drift, seen=seen)
            if turn is not None:
                return busy(turn)
        return _take(lease, me, wall, "acquired", rest)
    if holder_now.lock_id == me.lock_id:
        return Owned()
    if me.override:
        return _take(lease, me, wall, "override", rest)
    assert holder_seen is not None, "the driver sights every heartbeat it reads"
    expiry = expires_at(lease, holder_seen, drift)
    if now >= expiry:
        turn = ahead(lease, me, expiry, now=now, drift=drift, seen=seen) if lease.line else None
        if turn is not None:
            return busy(turn)
        return _take(lease, me, wall, "expired_takeover", rest)
    pending = lease.requestor
    if mine is not None and (pending is None or pending.requestor_id != me.lock_id):
        # Our request is gone and the lock did not come to us: a higher request displaced it
        # (and may already hold the lock), or a takeover cleared it.
        return Refused("denied")
    if me.priority <= holder_now.priority or not may_request:
        return busy(expiry)

    if pending is not None and pending.requestor_id == me.lock_id:
        assert mine is not None, "our request can only be pending if we wrote it"
        deadline = mine.started + mine.wait
        if now >= deadline:
            if me.forceful:
                return _take(lease, me, wall, "forceful_takeover", rest)
            withdrawn = lease.rewritten(requestor=None)
            return Write(withdrawn, create=False, outcome="withdrawn")
        return Wait(min(expiry, deadline), "handover")
    if pending is not None:
        assert request_seen is not None, "the driver sights every request it reads"
        stale_at = (
            request_seen.since
            + request_wait(pending.waiting_timeout, holder_now.cleanup_timeout)
            + drift
        )
        if now < stale_at and me.priority <= pending.priority:
            return busy(min(expiry, stale_at))
    if request_wait(me.waiting_timeout, holder_now.cleanup_timeout) <= 0:
        return _take(lease, me, wall, "preempted", rest)
    requested = lease.rewritten(requestor=me.as_requestor(wall))
    return Write(requested, create=False, outcome="requested")


def _wait_or_join(
    lease: Lease,
    me: Claim,
    until: float | None,
    *,
    now: float,
    wall: float,
    rest: tuple[Entry, ...],
    lining: Lining | None,
) -> Step:
    """We can't take the lock yet: wait, joining the line first (or renewing our entry's beat
    when due) if we are a waiter that joins. A full line (:data:`MAX_LINE` live entries, or
    :data:`MAX_LINE_BYTES`) is waited at unlined (``full``); we join when there is room. A
    waiter writes nothing but its own entry: its join, its beat (its leave: ``_flows.leave``),
    and each only when due (``Lining``)."""
    if lining is None:
        return Wait(until, "busy")
    mine = next((e for e in lease.line if e.entry_id == me.lock_id), None)
    if mine is not None:
        if lining.due is not None and now < lining.due:
            return Wait(lining.due if until is None else min(until, lining.due), "busy")
        beat = attrs.evolve(mine, beat=mine.beat + 1)
        kept = tuple(beat if e is mine else e for e in lease.line if e is mine or e in rest)
        return Write(lease.rewritten(line=kept), create=False, outcome="joined")
    if len(rest) >= MAX_LINE:
        return Wait(until, "full")
    entry = Entry(me.lock_id, me.owner, me.priority, wall, me.lease_timeout, 0, lining.hint)
    # After every entry of our priority or higher: the order in which the joins land.
    at = len(rest)
    while at > 0 and rest[at - 1].priority < me.priority:
        at -= 1
    line = (*rest[:at], entry, *rest[at:])
    if len(encode_line(line)) > MAX_LINE_BYTES:
        return Wait(until, "full")
    return Write(lease.rewritten(line=line), create=False, outcome="joined")


def _take(lease: Lease, me: Claim, wall: float, kind: EventKind, rest: tuple[Entry, ...]) -> Write:
    """Take the lock: our entry (and the entries of waiters surely gone) leave the line."""
    taken = lease.rewritten(
        fence=next_fence(lease, me.boot),
        holder=me.as_holder(wall),
        requestor=None,
        event=Event(kind, wall, me.owner, me.message),
        # Taken from a free document: record which, so its releaser can prove its release
        # landed (release_landed) even if the answer to its write was lost.
        prior=lease.nonce if lease.holder is None else None,
        line=rest,
    )
    return Write(taken, create=False, outcome="acquired")


# -- the holder's side -------------------------------------------------------------------------


def renewed(lease: Lease, wall: float, line: tuple[Entry, ...] | None = None) -> Lease:
    """The holder's next heartbeat: same holder, ``beat + 1``; ``line``: the line it leaves
    (default: as it is)."""
    assert lease.holder is not None
    h = lease.holder
    holder = Holder(  # spelled out: attrs.evolve inspects the class on every call
        lock_id=h.lock_id,
        owner=h.owner,
        message=h.message,
        priority=h.priority,
        lease_timeout=h.lease_timeout,
        cleanup_timeout=h.cleanup_timeout,
        forceful=h.forceful,
        acquired_at=h.acquired_at,
        renewed_at=wall,
        beat=h.beat + 1,
        hint=h.hint,
    )
    if line is None:
        return lease.rewritten(holder=holder)
    return lease.rewritten(holder=holder, line=line)


#: A holding's first renewal comes at a random point of the last half of its renew interval ...
FIRST_RENEW_SPREAD = 0.5
#: ... and each later one in the last tenth: leases acquired in a burst (a process starting up,
#: a service taking thousands at once) would otherwise renew in that burst for as long as they
#: are held, and so would leases renewed together while a stalled loop caught up.
RENEW_SPREAD = 0.1


def next_renewal(started: float, renew_interval: float, draw: float, *, first: bool) -> float:
    """When a holding renews next, given when its last successful renewal (or, ``first``, its
    acquisition) *started*: ``renew_interval * (1 - spread * draw)`` after it, ``draw`` a
    uniform random number in [0, 1). Never later than one renew interval (a renewal may come
    earlier than that, never later), so the lease's slack and the drift allowance are the same
    as with a fixed interval; on average a holding writes 5% more often than every interval."""
    spread = FIRST_RENEW_SPREAD if first else RENEW_SPREAD
    return started + renew_interval * (1.0 - spread * draw)


def line_moved(base: Lease, fresh: Lease | None) -> bool:
    """Whether a holder's write made on ``base`` lost its compare-and-swap to waiters only:
    ``fresh``, read after the loss, differs from ``base`` at most in its line (joins, beats,
    leaves) and nonce; its holder (heartbeat included), fence, request, event, fence
    reservation and ``prior`` are unchanged. Then nothing the holder decided on has changed:
    it writes the same renewal, release or handover again at once on ``fresh``, deciding
    nothing anew and without stepping back (docs/protocol.md, the line of waiters). Anything
    else (a request, a takeover, a release proven landed) is examined as after any lost race."""
    return (
        fresh is not None
        and fresh.holder == base.holder
        and fresh.fence == base.fence
        and fresh.requestor == base.requestor
        and fresh.event == base.event
        and fresh.reserve == base.reserve
        and fresh.prior == base.prior
        and fresh.schema == base.schema
    )


def released(lease: Lease, wall: float) -> Lease:
    """The holder lets go with nobody waiting: free, fence kept (the next holder bumps it)."""
    assert lease.holder is not None
    event = Event("released", wall, lease.holder.owner, lease.holder.message)
    return lease.rewritten(holder=None, requestor=None, event=event)


def handed_over(lease: Lease, wall: float, boot: str | None) -> Lease:
    """The holder passes the lock to the pending requestor: the next fence, no gap between."""
    assert lease.holder is not None and lease.requestor is not None
    r = lease.requestor
    holder = Holder(
        lock_id=r.requestor_id,
        owner=r.owner,
        message=r.message,
        priority=r.priority,
        lease_timeout=r.lease_timeout,
        cleanup_timeout=r.cleanup_timeout,
        forceful=r.forceful,
        acquired_at=wall,
        renewed_at=wall,
        beat=0,
        hint=r.hint,  # the same acquisition: it hears hints where it did as requestor
    )
    event = Event("handover", wall, lease.holder.owner, f"to {r.owner}")
    return lease.rewritten(
        fence=next_fence(lease, boot), holder=holder, requestor=None, event=event, prior=None
    )


def pending_request_for(lease: Lease, holder_priority: int) -> Requestor | None:
    """The pending request that outranks the holder, if any."""
    r = lease.requestor
    if r is None or r.priority <= holder_priority:
        return None
    return r


def tells_cleanup(deadline: float, now: float) -> bool:
    """Whether a holder that hears of a request ``now`` is to be told of it: only while its
    cleanup window (ending at ``deadline``, on its own clock) is still open. A request heard of
    later (its watch interval longer than the requestor's wait less the drift allowance) is not
    announced at all: a notice with no time left could only mislead."""
    return now < deadline


def window_start(quiet_since: float, version: str | None, sent: tuple[str, float] | None) -> float:
    """Where a holder counts the cleanup window of a request it reads in document ``version``
    from, on its own clock: its last read that showed no request started at ``quiet_since``,
    so the request landed later, and its requestor's wait (counted from after its write
    returned) ends no sooner than then plus the wait. ``sent`` ``(version, time)``: a request
    write of this process (same clock) that made that version and was sent at that time; when
    the holder reads exactly that version, its request is the one that write put there, and
    the requestor's wait began after it was sent: count from then (the later of the two). Any
    other version proves nothing of when its request was written."""
    if sent is not None and version is not None and sent[0] == version:
        return max(quiet_since, sent[1])
    return quiet_since


#: How long a requestor waits between its early hint and its request write (seconds): time for
#: the hinted holder's read to reach the store before the request does (a hint crosses a LAN in
#: well under a millisecond, and the holder's read and our write take about the same path).
EARLY_HINT_GAP = 0.01


#: The first pause (seconds, then backed off as usual) of a requestor that hinted its holder
#: early (:func:`early_hint`): the holder hints it back when it hands over (or its read shows the
#: request gone), so polls are only the fallback for a lost hint. Polling from 5 ms, as an
#: unhinted waiter does, made four reads in the first 0.1 s, each racing the holder's read at
#: the store.
HINTED_POLL = 0.1


def early_hint(lease: Lease | None, me: Claim) -> str | None:
    """The window rule: before a request for a lock held by a holder that hears hints, the
    requestor (itself hinted: hints are on here) tells it to read at once, and writes the request
    :data:`EARLY_HINT_GAP` later. The holder's read, showing no request yet, starts its cleanup
    window (``Holding.quiet_since``); the request, hinted again once it lands, is then read
    with (nearly) the whole window left, however long the holder's watch interval. Nothing
    about it is trusted: a read that comes after the request landed shows it, and the window
    counts from the read before, as without hints; so it is never less safe than that.

    A holder that hears hints where we do (``HOST:PORT``) is in our process, which stamps its
    request's notice instead (``window_start``): no early hint, no gap.

    Returns the holder's hint to send first, or None (no early hint, no gap)."""
    if lease is None or lease.holder is None or me.hint is None:
        return None
    hint = lease.holder.hint
    if hint is None or hint.rpartition("/")[0] == me.hint.rpartition("/")[0]:
        return None
    return hint


def hinted(before: Lease | None, after: Lease, me: str | None) -> tuple[str, ...]:
    """Whom a write of ``after`` over ``before`` concerns, to be told at once: the recorded
    hints (``_hints``) of the parties ``before`` names, but the writer (lock id ``me``; None:
    an operator, who is neither).

    The holder is concerned when the request changed (a request, a withdrawal, a displacement)
    or the lock left it (a takeover, an override, a force unlock); the requestor when the
    request changed (displaced, withdrawn, cleared) or the holder did (a handover to it, a
    release, a takeover); the head of the line when the lock became free (a release, a force
    unlock: the lock is the head's to take). A renewal changes neither and concerns nobody. A
    hint only moves a read earlier: whoever is told decides on what it reads."""
    if before is None:
        return ()
    h, r, nh, nr = before.holder, before.requestor, after.holder, after.requestor
    if r is None and not before.line and (h is None or h.hint is None or h.lock_id == me):
        return ()  # nobody named but the writer (every uncontended acquire and release)
    holder_moved = (h is None) != (nh is None) or (
        h is not None and nh is not None and h.lock_id != nh.lock_id
    )
    request_moved = (r is None) != (nr is None) or (
        r is not None and nr is not None and r.requestor_id != nr.requestor_id
    )
    if not (holder_moved or request_moved):
        return ()
    targets: list[str] = []
    if h is not None and h.hint is not None and h.lock_id != me:
        targets.append(h.hint)
    if r is not None and r.hint is not None and r.requestor_id != me and r.hint not in targets:
        targets.append(r.hint)
    if h is not None and nh is None and before.line:
        head = before.line[0]
        if head.hint is not None and head.entry_id != me and head.hint not in targets:
            targets.append(head.hint)
    return tuple(targets)


def request_withdrawn(lease: Lease, told: str | None) -> bool:
    """Whether the request a holder was told of (requestor id ``told``) has been withdrawn: the
    holder's read shows it still holds the lock (the caller checked), the request gone, and no
    other request outranking it pending (a request displaced by a higher one is not withdrawn:
    the cleanup goes on for the newcomer)."""
    assert lease.holder is not None
    if told is None or request_ident(lease) == told:
        return False
    return pending_request_for(lease, lease.holder.priority) is None


def after_cleanup(
    lease: Lease,
    *,
    now: float,
    wall: float,
    drift: float,
    request_seen: Sighting | None,
    boot: str | None = None,
) -> Lease:
    """What the holder writes when its cleanup returns (or it unlocks with a request pending).

    The lock passes to the requestor unless the request is surely stale (the requestor's wait
    ended, by our clock, more than the drift allowance ago): then it is simply released.
    """
    assert lease.holder is not None
    r = lease.requestor
    if r is None:
        return released(lease, wall)
    wait = request_wait(r.waiting_timeout, lease.holder.cleanup_timeout)
    if request_seen is not None and now >= request_seen.since + wait + drift:
        return released(lease, wall)
    return handed_over(lease, wall, boot)


def release_landed(current: Lease | None, ours: Lease) -> bool:
    """Whether ``current``, read after our release or handover ``ours`` had an unknown outcome
    and the document moved on, proves that ``ours`` landed.

    A release is proven by the next holder's record of the free document it took (``prior``
    is our release's nonce); a handover by the requestor holding the lock under our handover
    event (a forceful takeover by the same requestor would carry its own event). Anything else
    proves nothing: the lock may have been taken from us.
    """
    if current is None:
        return False
    if ours.holder is None:
        return current.prior is not None and current.prior == ours.nonce
    return (
        current.holder is not None
        and current.holder.lock_id == ours.holder.lock_id
        and current.event is not None
        and current.event == ours.event
    )


def forced_free(lease: Lease, *, by: str, message: str, wall: float, boot: str | None) -> Lease:
    """An operator frees the lock: recorded, the next fence, so the old holder is fenced off."""
    event = Event("force_unlock", wall, by, message)
    return lease.rewritten(fence=next_fence(lease, boot), holder=None, requestor=None, event=event)
