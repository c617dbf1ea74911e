"""A waiter in a lock's line, in its own process (``tests/line``).

Usage: ``python -m tests._helpers.line_waiter STORE_DIR LOCK_PATH OWNER LEASE_TIMEOUT``.

Reads commands from stdin, one a line: ``lock`` calls ``lock()`` on a
:class:`~prioritylock.stores.LocalStore` (a blocking acquire joins the line), prints
``took FENCE`` once it holds the lock and releases it at once; end of file closes the lock and
exits. Every line on stdout is flushed at once.
"""

from __future__ import annotations

import sys

from prioritylock import LockBuilder
from prioritylock.stores import LocalStore


def main() -> None:
    directory, path, owner, lease = sys.argv[1:5]
    lock = (
        LockBuilder()
        .store(LocalStore(directory))
        .path(path)
        .owner(owner)
        .lease_timeout(float(lease))
        .poll_interval(0.2)
        .build()
    )
    print("ready", flush=True)
    for command in sys.stdin:
        if command.strip() == "lock":
            lock.lock(timeout=60)
            fence = lock.fencing_token
            lock.unlock()
            print(f"took {fence}", flush=True)
    lock.close()


if __name__ == "__main__":
    main()
