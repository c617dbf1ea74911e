"""What one lock object knows (``LockState``, ``Holding``) and the plain decisions about it.

Mutated only by the flows (``_flows``), under the driver's lock; read by the drivers for what
needs no store (``is_current_owner``, ``fencing_token``). No I/O, no clock reads.
"""

from __future__ import annotations

import logging
from typing import Any, Literal, Protocol

import attrs

from prioritylock import _protocol as proto
from prioritylock._errors import LockLost, NotLockOwner
from prioritylock._lease import Lease, Requestor, Terms

__all__ = [
    "LOSS_REASONS",
    "Holding",
    "LockState",
    "LossReason",
    "Released",
    "Seen",
    "SeenCache",
    "Told",
    "Written",
    "believes",
    "cleanup_deadline",
    "expired",
    "guard_failed",
    "heartbeat_tolerance",
    "holder_name",
    "log_lost",
    "mark_lost",
    "raise_if_lost",
    "require_holding",
]

log = logging.getLogger("prioritylock")

#: Why a holding was lost (a heartbeat that can no longer prove ownership says why in words).
LossReason = Literal["expired", "preempted", "overridden", "forced", "superseded"]

#: Reasons a holder loses its lock, by the event that took it.
LOSS_REASONS: dict[str, LossReason] = {
    "expired_takeover": "expired",
    "preempted": "preempted",
    "forceful_takeover": "preempted",
    "handover": "preempted",
    "override": "overridden",
    "force_unlock": "forced",
    # The break-glass event that ended our lease was overwritten before we looked.
    "acquired": "superseded",
    "released": "superseded",
}


@attrs.define  # made on every read and write: see _effects' _message
class Seen:
    """A document as read: the lease (None: absent) and its version."""

    lease: Lease | None
    version: str | None


@attrs.define  # made on every read and write: see _effects' _message
class Written:
    """A write that landed: the lease as written and its new version."""

    lease: Lease
    version: str


@attrs.define  # made on every read and write: see _effects' _message
class Released:
    """A release or handover that landed and is to be announced."""

    lease: Lease
    handed_over: bool


@attrs.frozen
class Told:
    """A request a holder was told of, with the end of its cleanup window (on its clock, and
    as wall-clock seconds)."""

    requestor: Requestor
    deadline: float
    deadline_wall: float


@attrs.define(eq=False)
class Holding:
    """What a lock object knows while it holds the lock."""

    lock_id: str
    lease: Lease
    version: str
    deadline: float
    next_renew: float
    next_watch: float
    entry: Any = None  # the driver's handle on the scheduled heartbeat
    watching: Any = None  # the driver's handle on the notices it hears (``_wake``)
    # A notice says the document may have changed: the heartbeat reads it now, not at
    # next_watch. Set from any thread; a hint only (the read decides).
    poked: bool = False
    lost: str | None = None
    ended: bool = False
    notified: str | None = None  # requestor id whose cleanup we started
    cleaning: bool = False  # a cleanup callback is running
    # The request the holder was told of, until it is handed the lock or withdrawn (then the
    # holder is told that too, once).
    told: Told | None = None
    # Set before the release (or handover) is written: from then on we no longer believe we
    # hold the lock, so nobody can take it while we still do.
    releasing: bool = False
    # When our latest observation that showed no pending request *started*: any request we see
    # later landed after it, so its requestor's wait (counted from after its write returned)
    # ends no sooner than quiet_since + its wait. The cleanup deadline is counted from here.
    quiet_since: float = 0.0
    # The latest request for the lock written by another lock of this process, as its notice
    # said (``_wake.Stamp``): the version the write made, and when it was sent, on our clock.
    # Set from any thread (one assignment); a hint the version check makes sound.
    request_sent: tuple[str, float] | None = None
    request_seen: proto.Sighting | None = None

    @property
    def fence(self) -> int:
        return self.lease.fence

    @property
    def active(self) -> bool:
        return not self.ended and self.lost is None


