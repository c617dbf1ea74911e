"""The effects a lock's flows yield (``_flows``), and what a driver sends back for each.

A flow asks its driver to do something by yielding one of these; the driver performs it and
sends the result (or throws in the store's error). :data:`Effect` is the union a lease flow
(``_flows``) may yield, :data:`HudiEffect` a Hudi table lock's (``_hudi_flows``); both share
:data:`Shared`, the effects any flow may yield (store calls, waits, the clock, arming). The
drivers dispatch with ``match`` ending in :func:`assert_never` (``_runner.FlowRunner``,
``_driver.LockBase``, ``_hudi_lock.HudiBase``), so the type checker shows every ``match`` a new
effect must be handled in. The effects a driver must wait for derive from :class:`Waits`: the
asyncio driver awaits exactly those. Like the flows, nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NoReturn, TypeVar

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
    "Hint",
    "Hold",
    "HudiEffect",
    "HudiEnded",
    "HudiFlow",
    "HudiHeld",
    "HudiLost",
    "HudiUnsettled",
    "Instant",
    "Lose",
    "Now",
    "Pause",
    "Put",
    "Read",
    "Renewed",
    "RetryRelease",
    "Shared",
    "SharedFlow",
    "Sleep",
    "StoreCall",
    "Unsettled",
    "Waits",
    "Withdrawn",
    "assert_never",
]

T = TypeVar("T")

#: A flow: yields effects (:data:`Effect`), is sent their results, returns its outcome.
Flow = Generator["Effect", Any, T]
#: A flow that yields only :data:`Shared` effects: a step any lock's flows can use.
SharedFlow = Generator["Shared", Any, T]
#: A Hudi table lock's flow (``_hudi_flows``).
HudiFlow = Generator["HudiEffect", Any, T]


# _message: the effects a lock yields on every cycle (a store call, the start and end of a
# holding, a renewal) are slotted and set directly, not frozen (a frozen class's ``__init__``
# sets each field through ``object.__setattr__``, three times the cost). Nothing changes an
# effect once made.


def assert_never(effect: NoReturn) -> NoReturn:
    """The default of an effect ``match``: mypy rejects the call while any effect of the union
    matched on is unhandled (``typing.assert_never``, which Python 3.10 lacks)."""
    raise AssertionError(f"unhandled effect: {effect!r}")


class Waits:
    """An effect the driver must wait for (a store call, a sleep, a pause): the asyncio driver
    awaits what performing it returns; every other effect is done at once."""

    __slots__ = ()


@attrs.define  # made on every cycle: see _message
class Read(Waits):
    """Read the document once (conditionally against ``known`` when the store can).
    Result: what the store's read returns; store errors are thrown in. ``by``: when the call
    must have ended, on the lock's monotonic clock (see :class:`Put`)."""

    known: str | None
    by: float | None = None


@attrs.define  # made on every cycle: see _message
class Put(Waits):
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
class Sleep(Waits):
    """Back off before retrying a store call; the lock stays busy meanwhile."""

    seconds: float


class Arm:
    """Be ready to be woken by a release of this lock in this process (before reading; one
    instance: :data:`ARM`)."""

    def __repr__(self) -> str:
        return "ARM"


ARM = Arm()


@attrs.frozen
class Pause(Waits):
    """Wait between attempts to acquire: up to ``seconds``, or until a release in this process
    wakes us (if armed and ``woken``); then arm again. Other calls on the lock may run
    meanwhile. Result: True when the wait is to end now (cancelled, or the lock object closed),
    ``woken`` or not."""

    seconds: float
    #: False: a notice does not end the wait (a full line's waiter polls: ``_flows``).
    woken: bool = True
    #: A waiter in the line behind its head, who can do nothing before the waiters ahead of it
    #: have had their turn: its place in the line's order, ``(-priority, since)`` of its entry.
    #: Of the waiters so placed in this process, a notice wakes only the first (``_wake``).
    behind: tuple[int, float] | None = None


@attrs.frozen
class Hint:
    """A write landed that concerns other parties (``_protocol.hinted``): send each of
    ``hints`` (their recorded ``HOST:PORT/TOKEN``) a hint to read now (``_hints``). Never
    waited for, never fails."""

    hints: tuple[str, ...]


@attrs.define  # made on every cycle: see _message
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


@attrs.define  # made on every cycle: see _message
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


@attrs.define  # made on every cycle: see _message
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


@attrs.frozen
class HudiHeld:
    """A Hudi table lock holds the lock now: renew it from ``due`` (and hear notices)."""

    due: float


@attrs.frozen
class HudiLost:
    """The Hudi holding is lost for ``reason``: unless it already was (or ended), mark it, stop
    its renewals and tell the holder once."""

    reason: str


class HudiEnded:
    """The Hudi holding ended (released, or its release given up on): renew it no more."""

    def __repr__(self) -> str:
        return "HudiEnded()"


class HudiUnsettled:
    """A write of ours may have left a claim (or an unreleased holding) in Hudi's document:
    take it back in the background (``_hudi_flows.background_settle``)."""

    def __repr__(self) -> str:
        return "HudiUnsettled()"


#: The effects that are store calls (an asyncio driver makes an in-process store's at once).
StoreCall = Read | Put

#: The effects any flow may yield: store calls, waits, the clock, arming for a notice and
#: hints to other processes (``_runner.FlowRunner._perform_shared``).
Shared = Read | Put | Sleep | Pause | Now | Arm | Hint

#: Effects a lease driver performs at once, without waiting (``_driver.LockBase``).
Instant = (
    Now
    | Arm
    | Hint
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

#: Every effect a lease flow may yield: store calls, waits, and the instant ones.
Effect = Read | Put | Sleep | Pause | Instant

#: Every effect a Hudi table lock's flow may yield.
HudiEffect = Shared | HudiHeld | HudiLost | HudiEnded | HudiUnsettled
