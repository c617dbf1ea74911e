"""LockListener (Helix's listener, with the calls a holder and a requestor need) and the notices."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeAlias

import attrs

if TYPE_CHECKING:
    from prioritylock._info import LockInfo

#: The lock a listener is called with: a :class:`~prioritylock.Lock` or an
#: :class:`~prioritylock.AsyncLock`. ``Any``, so that listeners written for either (annotated
#: ``lock: Lock``, say) stay valid overrides.
AnyLock: TypeAlias = Any

__all__ = ["CleanupNotice", "LockListener"]


@attrs.frozen
class CleanupNotice:
    """A higher-priority client asks the holder to clean up and hand over.

    :ivar lock: the :class:`~prioritylock.Lock` or :class:`~prioritylock.AsyncLock` asked.
    :ivar deadline: the end of the cleanup window on the lock's clock (``lock.config.clock``;
        :meth:`seconds_left` does the arithmetic). It is counted from before the request could
        have landed, so the requestor waits at least this long.
    :ivar deadline_wall: the same moment as wall-clock seconds, for display.
    """

    lock: AnyLock
    requestor_owner: str
    requestor_priority: int
    requestor_message: str
    forceful: bool
    deadline: float
    deadline_wall: float

    def seconds_left(self) -> float:
        """How much of the cleanup window is left now (may be negative)."""
        return self.deadline - float(self.lock.config.clock.monotonic())


class LockListener:
    """Subclass and override what you need; every method does nothing by default.

    ``on_acquired`` runs on the thread that called ``lock``/``try_lock``, ``on_released`` on the
    one that called ``unlock`` (or on the cleanup thread after a cleanup); the others on the
    library's own threads. None runs while the library holds its
    internal locks. An exception raised here is logged and otherwise ignored.

    With :class:`~prioritylock.AsyncLock`, any method may be ``async def``: it is awaited on the
    lock's event loop (an async cleanup returning hands the lock over, like a plain one); a plain
    ``on_cleanup_notification`` then runs on a worker thread, the others on the loop. A
    cancelled async cleanup does not hand over: the lock stays held until it is unlocked or a
    forceful requestor takes it.

    A configured listener opts the holder into cooperative preemption: when
    :meth:`on_cleanup_notification` returns, the lock passes to the requestor. Without a listener,
    the holder keeps the lock until it unlocks or a forceful requestor takes it.
    """

    def on_acquired(self, lock: AnyLock, info: LockInfo) -> Awaitable[None] | None:
        """This lock object now holds the lock."""

    def on_released(self, lock: AnyLock) -> Awaitable[None] | None:
        """This lock object released the lock (or handed it over)."""

    def on_lock_lost(self, lock: AnyLock, reason: str) -> Awaitable[None] | None:
        """This lock object lost the lock; called once per holding."""

    def on_cleanup_notification(self, notice: CleanupNotice) -> Awaitable[None] | None:
        """Clean up before ``notice.deadline``; return when done and the lock passes on."""

    def on_request_withdrawn(self, notice: CleanupNotice) -> Awaitable[None] | None:
        """The request ``notice`` told of was withdrawn (its requestor's wait ran out) and this
        object still holds the lock. Comes after :meth:`on_cleanup_notification` was called
        for it, once; a cleanup still running goes on, and releases the lock when it returns."""

    def on_denied(self, lock: AnyLock, info: LockInfo | None) -> Awaitable[None] | None:
        """Our pending preemption request was displaced by a higher one."""
