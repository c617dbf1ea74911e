"""LockInfo: what anyone may read about a lock (Helix's LockInfo, flat)."""

from __future__ import annotations

import attrs

from prioritylock._lease import Lease

__all__ = ["LockInfo"]


@attrs.frozen
class LockInfo:
    """A snapshot of one lease document, readable by holders and non-holders alike.

    Times are wall-clock seconds written by the clients, for display only. Lock ids are not
    shown: only the holding lock object knows its own (``lock.lock_id``).
    """

    name: str
    fence: int
    held: bool
    owner: str | None = None
    message: str | None = None
    priority: int | None = None
    lease_timeout: float | None = None
    cleanup_timeout: float | None = None
    forceful: bool | None = None
    acquired_at: float | None = None
    renewed_at: float | None = None
    expires_at: float | None = None
    requestor_owner: str | None = None
    requestor_priority: int | None = None
    requestor_waiting_timeout: float | None = None
    requestor_requested_at: float | None = None
    requestor_forceful: bool | None = None
    requestor_message: str | None = None
    last_event: str | None = None
    last_event_by: str | None = None
    last_event_message: str | None = None
    last_event_at: float | None = None

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
        )
