"""The basics: build a lock, hold it in a with-block, read its info and its fencing token.

Shows: LockBuilder (store URL, path, owner, message, lease timeout), ``with lock:`` (waits,
renews in the background, releases on exit), ``lock.info()`` as any client sees it,
``lock.fencing_token`` growing by one with each new holder, and ``try_lock()`` refusing a second
client while the lock is held.

Run: ``python examples/basic_lock.py [STORE_URL]`` (default: a fresh temporary directory).
"""

from __future__ import annotations

import sys
import tempfile

from prioritylock import LockBuilder, LockInfo


def describe(info: LockInfo | None) -> str:
    if info is None:
        return "no lease document yet"
    if not info.held:
        return f"free, fence {info.fence}, last event {info.last_event!r}"
    return (
        f"held by {info.owner!r} ({info.message!r}), priority {info.priority}, "
        f"lease {info.lease_timeout:g} s, fence {info.fence}"
    )


def run(url: str) -> None:
    def client(owner: str) -> LockBuilder:
        return (
            LockBuilder()
            .store(url)
            .path("jobs/nightly")
            .owner(owner)
            .message("nightly compaction")
            .lease_timeout(30)
        )

    worker = client("worker-1").build()
    other = client("worker-2").build()
    print(f"lock key in the store: {worker.key}")
    print(f"before: {describe(worker.info())}")

    with worker:  # lock(): waits as long as it takes; renewed in the background
        token = worker.fencing_token  # pass this to whatever the lock protects
        print(f"worker-1 holds the lock with fencing token {token}")
        print(f"info (as anyone sees it): {describe(other.info())}")
        print(f"worker-2 try_lock() -> {other.try_lock()}")

    print(f"after the with-block: {describe(other.info())}")
    print(f"worker-1 is_current_owner() -> {worker.is_current_owner()}")

    if other.try_lock():
        print(f"worker-2 holds the lock with fencing token {other.fencing_token} (one more)")
        other.unlock()
    worker.close()
    other.close()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="prioritylock-example-") as tmp:
        run(argv[1] if len(argv) > 1 else f"file://{tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