class SeenCache(Protocol):
    """Where lock objects of a process share what they decoded (``_driver.DecodedCache``):
    given to ``LockState`` by the driver layer, which owns it."""

    def get(self, name: tuple[str, str] | None) -> Seen | None: ...

    def put(self, name: tuple[str, str] | None, seen: Seen) -> None: ...


class LockState:
    """Everything one lock object knows, mutated only by the flows (under the driver's lock).

    :param name: ``(namespace, key)`` naming the document process-wide, or None.
    :param shared: what the lock objects of the process decoded, by ``name`` (``SeenCache``);
        None: nothing shared.
    :param conditional: the store can read "only if changed".
    :param unsynced: the store can skip the sync of a write.
    :param cooperates: the holder has a listener, so a request's cleanup ends in a handover.
    :param boot: the boot of the machine this process runs in (``_reserve.boot_id()``).
    """

    def __init__(
        self,
        key: str,
        cfg: Any,  # LockConfig (not imported: the core does not know the builder's world)
        *,
        name: tuple[str, str] | None,
        conditional: bool,
        unsynced: bool,
        cooperates: bool,
        inline: bool,
        boot: str | None = None,
        shared: SeenCache | None = None,
    ) -> None:
        self.key = key
        self.owner: str = cfg.owner
        self.priority: int = cfg.priority
        self.claim_terms = cfg
        #: Our own fields, written out once for every document we write (``_lease.Terms``).
        self.terms = Terms(
            cfg.owner,
            cfg.message,
            priority=cfg.priority,
            lease_timeout=cfg.lease_timeout,
            cleanup_timeout=cfg.cleanup_timeout,
            forceful=cfg.forceful,
        )
        self.lease_timeout: float = cfg.lease_timeout
        self.renew_interval: float = cfg.renew_interval
        self.watch_interval: float = cfg.watch_interval
        #: How late the heartbeat may run (:func:`heartbeat_tolerance`).
        self.tolerance = heartbeat_tolerance(cfg.watch_interval, cfg.renew_interval)
        self.drift: float = cfg.max_clock_drift
        self.poll_interval: float = cfg.poll_interval
        self.store_timeout: float = cfg.store_timeout
        self.name = name
        self.shared = shared
        self.conditional = conditional
        self.unsynced = unsynced
        self.cooperates = cooperates
        self.inline = inline
        self.boot = boot  # this machine's boot, for fence reservations (``_reserve``)
        self.seen: Seen | None = None
        self.holder_seen: proto.Sighting | None = None
        self.request_seen: proto.Sighting | None = None
        #: When we first saw the lock free in its current free period, and each entry of its
        #: line at its current beat (``_protocol.ahead``).
        self.free_seen: proto.Sighting | None = None
        self.line_seen: dict[str, float] = {}
        #: A blocking ``lock()`` joins the line while it waits (``LockBuilder.fair``).
        self.fair: bool = getattr(cfg, "fair", True)
        self.holding: Holding | None = None
        #: A blocking acquire whose non-forceful request ran out waits on as an ordinary
        #: contender (``lock()``); False: it ends there with ``PreemptionTimeout``, as a
        #: ``try_lock()`` does (``LockBuilder.keep_waiting``).
        self.keep_waiting: bool = cfg.keep_waiting

    def claim(self, lock_id: str, hint: str | None = None) -> proto.Claim:
        cfg = self.claim_terms
        return proto.Claim(  # (positional, in the fields' order: made on every acquire)
            lock_id,
            cfg.owner,
            cfg.message,
            cfg.priority,
            cfg.lease_timeout,
            cfg.cleanup_timeout,
            cfg.waiting_timeout,
            cfg.forceful,
            cfg.if_fence,
            cfg.if_owner,
            self.boot,
            hint,
        )

    def sight(self, lease: Lease | None, now: float) -> None:
        if lease is not None and lease.holder is None and lease.requestor is None:
            # A free lock (the commonest read): no heartbeat, no request to sight.
            self.holder_seen = self.request_seen = None
            self.free_seen = proto.sight(self.free_seen, proto.free_ident(lease), now)
            if lease.line or self.line_seen:  # (no line seen, none now: nothing to sight)
                self.sight_line(lease, now)
            return
        self.holder_seen = proto.sight(self.holder_seen, proto.heartbeat_ident(lease), now)
        self.request_seen = proto.sight(self.request_seen, proto.request_ident(lease), now)
        self.free_seen = proto.sight(self.free_seen, proto.free_ident(lease), now)
        self.sight_line(lease, now)

    def sight_line(self, lease: Lease | None, now: float) -> None:
        if lease is not None and lease.line:
            self.line_seen = proto.sight_line(self.line_seen, lease.line, now)
        elif self.line_seen:
            self.line_seen = {}


