"""Blinker signals sent by every lock in this process.

Connect with ``weak=False`` (blinker's weak default silently drops closures)::

    from prioritylock import signals

    @signals.lock_lost.connect_via(signals.ANY, weak=False)   # or .connect(fn, weak=False)
    def on_lost(lock, info, reason): ...

Every signal's sender is the :class:`~prioritylock.Lock` (or ``AsyncLock``); keyword arguments
are listed per signal. Hudi's table locks (``HudiTableLock``, ``AsyncHudiTableLock``) send
``lock_lost`` only, its ``info`` a ``HudiLockInfo``. Receivers run outside the library's
internal locks; one that raises is logged and never stops the heartbeat.
"""

from __future__ import annotations

from blinker import ANY, Namespace

__all__ = [
    "ANY",
    "acquired",
    "cleanup_requested",
    "denied",
    "lock_lost",
    "released",
    "renewed",
    "request_withdrawn",
]

_ns = Namespace()

#: The lock was acquired. kwargs: ``info`` (LockInfo), ``fence`` (int).
acquired = _ns.signal("acquired")
#: The lock was released by its holder (or handed over). kwargs: ``info``, ``handed_over`` (bool).
released = _ns.signal("released")
#: The holder's lease was renewed. kwargs: ``fence``.
renewed = _ns.signal("renewed")
#: The holder lost the lock: expired, preempted, forcefully taken, overridden, forced free,
#: or renewals failed past the deadline. Sent once per holding. kwargs: ``reason`` (str), ``info``.
lock_lost = _ns.signal("lock_lost")
#: A higher-priority request asks the holder to clean up. kwargs: ``notice`` (CleanupNotice).
cleanup_requested = _ns.signal("cleanup_requested")
#: The request the holder was told of (``cleanup_requested``) was withdrawn, its requestor's
#: wait over; the holder keeps the lock. kwargs: ``notice`` (the CleanupNotice it was sent).
request_withdrawn = _ns.signal("request_withdrawn")
#: Our pending request was displaced by a higher one. kwargs: ``info``.
denied = _ns.signal("denied")
