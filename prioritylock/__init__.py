"""prioritylock: distributed locks with priorities and preemption, leased in object stores.

One small JSON lease document per lock, changed only by create-if-absent and compare-and-swap
on the store's version token; no lock server. Start with :class:`LockBuilder`.
"""

import logging

from prioritylock._alock import AsyncLock
from prioritylock._ascheduler import AsyncScheduler
from prioritylock._builder import HudiTableBuilder, LockBuilder
from prioritylock._clock import Clock, FakeClock, SystemClock
from prioritylock._config import LockConfig
from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    CorruptLease,
    LockCancelled,
    LockHeld,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    PriorityLockError,
    ServiceError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock._hints import HintStats, configure_hints, hint_stats
from prioritylock._hudi_lock import AsyncHudiTableLock, HudiLockInfo, HudiTableLock
from prioritylock._info import LockInfo, Waiter
from prioritylock._lease import MAX_PRIORITY, OVERRIDE_PRIORITY
from prioritylock._listener import CleanupNotice, LockListener
from prioritylock._lock import Lock
from prioritylock._public import publish
from prioritylock._scheduler import Heartbeat, Scheduler

__version__ = "0.1.0"

# A library logs; the application decides where logs go.
logging.getLogger("prioritylock").addHandler(logging.NullHandler())

__all__ = [
    "AsyncHudiTableLock",
    "AsyncLock",
    "AsyncScheduler",
    "CleanupNotice",
    "Clock",
    "ConditionFailed",
    "ConfigError",
    "CorruptLease",
    "FakeClock",
    "Heartbeat",
    "HintStats",
    "HudiLockInfo",
    "HudiTableBuilder",
    "HudiTableLock",
    "Lock",
    "LockBuilder",
    "LockCancelled",
    "LockConfig",
    "LockHeld",
    "LockInfo",
    "LockListener",
    "LockLost",
    "LockTimeout",
    "MAX_PRIORITY",
    "NotLockOwner",
    "OVERRIDE_PRIORITY",
    "PreemptionTimeout",
    "PriorityLockError",
    "Scheduler",
    "ServiceError",
    "StoreAccessError",
    "StoreError",
    "StoreUnavailable",
    "SystemClock",
    "Waiter",
    "__version__",
    "configure_hints",
    "hint_stats",
]

publish(__name__, globals(), __all__)
