"""LockListener (Helix's listener, with the calls a holder and a requestor need) and the notices."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

if TYPE_CHECKING:
    from prioritylock._info import LockInfo
    from prioritylock._lock import Lock

__all__ = ["CleanupNotice", "LockListener"]


@attrs.frozen
class CleanupNotice:
    """A higher-priority client asks the holder to clean up and hand over.

    :ivar deadline: the end of the cleanup window on the lock's clock (``lock.config.clock``;
        :meth:`seconds_left` does the arithmetic). It is counted from before the request could
        have landed, so the requestor waits at least this long.
    :ivar deadline_wall: the same moment as wall-clock seconds, for display.
    """

    lock: Lock
    requestor_owner: str
    requestor_priority: int
    requestor_message: str
    forceful: bool
    deadline: float
    deadline_wall: float

    def seconds_left(self) -> float:
        """How much of the cleanup window is left now (may be negative)."""
        return self.deadline - self.lock.config.clock.monotonic()


class LockListener:
    """Subclass and override what you need; every method does nothing by default.

    ``on_acquired`` runs on the thread that called ``lock``/``try_lock``, ``on_released`` on the
    one that called ``unlock`` (or on the cleanup thread after a cleanup); the others on the
    library's own threads. None runs while the library holds its
    internal locks. An exception raised here is logged and otherwise ignored.

    A configured listener opts the holder into cooperative preemption: when
    :meth:`on_cleanup_notification` returns, the lock passes to the requestor. Without a listener,
    the holder keeps the lock until it unlocks or a forceful requestor takes it.
    """

    def on_acquired(self, lock: Lock, info: LockInfo) -> None:
        """This lock object now holds the lock."""

    def on_released(self, lock: Lock) -> None:
        """This lock object released the lock (or handed it over)."""

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        """This lock object lost the lock; called once per holding."""

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        """Clean up before ``notice.deadline``; return when done and the lock passes on."""

    def on_denied(self, lock: Lock, info: LockInfo | None) -> None:
        """Our pending preemption request was displaced by a higher one."""
