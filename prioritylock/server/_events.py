"""What a stream holder is told, whatever carries it: one typed event per thing that happens.

The HTTP API renders these as NDJSON lines (:func:`prioritylock.server._http2.ndjson`), the gRPC
``LockService`` as ``LockServerStream`` messages (:func:`prioritylock.server._grpc_lock.message`);
both match on :data:`Event` and end in :func:`unrendered` (``assert_never`` for Python 3.10), so
a new event that one of them does not render is a type error there.
"""

from __future__ import annotations

from typing import NoReturn, TypeAlias

import attrs

from prioritylock._listener import CleanupNotice

__all__ = [
    "PING",
    "CleanupRequested",
    "Event",
    "LockAcquired",
    "Lost",
    "Ping",
    "RequestWithdrawn",
    "Requestor",
    "unrendered",
]


@attrs.frozen
class Requestor:
    """Who asked the holder to hand over, as their request says."""

    owner: str | None
    priority: int
    message: str | None
    forceful: bool

    @classmethod
    def of(cls, notice: CleanupNotice) -> Requestor:
        return cls(
            notice.requestor_owner,
            notice.requestor_priority,
            notice.requestor_message,
            notice.forceful,
        )


@attrs.frozen
class Ping:
    """Nothing happened for a ping interval: the service is alive (and a dead client shows)."""


@attrs.frozen
class LockAcquired:
    """The lock is held: ``lock_id`` is the caller's proof of ownership, ``fence`` the token to
    pass to the protected resource."""

    lock_id: str
    fence: int


@attrs.frozen
class CleanupRequested:
    """A higher priority asks for the lock: clean up and end the stream by ``deadline`` (a Unix
    time), ``seconds_left`` from when it was told (ms precision)."""

    deadline: float
    seconds_left: float
    requestor: Requestor


@attrs.frozen
class RequestWithdrawn:
    """The request announced by :class:`CleanupRequested` was given up: the lock stays held."""

    requestor: Requestor


@attrs.frozen
class Lost:
    """The lock is no longer held (the library's loss reason, or ``service-stopping``); the
    last event of a stream."""

    reason: str


#: Every event a stream holder may be told.
Event: TypeAlias = Ping | LockAcquired | CleanupRequested | RequestWithdrawn | Lost

#: The one ping (events are immutable: every idle stream is sent this).
PING = Ping()


def unrendered(event: NoReturn) -> NoReturn:
    """The end of a renderer's ``match``: mypy refuses a call here unless every :data:`Event`
    was matched before it (``typing.assert_never``, which Python 3.10 lacks)."""
    raise AssertionError(f"no rendering of {event!r}")
