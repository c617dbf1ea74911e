"""Preemption: a higher-priority job asks, the low-priority holder rolls back, the lock passes on.

Shows: a low-priority holder whose ``LockListener.on_cleanup_notification`` rolls back its
unfinished work; a higher-priority requestor whose ``try_lock()`` records its request and waits
for the handover; the ``cleanup_requested`` and ``lock_lost`` signals the holder's lock sends;
the new holder's fencing token (the old one + 1); and ``LockLost`` for the old holder afterwards.

Run: ``python examples/preemption.py [STORE_URL]`` (default: a fresh temporary directory).
"""

from __future__ import annotations

import sys
import tempfile
import threading
from typing import Any

from prioritylock import CleanupNotice, Lock, LockBuilder, LockListener, LockLost, signals


class BatchJob(LockListener):
    """A job that writes in steps and can undo the steps it has not committed."""

    def __init__(self) -> None:
        self.uncommitted: list[str] = []

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        # Runs on a library thread; when it returns, the lock passes to the requestor.
        print(
            f"  batch: {notice.requestor_owner!r} (priority {notice.requestor_priority}) asks "
            f"for the lock: {notice.requestor_message!r}"
        )
        left = notice.seconds_left()
        steps = len(self.uncommitted)
        print(f"  batch: rolling back {steps} uncommitted steps ({left:.0f} s left)")
        self.uncommitted.clear()


def run(url: str) -> None:
    job = BatchJob()
    batch = (
        LockBuilder()
        .store(url)
        .path("warehouse/compaction")
        .owner("batch")
        .message("hourly compaction")
        .priority(1)
        .cleanup_timeout(10)  # up to 10 s to roll back when preempted
        # No watch_interval: a request from this process (or, on a local directory, another
        # process of this machine) is heard at once; across hosts, within the watch interval.
        .listener(job)
        .build()
    )
    urgent = (
        LockBuilder()
        .store(url)
        .path("warehouse/compaction")
        .owner("urgent")
        .message("repair a corrupt partition")
        .priority(10)
        .waiting_timeout(30)
        .build()
    )

    heard: list[str] = []
    lost = threading.Event()

    def on_cleanup_requested(sender: Lock, **kwargs: Any) -> None:
        heard.append(f"cleanup_requested (by {kwargs['notice'].requestor_owner!r})")

    def on_lock_lost(sender: Lock, **kwargs: Any) -> None:
        heard.append(f"lock_lost (reason {kwargs['reason']!r})")
        lost.set()

    # weak=False: blinker's weak default would drop these local functions.
    signals.cleanup_requested.connect(on_cleanup_requested, sender=batch, weak=False)
    signals.lock_lost.connect(on_lock_lost, sender=batch, weak=False)

    batch.lock()
    old_fence = batch.fencing_token
    job.uncommitted += ["step 1", "step 2", "step 3"]
    print(f"batch (priority 1) holds the lock, fence {old_fence}")

    print("urgent (priority 10) calls try_lock(); it waits for batch's cleanup")
    acquired = urgent.try_lock()
    print(f"urgent try_lock() -> {acquired}, fence {old_fence} -> {urgent.fencing_token}")

    lost.wait(5)  # the signal is delivered on the library's notifier thread
    for line in heard:
        print(f"signal to batch's lock: {line}")
    info = urgent.info()
    assert info is not None
    print(f"lease: held by {info.owner!r}, fence {info.fence}, last event {info.last_event!r}")
    print(f"batch is_current_owner() -> {batch.is_current_owner()}")
    try:
        batch.unlock()
    except LockLost as exc:
        print(f"batch unlock() -> LockLost (reason {exc.reason!r})")

    urgent.unlock()
    signals.cleanup_requested.disconnect(on_cleanup_requested, sender=batch)
    signals.lock_lost.disconnect(on_lock_lost, sender=batch)
    batch.close()
    urgent.close()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="prioritylock-example-") as tmp:
        run(argv[1] if len(argv) > 1 else f"file://{tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
