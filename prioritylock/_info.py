"""LockInfo: what anyone may read about a lock (Helix's LockInfo, flat)."""

from __future__ import annotations

import attrs

from prioritylock._lease import Lease

__all__ = ["LockInfo", "Waiter"]


@attrs.frozen
class Waiter:
    """One waiter in a lock's line (``LockInfo.waiters``)."""

    #: Its owner name.
    owner: str
    #: Its priority.
    priority: int
    #: When it joined the line (its wall clock, for display).
    since: float


@attrs.frozen
class LockInfo:
    """A snapshot of one lease document, readable by holders and non-holders alike.

    Times are wall-clock seconds written by the clients, for display only. Lock ids are not
    shown: only the holding lock object knows its own (``lock.lock_id``).
    """

    #: The lock's key in the store (its scope's key), e.g. ``v1/path/jobs/nightly``.
    name: str
    #: The fencing token of the current (or, when free, the last) holder.
    fence: int
    #: Whether a holder's lease is recorded (it may have expired: see ``expires_at``).
    held: bool
    #: The holder's owner name (None when free).
    owner: str | None = None
    #: Why the holder holds the lock, as it said.
    message: str | None = None
    #: The holder's priority (2147483647: an emergency override).
    priority: int | None = None
    #: Seconds the holder's lease lives without a renewal.
    lease_timeout: float | None = None
    #: Seconds the holder may take to clean up when a higher priority asks.
    cleanup_timeout: float | None = None
    #: Whether the holder took (or would take) the lock forcefully.
    forceful: bool | None = None
    #: When the holder took the lock (its wall clock, for display).
    acquired_at: float | None = None
    #: When the holder last renewed (its wall clock, for display).
    renewed_at: float | None = None
    #: ``renewed_at + lease_timeout``: for display; expiry is judged on each client's own clock.
    expires_at: float | None = None
    #: The pending higher-priority requestor's owner name, if any.
    requestor_owner: str | None = None
    #: Its priority.
    requestor_priority: int | None = None
    #: How long it waits for the holder's cleanup.
    requestor_waiting_timeout: float | None = None
    #: When it asked (its wall clock).
    requestor_requested_at: float | None = None
    #: Whether it takes the lock when its wait runs out.
    requestor_forceful: bool | None = None
    #: Why it asks.
    requestor_message: str | None = None
    #: How the lock last changed holder: ``acquired``, ``released``, ``expired_takeover``,
    #: ``handover``, ``preempted``, ``forceful_takeover``, ``override`` or ``force_unlock``.
    last_event: str | None = None
    #: Who made that change (an owner name; the operator for a force unlock).
    last_event_by: str | None = None
    #: Its message (an override's or force unlock's reason).
    last_event_message: str | None = None
    #: When it happened (the writer's wall clock).
    last_event_at: float | None = None
    #: The line of waiters, in the order they take the lock: priority, then arrival. Waiters
    #: that died stay here until their entries are judged gone (a few lease timeouts at most).
    waiters: tuple[Waiter, ...] = ()

    @classmethod
    def from_lease(cls, lease: Lease) -> LockInfo:
        h, r, e = lease.holder, lease.requestor, lease.event
        return cls(
            name=lease.name,
            fence=lease.fence,
            held=h is not None,
            owner=h.owner if h else None,
            message=h.message if h else None,
            priority=h.priority if h else None,
            lease_timeout=h.lease_timeout if h else None,
            cleanup_timeout=h.cleanup_timeout if h else None,
            forceful=h.forceful if h else None,
            acquired_at=h.acquired_at if h else None,
            renewed_at=h.renewed_at if h else None,
            expires_at=(h.renewed_at + h.lease_timeout) if h else None,
            requestor_owner=r.owner if r else None,
            requestor_priority=r.priority if r else None,
            requestor_waiting_timeout=r.waiting_timeout if r else None,
            requestor_requested_at=r.requested_at if r else None,
            requestor_forceful=r.forceful if r else None,
            requestor_message=r.message if r else None,
            last_event=e.kind if e else None,
            last_event_by=e.by if e else None,
            last_event_message=e.message if e else None,
            last_event_at=e.at if e else None,
            waiters=tuple(Waiter(w.owner, w.priority, w.since) for w in lease.line),
        )
