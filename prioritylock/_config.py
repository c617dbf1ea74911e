"""LockConfig: everything a lock needs, validated and frozen (built by ``LockBuilder``)."""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING

import attrs

from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._lease import OVERRIDE_PRIORITY
from prioritylock._listener import LockListener
from prioritylock.stores._base import ObjectStore
from scopes import LockScope

if TYPE_CHECKING:
    from prioritylock._scheduler import Scheduler

__all__ = [
    "DEFAULT_CLEANUP_TIMEOUT",
    "DEFAULT_LEASE_TIMEOUT",
    "DEFAULT_MAX_CLOCK_DRIFT",
    "DEFAULT_POLL_INTERVAL",
    "DEFAULT_STORE_TIMEOUT",
    "DEFAULT_WAITING_TIMEOUT",
    "MIN_WATCH_INTERVAL",
    "LockConfig",
    "default_owner",
    "default_watch_interval",
]

DEFAULT_LEASE_TIMEOUT = 30.0
DEFAULT_CLEANUP_TIMEOUT = 10.0
DEFAULT_WAITING_TIMEOUT = 30.0
DEFAULT_MAX_CLOCK_DRIFT = 0.5
DEFAULT_POLL_INTERVAL = 1.0
DEFAULT_STORE_TIMEOUT = 10.0
MIN_WATCH_INTERVAL = 0.01


def default_watch_interval(renew: float, cleanup: float, drift: float) -> float:
    """How often a holder reads its lease unless told otherwise: often enough that a request
    written just after one of its reads is read while the cleanup window it is owed is open.

    That window is counted from the start of the holder's last read that showed no request and
    lasts the cleanup timeout less the drift allowance (``_state.cleanup_deadline``); a read
    that finds the request later tells the holder nothing. A watch interval of at most two
    thirds of it leaves a third for the reads themselves and a busy machine's scheduling (half
    the window, the rule before, left nothing when the window was as short as the interval:
    a 1 s cleanup with the default 0.5 s drift). Never longer than the renew interval or half
    the cleanup timeout (so the defaults, 10 s and 10 s, give 5 s: a watch between renewals).
    An empty window (``cleanup <= drift``: no request from another process can be announced)
    keeps the rule without the drift; no cleanup window at all, the renew interval.
    """
    if cleanup <= 0:
        watch = renew
    elif cleanup <= drift:
        watch = min(renew, cleanup / 2)
    else:
        watch = min(renew, cleanup / 2, (cleanup - drift) * 2 / 3)
    return max(MIN_WATCH_INTERVAL, watch)


def default_owner() -> str:
    """``user@host:pid``: a readable default owner id."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "unknown"
    return f"{user}@{socket.gethostname()}:{os.getpid()}"


@attrs.frozen
class LockConfig:
    """Everything a Lock needs, validated. Change a copy with ``attrs.evolve``."""

    store: ObjectStore
    scope: LockScope
    owner: str
    message: str = ""
    priority: int = 0
    lease_timeout: float = DEFAULT_LEASE_TIMEOUT
    cleanup_timeout: float = DEFAULT_CLEANUP_TIMEOUT
    waiting_timeout: float = DEFAULT_WAITING_TIMEOUT
    forceful: bool = False
    keep_waiting: bool = True  # a blocking lock() waits on after its request ran out
    fair: bool = True  # a blocking lock() joins the lock's line while it waits
    listener: LockListener | None = None
    renew_interval: float = DEFAULT_LEASE_TIMEOUT / 3
    watch_interval: float = DEFAULT_LEASE_TIMEOUT / 3
    max_clock_drift: float = DEFAULT_MAX_CLOCK_DRIFT
    poll_interval: float = DEFAULT_POLL_INTERVAL
    store_timeout: float = DEFAULT_STORE_TIMEOUT
    #: The operator's guard of an emergency override: act only while the lease shows these.
    if_fence: int | None = None
    if_owner: str | None = None
    clock: Clock = SYSTEM_CLOCK
    heartbeat: Scheduler | None = None

    @property
    def key(self) -> str:
        """The store key of the lease document."""
        return self.scope.key

    @property
    def override(self) -> bool:
        return self.priority == OVERRIDE_PRIORITY
