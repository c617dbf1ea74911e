"""The demo behind ``./scripts/demo``: contention, then preemption, on the local-directory store.

Run ``python -m prioritylock._demo [DIRECTORY]`` (default: a fresh temporary directory).

The listener's lines come from the heartbeat's thread: every line goes out through :func:`_say`,
whole, under one lock, so lines of two threads never run into each other.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

from prioritylock._builder import LockBuilder
from prioritylock._info import LockInfo
from prioritylock._listener import CleanupNotice, LockListener
from prioritylock._lock import Lock

__all__ = ["main"]

_OUTPUT = threading.Lock()


def _say(line: str = "") -> None:
    """Print one whole line (text and newline in one write), whichever thread calls."""
    with _OUTPUT:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def _show(label: str, info: LockInfo | None) -> None:
    if info is None:
        _say(f"  [{label}] no lease document yet")
        return
    holder = f"held by {info.owner!r} (priority {info.priority})" if info.held else "free"
    line = f"  [{label}] fence={info.fence} {holder}; last event: {info.last_event}"
    if info.requestor_owner:
        line += (
            f"; pending request from {info.requestor_owner!r} (priority {info.requestor_priority})"
        )
    _say(line)


def _contention(url: str) -> None:
    _say("1. Two clients contend for one lock")
    first = (
        LockBuilder().store(url).path("demo", "nightly").owner("client-1").lease_timeout(5).build()
    )
    second = (
        LockBuilder().store(url).path("demo", "nightly").owner("client-2").lease_timeout(5).build()
    )
    first.lock()
    _say(f"  client-1 holds the lock, fencing token {first.fencing_token}")
    _show("info", second.info())
    _say(f"  client-2 try_lock() -> {second.try_lock()}")
    got = threading.Event()

    def wait_for_it() -> None:
        second.lock(timeout=10)
        got.set()

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.3)  # a moment of client-1's work, so the wait is visible
    _say("  client-1 releases")
    first.unlock()
    waiter.join(10)
    assert got.is_set()
    _say(f"  client-2 holds the lock, fencing token {second.fencing_token} (higher: fenced)")
    _show("info", second.info())
    second.unlock()
    first.close()
    second.close()


class _Cleaner(LockListener):
    def __init__(self) -> None:
        self.lost = threading.Event()

    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        left = notice.seconds_left()
        _say(
            f"  low-priority job: {notice.requestor_owner!r} "
            f"(priority {notice.requestor_priority}) asks for the lock; "
            f"cleaning up ({left:.1f} s left in the window)"
        )
        time.sleep(0.2)  # the job rolls back its partial work
        _say("  low-priority job: cleanup done, handing over")

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        _say(f"  low-priority job: told it no longer holds the lock ({reason})")
        self.lost.set()


def _preemption(url: str) -> None:
    _say("2. A higher-priority job preempts a low-priority holder")
    cleaner = _Cleaner()
    low = (
        LockBuilder()
        .store(url)
        .path("demo", "compaction")
        .owner("batch-job")
        .priority(1)
        .cleanup_timeout(5)
        .watch_interval(0.1)
        .listener(cleaner)
        .build()
    )
    high = (
        LockBuilder()
        .store(url)
        .path("demo", "compaction")
        .owner("urgent-job")
        .priority(10)
        .waiting_timeout(10)
        .build()
    )
    low.lock()
    _say(f"  batch-job holds the lock, fencing token {low.fencing_token}")
    started = time.monotonic()
    acquired = high.try_lock()
    took = time.monotonic() - started
    # The old holder hears of its loss on the heartbeat's thread: let it speak first.
    cleaner.lost.wait(10)
    _say(
        f"  urgent-job try_lock() -> {acquired} after {took:.2f} s, "
        f"fencing token {high.fencing_token}"
    )
    _show("info", high.info())
    high.unlock()
    low.close()
    high.close()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="prioritylock-demo-") as tmp:
        directory = argv[0] if argv else tmp
        url = f"file://{directory}"
        _say(f"prioritylock demo on the local-directory store {url}\n")
        _contention(url)
        _say()
        _preemption(url)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
