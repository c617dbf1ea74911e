"""Hudi's table lock as flows: Hudi's rules (``_hudi``) strung into the steps a holder takes.

The same shape as the lease flows (``_flows``), on the same store-access steps (``_flows.now``,
``limit``, ``retrying``, ``Backoff``) and deadlines: a flow yields effects
(:data:`~prioritylock._effects.HudiEffect`) and is sent their results; it does no I/O, never
sleeps and never reads a clock. ``HudiTableLock`` (threads) and ``AsyncHudiTableLock``
(asyncio) drive the very same flows (``_hudi_lock``).

What differs from a lease is Hudi's document: three fields, no nonce and no fence. A write whose
outcome is unknown is settled by reading back and comparing the whole document with what we
wrote (our owner id is a random UUID per lock object, and ``validUntil`` is in milliseconds; a
force unlock writes a ``validUntil`` one millisecond short of the holder's, so that it is never
taken for the holder's own release).
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from prioritylock import _hudi as hudi
from prioritylock._effects import (
    ARM,
    NOW,
    HudiEnded,
    HudiFlow,
    HudiHeld,
    HudiLost,
    HudiUnsettled,
    Pause,
    Put,
    Read,
    Sleep,
)
from prioritylock._errors import (
    ConditionFailed,
    LockCancelled,
    LockLost,
    LockTimeout,
    NotLockOwner,
    StoreUnavailable,
)
from prioritylock._flows import TRY_STORE_TIMEOUT, Backoff, limit, now, retrying

__all__ = [
    "Found",
    "HudiHolding",
    "HudiState",
    "acquire",
    "background_settle",
    "beat",
    "force_unlock",
    "read",
    "release",
    "renew",
    "settle",
]

log = logging.getLogger("prioritylock")


def ms(seconds: float) -> int:
    return int(seconds * 1000)


@attrs.frozen
class Found:
    """Hudi's document as read: its data and the store's version token."""

    data: hudi.HudiLockData
    version: str


@attrs.define(eq=False)
class HudiHolding:
    """What a Hudi table lock knows while it holds the lock."""

    data: hudi.HudiLockData
    version: str
    #: Monotonic: the holder stops believing it holds the lock from here on (``validity -
    #: drift`` after the start of its last write that landed).
    deadline: float
    next_renew: float
    entry: Any = None  # the driver's handle on the scheduled renewals
    watching: Any = None  # the driver's handle on the notices it hears (``_wake``)
    #: A notice says the document may have changed: the next renewal task reads it now.
    poked: bool = False
    lost: str | None = None
    ended: bool = False
    #: Set before the release is written: from then on we no longer believe we hold the lock.
    releasing: bool = False
    #: A renewal whose outcome is unknown (the store failed before it could be read back):
    #: found in the document later, it is ours.
    unsure: hudi.HudiLockData | None = None

    @property
    def active(self) -> bool:
        return not self.ended and self.lost is None

    def believes(self, mono: float) -> bool:
        return self.active and not self.releasing and mono < self.deadline


@attrs.define(eq=False)
class HudiState:
    """Everything a Hudi table lock object knows, mutated only by the flows (under the driver's
    guard); the timings in seconds."""

    key: str
    owner_id: str
    validity: float
    renew_interval: float
    drift: float
    poll_interval: float
    store_timeout: float
    holding: HudiHolding | None = None
    #: Why the last holding was lost, until ``unlock()`` reports it.
    lost: str = ""

    def require_holding(self) -> HudiHolding:
        """:raises LockLost: held and lost. :raises NotLockOwner: not held."""
        holding = self.holding
        if holding is not None and holding.lost is not None:
            raise LockLost(f"{self.key}: the lock was lost ({holding.lost})", reason=holding.lost)
        if holding is None or holding.ended:
            if self.lost:
                raise LockLost(f"{self.key}: the lock was lost ({self.lost})", reason=self.lost)
            raise NotLockOwner(f"{self.key}: this lock object does not hold the lock")
        return holding


# -- store access --------------------------------------------------------------------------------


def read(state: HudiState, deadline: float, bound: float | None = None) -> HudiFlow[Found | None]:
    """Read and decode Hudi's document, retrying transient failures until ``deadline``.

    :raises CorruptLease: not a Hudi lock document.
    """
    found = yield from retrying(state, Read(None), deadline, bound)
    return None if found is None else Found(hudi.decode(found.data, key=state.key), found.version)


def write(
    state: HudiState,
    wanted: hudi.HudiLockData,
    version: str | None,
    *,
    deadline: float,
    bound: float | None = None,
    quiet: bool = False,
) -> HudiFlow[str | Found | None]:
    """Write ``wanted`` conditionally (create when ``version`` is None, else ``If-Match`` it).
    Returns the new version, or what is there instead (None: absent). Transient failures are
    retried until ``deadline``; a write whose outcome is unknown (a lost response, a 412 that
    may answer an SDK's retry of a write that landed) is settled by reading back."""
    data = hudi.encode(wanted)
    backoff = Backoff(1.0, start=0.02)
    by = deadline if bound is None else bound
    while True:
        try:
            landed: str = yield Put(data, version, version is None, False, quiet=quiet, by=by)
            return landed
        except ConditionFailed:
            found = yield from read(state, deadline, by)
            return found.version if found is not None and found.data == wanted else found
        except StoreUnavailable:
            mono = yield from now()
            if mono >= deadline:
                raise
            yield Sleep(min(backoff.next(), max(0.0, deadline - mono)))
            found = yield from read(state, deadline, by)
            if found is not None and found.data == wanted:
                return found.version
            if (found.version if found is not None else None) != version:
                return found  # it changed: not ours. Unchanged: it did not land; try again


def lost_to(state: HudiState, found: Found | None) -> str:
    """Why a holder whose write was refused lost the lock, by what the document shows."""
    if found is not None and found.data.owner == state.owner_id and found.data.expired:
        return "forced"  # an operator's force unlock: our owner, marked released
    return "acquired by others"


# -- acquiring -----------------------------------------------------------------------------------


def acquire(state: HudiState, *, blocking: bool, deadline: float | None) -> HudiFlow[bool]:
    """Take the lock when Hudi's rule says it is free (``blocking``: wait until ``deadline``,
    backed off as a lease's waiter, woken early by a notice). True once we hold it.

    Deadlines as a lease's acquire (``_flows.acquire``): every store operation ends by the
    store timeout from its start or by ``deadline``, whichever comes first; a try_lock stops
    retrying after ``TRY_STORE_TIMEOUT``. A store that fails up to the caller's deadline ends
    the acquire with ``LockTimeout`` (its cause the last ``StoreUnavailable``). A claim whose
    write may have landed unseen is taken back in the background (:class:`HudiUnsettled`).

    :raises LockCancelled: the driver ended the wait.
    :raises CorruptLease: the document is not Hudi's (left untouched).
    :raises LockTimeout: the store could not be reached before ``deadline``.
    :raises StoreUnavailable: the store failed for a whole store timeout.
    """
    timeout = state.store_timeout if blocking else min(state.store_timeout, TRY_STORE_TIMEOUT)
    delay = Backoff(state.poll_interval)
    touched = False
    try:
        if blocking:
            yield ARM  # woken by a release that lands after our read
        while True:
            mono = yield from now()
            until, bound = limit(state, mono, deadline, timeout), limit(state, mono, deadline)
            found = yield from read(state, until, bound)
            started, wall = yield NOW
            if found is None or hudi.is_free(found.data, ms(wall), ms(state.drift)):
                wanted = hudi.acquired(state.owner_id, ms(wall), ms(state.validity))
                touched = True
                prior = None if found is None else found.version
                result = yield from write(state, wanted, prior, deadline=until, bound=bound)
                if isinstance(result, str):
                    yield from become_holder(state, wanted, result, started)
                    return True
                found = result  # lost a race: wait on what won it
            if not blocking:
                return False
            mono = yield from now()
            if deadline is not None and mono >= deadline:
                return False
            pause = delay.next()
            if found is not None:  # no longer than until Hudi's rule frees it
                pause = min(pause, hudi.time_left_ms(found.data, ms(wall), ms(state.drift)) / 1000)
            if deadline is not None:
                pause = min(pause, deadline - mono)
            if (yield Pause(max(0.0, pause))):
                raise LockCancelled(f"{state.key}: the wait for the lock was cancelled")
    except StoreUnavailable as exc:
        if touched:
            yield HudiUnsettled()
        if deadline is None or (yield from now()) < deadline:
            raise
        raise LockTimeout(
            f"{state.key}: not acquired by the deadline: the store could not be reached ({exc})"
        ) from exc


def become_holder(
    state: HudiState, data: hudi.HudiLockData, version: str, started: float
) -> HudiFlow[HudiHolding]:
    holding = HudiHolding(
        data,
        version,
        deadline=started + state.validity - state.drift,
        next_renew=started + state.renew_interval,
    )
    state.holding, state.lost = holding, ""
    log.info("hudi lock %s taken by %s", state.key, state.owner_id)
    yield HudiHeld(holding.next_renew)
    return holding


# -- holding -------------------------------------------------------------------------------------


def renew(state: HudiState, holding: HudiHolding) -> HudiFlow[None]:
    """Extend the lease: one conditional write of a fresh ``validUntil``, retried until the
    store timeout (or the holder's deadline, if sooner).

    :raises LockLost: it was taken by others or forced free (or expired) since our last write.
    :raises StoreUnavailable: the write failed past the store timeout.
    """
    for _ in range(2):  # twice only when a renewal of unknown outcome turns out to have landed
        started, wall = yield NOW
        if started >= holding.deadline:
            yield HudiLost("expired")
            state.require_holding()
        wanted = hudi.renewed(holding.data, ms(wall), ms(state.validity))
        until = min(started + state.store_timeout, holding.deadline)
        try:
            result = yield from write(state, wanted, holding.version, deadline=until, quiet=True)
        except StoreUnavailable:
            holding.unsure = wanted
            raise
        if isinstance(result, str):
            holding.data, holding.version, holding.unsure = wanted, result, None
            holding.deadline = started + state.validity - state.drift
            holding.next_renew = started + state.renew_interval
            return
        if not (yield from examine(state, holding, result)):
            state.require_holding()
    return


def examine(state: HudiState, holding: HudiHolding, found: Found | None) -> HudiFlow[bool]:
    """A read (or a refused write's read-back) as holder: still ours? True while we hold it."""
    if found is not None and found.version == holding.version:
        return True
    if found is not None and holding.unsure is not None and found.data == holding.unsure:
        # A renewal we could not confirm landed after all: its version is ours (its deadline is
        # not: it is counted from a start we can't be sure of).
        holding.data, holding.version, holding.unsure = found.data, found.version, None
        return True
    yield HudiLost(lost_to(state, found))
    return False


def watch(state: HudiState, holding: HudiHolding) -> HudiFlow[None]:
    """A notice says the document may have changed: read it now (not at the next renewal)."""
    holding.poked = False
    mono = yield from now()
    found = yield from read(state, min(mono + state.store_timeout, holding.deadline))
    yield from examine(state, holding, found)


def beat(state: HudiState, holding: HudiHolding) -> HudiFlow[float | None]:
    """The renewal task of one holding: renew when due, read when a notice says so. Returns
    when to run next, or None once the holding is over."""
    if holding.ended or holding.lost is not None or holding.releasing:
        return None
    if state.holding is not holding:
        return None
    mono = yield from now()
    if mono >= holding.deadline:
        yield HudiLost("expired")
        return None
    try:
        if mono >= holding.next_renew:
            yield from renew(state, holding)
        elif holding.poked:
            yield from watch(state, holding)
    except (LockLost, NotLockOwner):
        return None
    except StoreUnavailable as exc:  # retry sooner; the deadline ends it
        log.warning("hudi lock %s: renewal failed, retrying: %s", state.key, exc)
        mono = yield from now()
        return min(holding.deadline, mono + min(state.renew_interval, 1.0))
    except Exception as exc:  # a corrupt document, a credential problem: can't prove ownership
        log.error("hudi lock %s: renewals cannot go on: %s", state.key, exc)
        yield HudiLost(f"heartbeat failed: {exc}")
        return None
    if not holding.active:
        return None
    return mono if holding.poked else min(holding.next_renew, holding.deadline)


def release(state: HudiState) -> HudiFlow[None]:
    """Write ``expired: true`` over the holder's version.

    :raises NotLockOwner: not held. :raises LockLost: lost before the release (nothing
        written), or taken by others or forced free since our last write.
    :raises StoreUnavailable: the release could not land within the store timeout; it is
        retried in the background (:class:`HudiUnsettled`) until it lands or is moot.
    """
    holding = state.require_holding()
    mono = yield from now()
    if mono >= holding.deadline:
        yield HudiLost("expired")
        state.require_holding()
    done = hudi.released(holding.data)
    holding.releasing = True  # we no longer believe we hold it: stop renewing before writing
    yield HudiEnded()
    try:
        result = yield from write(state, done, holding.version, deadline=mono + state.store_timeout)
    except StoreUnavailable:
        holding.ended = True
        yield HudiUnsettled()
        raise
    if isinstance(result, str):
        holding.ended = True
        log.info("hudi lock %s released by %s", state.key, state.owner_id)
        return
    yield from examine(state, holding, result)
    state.require_holding()
    # Refused, yet the document shows our version: the store contradicts itself. Not held.
    holding.ended = True
    raise StoreUnavailable(f"{state.key}: the release was refused over an unchanged version")


def settle(state: HudiState) -> HudiFlow[None]:
    """Take back what a write of ours may have left in the document when this object holds
    nothing: an acquire that ended without the lock after a write of unknown outcome, or a
    release that did not land. Any unexpired document with our owner id is such a leftover
    (the id is this object's own), released over the version read."""
    holding = state.holding
    if holding is not None and holding.active:
        return  # held again since: nothing is left over
    mono = yield from now()
    deadline = mono + state.store_timeout
    found = yield from read(state, deadline)
    if found is None or found.data.owner != state.owner_id or found.data.expired:
        return
    result = yield from write(state, hudi.released(found.data), found.version, deadline=deadline)
    if isinstance(result, str):
        log.info("hudi lock %s: a claim left by %s was taken back", state.key, state.owner_id)


def background_settle(state: HudiState, until: float) -> HudiFlow[float | None]:
    """One attempt of :func:`settle`. Returns when to try again, or None when done; gives up
    at ``until`` (by then a claim nobody renews has lapsed by Hudi's rule)."""
    try:
        yield from settle(state)
        return None
    except StoreUnavailable as exc:
        mono = yield from now()
        if mono >= until:
            log.warning("hudi lock %s: gave up taking back a claim: %s", state.key, exc)
            return None
        return min(until, mono + 1.0)
    except Exception:
        log.exception("hudi lock %s: taking back a claim gave up", state.key)
        return None


# -- operators -----------------------------------------------------------------------------------


def force_unlock(
    state: HudiState, *, if_owner: str, if_valid_until_ms: int
) -> HudiFlow[tuple[hudi.HudiLockData, str]]:
    """Mark the lock released whoever holds it, only while it shows what the operator saw: one
    read, one conditional write over the version read. Returns what was written and its
    version.

    :raises ConditionFailed: absent, or showing another owner or ``validUntil``, or changed
        between the read and the write (nothing written).
    """
    mono = yield from now()
    deadline = mono + state.store_timeout
    found = yield from read(state, deadline)
    if found is None:
        raise ConditionFailed(state.key, "no lock document")
    data = found.data
    if data.owner != if_owner or data.valid_until_ms != if_valid_until_ms:
        raise ConditionFailed(
            state.key, f"the lock now shows owner {data.owner}, validUntil {data.valid_until_ms}"
        )
    written = hudi.forced(data)
    result = yield from write(state, written, found.version, deadline=deadline)
    if not isinstance(result, str):
        raise ConditionFailed(state.key, "the lock changed between the read and the write")
    return written, result