# -- plain decisions about a holding (no effects) ------------------------------------------------


def log_lost(state: LockState, holding: Holding, reason: str) -> None:
    """Tell the operator (the ``prioritylock`` logger) that a holding was lost."""
    log.warning(
        "prioritylock: %r lost by %s, fence %d (%s)", state.key, state.owner, holding.fence, reason
    )


def mark_lost(holding: Holding, reason: str, *, force: bool = False) -> bool:
    """Mark a holding lost, once; True when this call marked it (so the holder is told now).
    A holding that ended (released) is not lost, unless ``force`` (a handover after cleanup)."""
    if holding.lost is not None or (holding.ended and not force):
        return False
    holding.lost = reason
    holding.ended = True
    return True


def expired(holding: Holding | None, now: float) -> bool:
    """Whether a believed holding ran past its deadline (the driver then loses it: expired)."""
    return (
        holding is not None and holding.active and not holding.releasing and now >= holding.deadline
    )


def believes(holding: Holding | None, now: float) -> bool:
    """Whether this object holds the lock now, judged on its own clock."""
    return (
        holding is not None and holding.active and not holding.releasing and now < holding.deadline
    )


def raise_if_lost(key: str, holding: Holding) -> None:
    if holding.lost is not None:
        raise LockLost(f"{key!r}: lock lost ({holding.lost})", reason=holding.lost)


def require_holding(key: str, holding: Holding | None) -> Holding:
    """The current holding, or the error saying why there is none.

    :raises LockLost: it was held and lost. :raises NotLockOwner: not held.
    """
    if holding is not None:
        raise_if_lost(key, holding)
    if holding is None or holding.ended:
        raise NotLockOwner(f"{key!r}: this lock object does not hold the lock")
    return holding


def heartbeat_tolerance(watch_interval: float, renew_interval: float) -> float:
    """How late a heartbeat may run so that many leases share wakeups: up to 50 ms (a tenth of
    the shortest interval for short ones). Ownership itself is judged on the clock, so a late
    check can only make a loss known later, never a lease longer."""
    return min(0.05, watch_interval / 10, renew_interval / 10)


def cleanup_deadline(holding: Holding, lease: Lease, version: str | None, drift: float) -> float:
    """When the holder's cleanup window ends, on its own clock: never promise more than the
    requestor will wait, so count from before the request could have landed, less the drift
    allowance for clock rates.

    Before it could have landed: after our last read that showed no request
    (``quiet_since``), or, when ``lease`` is exactly the version a request write of this
    process made (``request_sent``), when that write was sent (``proto.window_start``)."""
    assert lease.requestor is not None and lease.holder is not None
    r = lease.requestor
    window = proto.request_wait(r.waiting_timeout, lease.holder.cleanup_timeout)
    start = proto.window_start(holding.quiet_since, version, holding.request_sent)
    return max(start, start + window - drift)


def holder_name(lease: Lease | None) -> str:
    return repr(lease.holder.owner) if lease is not None and lease.holder is not None else "(none)"


def guard_failed(lease: Lease | None) -> str:
    if lease is None:
        return "the lease does not exist; nothing written"
    owner = repr(lease.holder.owner) if lease.holder is not None else "nobody"
    return f"the lease now shows fence {lease.fence}, held by {owner}; nothing written"
