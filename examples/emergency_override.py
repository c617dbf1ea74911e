"""The operators' emergency override: take a lock at once, whoever holds it, and say why.

Shows: ``LockBuilder().emergency_override(message=...)`` (priority 2147483647, forceful, no
wait) taking a lock from a holder with the highest ordinary priority and a long cleanup window,
at once; the override and its message recorded in the lease (``LockInfo``); the fence going up by
one; and the old holder told (``on_lock_lost``, reason ``overridden``) within its watch interval.

Run: ``python examples/emergency_override.py [STORE_URL]`` (default: a fresh temporary directory).
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

from prioritylock import MAX_PRIORITY, Lock, LockBuilder, LockListener


class Told(LockListener):
    def __init__(self) -> None:
        self.reason = ""
        self.lost = threading.Event()

    def on_lock_lost(self, lock: Lock, reason: str) -> None:
        self.reason = reason
        self.lost.set()


def run(url: str) -> None:
    told = Told()
    holder = (
        LockBuilder()
        .store(url)
        .path("prod/orders-db/schema")
        .owner("migration-42")
        .message("long schema migration")
        .priority(MAX_PRIORITY)  # the highest an ordinary client can have
        .cleanup_timeout(3600)  # would ask for an hour to clean up
        .watch_interval(0.2)  # reads its lease every 0.2 s
        .listener(told)
        .build()
    )
    holder.lock()
    print(f"migration-42 holds the lock: priority {MAX_PRIORITY}, fence {holder.fencing_token}")

    operator = (
        LockBuilder()
        .store(url)
        .path("prod/orders-db/schema")
        .owner("oncall-alice")
        .emergency_override(message="INC-1234: migration is locking orders, stopping it")
        .build()
    )
    started = time.monotonic()
    taken = operator.try_lock()
    print(f"oncall-alice override try_lock() -> {taken} in {time.monotonic() - started:.2f} s")

    info = operator.info()
    assert info is not None
    print(f"lease: owner {info.owner!r}, priority {info.priority}, forceful {info.forceful}")
    print(f"  message {info.message!r}")
    print(f"  last event {info.last_event!r} by {info.last_event_by!r}, fence {info.fence}")

    if told.lost.wait(5):  # the old holder hears of it at its next read of the lease
        print(f"migration-42 told: lock lost ({told.reason})")
    print(f"migration-42 is_current_owner() -> {holder.is_current_owner()}")

    operator.unlock()
    holder.close()
    operator.close()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="prioritylock-example-") as tmp:
        run(argv[1] if len(argv) > 1 else f"file://{tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
