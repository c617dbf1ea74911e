"""Fence reservations: how a store on one machine's disk skips the sync on most acquisitions.

A ``LocalStore`` write that is synced costs an ``fdatasync`` (100 µs on a fast disk, 4 ms on a
virtual one: many times the rest of an acquire+release cycle). Writes that keep the fence
(renew, release, request) never needed it: lost to a power loss, they leave the lease as it was,
at the same fence. A write that *raises* the fence is different: lost, it would let the next
holder after the reboot get a fence a holder before it already used. Fences must only grow, so
those writes were all synced.

A reservation makes most of them safe to leave unsynced. A synced raise also records
``reserve = (fence + RESERVE_BLOCK, boot)``: the fences up to ``reserve.fence`` may be handed out
by unsynced writes *during this boot of the machine* (the Linux boot id). Then:

- An acquisition whose new fence is within a reservation made in the current boot writes
  unsynced. Every process on the machine sees the page cache, so within one boot nothing is lost.
- After a crash, the document may have lost any unsynced writes since its last synced one, but
  that synced write carries the reservation (later writes copy it), so no fence handed out
  before the crash is above it. A document whose reservation is from another boot therefore gets
  its next fence above both its fence and its reservation (:func:`next_fence`), written synced
  with a fresh reservation. Fences jump by at most ``RESERVE_BLOCK`` per reboot.
- A synced write that keeps the fence never turns an old boot's reservation into a current
  one: that would let fences the old boot may have used be handed out again.
- Break-glass writes (force unlock, override, forceful takeover) are always synced, so their
  record survives a power loss.

Stores without unsynced writes (memory, the cloud stores) never carry a reservation, and
``next_fence`` is then ``fence + 1``. On a system without a boot id every raise is synced.
"""

from __future__ import annotations

from prioritylock._lease import Lease, Reserve

__all__ = ["RESERVE_BLOCK", "boot_id", "next_fence", "plan_write"]

#: Fences one synced raise reserves for unsynced ones: one fdatasync per this many acquisitions.
#: At 128, a 4 ms fdatasync (a virtual disk) added 31 µs to every cycle on average; fences may
#: jump by this much per reboot, which costs nothing (they go up to 2**63 - 1).
RESERVE_BLOCK = 1024

#: Events whose record must survive a power loss: their writes are always synced.
_BREAK_GLASS = frozenset({"force_unlock", "override", "forceful_takeover"})


def _read_boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            value = f.read().strip()
    except OSError:
        return None
    return value if 0 < len(value) <= 64 else None


# Read once: a process never outlives its machine's boot (tests replace it to model a reboot).
_boot: str | None = _read_boot_id()


def boot_id() -> str | None:
    """This boot of the machine (Linux: ``/proc/sys/kernel/random/boot_id``), or None. Read by
    the drivers when they make a lock object; the rules below are given it."""
    return _boot


def next_fence(lease: Lease, boot: str | None) -> int:
    """The fence the next holder (or a force unlock) gets: above every fence already used.

    :param boot: the boot of the machine the writer runs in (None: unknown).
    """
    reserve = lease.reserve
    if reserve is None or (reserve.boot == boot and boot is not None):
        return lease.fence + 1
    # Written before the last reboot: unsynced raises up to the reservation may have been lost.
    return max(lease.fence, reserve.fence) + 1


def plan_write(lease: Lease, base: Lease | None, boot: str | None) -> tuple[Lease, bool]:
    """How to write ``lease`` on a store that can skip the sync: (what to write, unsynced?).

    :param base: the document being replaced, when the lock knows it is exactly that version;
        None when it is being created or the lock is unsure.
    :param boot: the boot of the machine the writer runs in (None: unknown, every raise synced).
    """
    carried = lease.reserve  # copied from the document the new lease was derived from
    # (The same object, mostly: ``is`` first spares attrs' ``__eq__`` on every write.)
    if base is not None and (carried is base.reserve or carried == base.reserve):
        if lease.fence == base.fence:
            return lease, True  # renew, release, request: nothing to lose
        if (
            carried is not None
            and boot is not None
            and carried.boot == boot
            and base.fence < lease.fence <= carried.fence
            and (lease.event is None or lease.event.kind not in _BREAK_GLASS)
        ):
            return lease, True  # within this boot's reservation
    if boot is None or (carried is not None and lease.fence <= carried.fence):
        # Within this boot's reservation, nothing to add; within an old boot's, the write keeps
        # an old fence (a raise would have gone past it: next_fence), so keep the old one too.
        return lease, False
    # Synced, and past the reservation (or none yet): reserve the next block of fences.
    return lease.with_reserve(Reserve(lease.fence + RESERVE_BLOCK, boot)), False
