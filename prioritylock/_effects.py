"""The effects a lock's flows yield (``_flows``), and what a driver sends back for each.

A flow asks its driver to do something by yielding one of these; the driver performs it and
sends the result (or throws in the store's error). :data:`Effect` is their union: the drivers
dispatch on it with ``match`` (``_driver.LockBase._perform_effect``), so the type checker sees
every branch. Like the flows, nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

import attrs

from prioritylock._lease import Lease
from prioritylock._state import Holding, Told

__all__ = [
    "ARM",
    "NOW",
    "Arm",
    "Cleanup",
    "Denied",
    "Effect",
    "End",
    "Flow",
    "Hold",
    "Instant",
    "Lose",
    "Now",
    "Pause",
    "Put",
    "Read",
    "Renewed",
    "RetryRelease",
    "Sleep",
    "Unsettled",
    "Withdrawn",
]

T = TypeVar("T")

#: A flow: yields effects (:data:`Effect`), is sent their results, returns its outcome.
Flow = Generator["Effect", Any, T]


@attrs.frozen
class Read:
    """Read the document once (conditionally against ``known`` when the store can).
    Result: what the store's read returns; store errors are thrown in. ``by``: when the call
    must have ended, on the lock's monotonic clock (see :class:`Put`)."""

    known: str | None
    by: float | None = None


@attrs.frozen
class Put:
    """One conditional write: create when ``create``, else replace ``version`` (skipping the sync
    when ``unsynced``). Result: the new version; store errors are thrown in. Unless ``quiet``
    (a renewal, which tells nobody anything), a write that may have landed is noticed by the
    other locks of the process on the document (``_wake``).

    ``by``: when the call must have ended, on the lock's monotonic clock. The driver stops
    waiting for a network store then and throws in ``StoreUnavailable`` (for a write, with an
    unknown outcome); the call itself goes on to its end unwatched.

    ``request``: the write asks the holder for the lock; its notice says which version it made
    and when it was sent, so a holder in the process can count its cleanup window from then."""

    data: bytes
    version: str | None
    create: bool
    unsynced: bool
    quiet: bool = False
    by: float | None = None
    request: bool = False


class Now:
    """What time is it? Result: ``(monotonic, wall)`` on the lock's clock (one instance:
    :data:`NOW`)."""

    def __repr__(self) -> str:
        return "NOW"


NOW = Now()


@attrs.frozen
class Sleep:
    """Back off before retrying a store call; the lock stays busy meanwhile."""

    seconds: float


class Arm:
    """Be ready to be woken by a release of this lock in this process (before reading; one
    instance: :data:`ARM`)."""

    def __repr__(self) -> str:
        return "ARM"


ARM = Arm()


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
class Withdrawn:
    """The request the holder was told of (``told``) was withdrawn, the lock still ours: tell
    the holder (signal, listener)."""

    holding: Holding
    told: Told


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


@attrs.frozen
class Unsettled:
    """An acquire ends without the lock after a write of its claim whose outcome it could not
    settle (the store failed, or did not answer in time): once the store calls still in flight
    have ended, take back in the background whatever of the claim the lease shows
    (:func:`_flows.background_settle`)."""

    lock_id: str


#: Effects a driver performs at once, without waiting (``_driver.LockBase._perform_effect``).
Instant = (
    Now
    | Arm
    | Hold
    | Lose
    | End
    | Cleanup
    | Withdrawn
    | Denied
    | Renewed
    | RetryRelease
    | Unsettled
)

#: Every effect a flow may yield: store calls, waits, and the instant ones.
Effect = Read | Put | Sleep | Pause | Instant
