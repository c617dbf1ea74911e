"""Small builders of leases, claims and lock states for the core's table-driven tests.

Defaults are chosen so every number in a case is easy to check by hand: the holder ``h`` has
priority 5, a 10 s lease and a 4 s cleanup timeout; the pending requestor ``r`` priority 7 and a
6 s wait; we are ``me``.
"""

from __future__ import annotations

from typing import Any

import attrs

from prioritylock import _protocol as proto
from prioritylock._lease import Event, Holder, Lease, Requestor, Reserve
from prioritylock._state import LockState

NAME = "jobs/a"


def holder(
    lock_id: str = "h",
    *,
    owner: str = "holder",
    priority: int = 5,
    lease_timeout: float = 10.0,
    cleanup_timeout: float = 4.0,
    beat: int = 3,
) -> Holder:
    return Holder(
        lock_id=lock_id,
        owner=owner,
        message="",
        priority=priority,
        lease_timeout=lease_timeout,
        cleanup_timeout=cleanup_timeout,
        forceful=False,
        acquired_at=1.0,
        renewed_at=2.0,
        beat=beat,
    )


def requestor(
    requestor_id: str = "r",
    *,
    owner: str = "asker",
    priority: int = 7,
    waiting_timeout: float = 6.0,
) -> Requestor:
    return Requestor(
        requestor_id=requestor_id,
        owner=owner,
        message="",
        priority=priority,
        waiting_timeout=waiting_timeout,
        forceful=False,
        requested_at=3.0,
        lease_timeout=8.0,
        cleanup_timeout=2.0,
    )


def lease(
    *,
    fence: int = 7,
    holder: Holder | None = None,
    requestor: Requestor | None = None,
    event: Event | None = None,
    reserve: Reserve | None = None,
    prior: str | None = None,
    nonce: str = "n0",
) -> Lease:
    return Lease(NAME, fence, nonce, holder, requestor, event, reserve=reserve, prior=prior)


def claim(
    lock_id: str = "me",
    *,
    priority: int = 6,
    waiting_timeout: float = 5.0,
    cleanup_timeout: float = 3.0,
    forceful: bool = False,
    if_fence: int | None = None,
    if_owner: str | None = None,
    boot: str | None = "boot-now",
) -> proto.Claim:
    return proto.Claim(
        lock_id=lock_id,
        owner="me-owner",
        message="m",
        priority=priority,
        lease_timeout=10.0,
        cleanup_timeout=cleanup_timeout,
        waiting_timeout=waiting_timeout,
        forceful=forceful,
        if_fence=if_fence,
        if_owner=if_owner,
        boot=boot,
    )


@attrs.frozen
class Terms:
    """The parts of a lock's configuration the flows read (a stand-in for ``LockConfig``)."""

    owner: str = "me-owner"
    message: str = "m"
    priority: int = 6
    lease_timeout: float = 10.0
    cleanup_timeout: float = 3.0
    waiting_timeout: float = 5.0
    forceful: bool = False
    keep_waiting: bool = True
    renew_interval: float = 3.0
    watch_interval: float = 1.0
    max_clock_drift: float = 1.0
    poll_interval: float = 0.5
    store_timeout: float = 5.0
    if_fence: int | None = None
    if_owner: str | None = None


def state(cooperates: bool = True, **terms: Any) -> LockState:
    """A lock's state on a plain store: no conditional reads, no unsynced writes, not shared
    with other lock objects through the process-wide decoded cache."""
    return LockState(
        NAME,
        Terms(**terms),
        name=None,
        conditional=False,
        unsynced=False,
        cooperates=cooperates,
        inline=False,
    )
