"""A lock holder for the SIGKILL test (``tests/test_kill.py``): take a lock, renew it, report.

Usage: ``python hold_lock.py STORE_DIR LOCK_PATH OWNER LEASE_TIMEOUT MAX_CLOCK_DRIFT``.

The holder takes the lock on a :class:`~prioritylock.stores.LocalStore` and keeps it (the
library's heartbeat renews it) until stdin reaches end of file or the process is killed. Every
line on stdout is flushed at once; times are ``time.monotonic_ns`` readings (CLOCK_MONOTONIC is
system-wide on Linux, so the parent can compare them with its own):

``write-start N NS``   conditional write number N (create or replace) is about to be issued
``write-end N NS``     write N returned successfully: it landed before NS
``write-failed N NS``  write N raised (it may or may not have landed)
``acquired FENCE NS``  ``lock()`` returned; FENCE is the fencing token
``renewed NS``         the ``renewed`` signal was received (after the renewal's write-end)
``lost REASON NS``     the ``lock_lost`` signal was received (spaces in REASON become ``_``)
``owner-at-exit B NS`` stdin reached end of file; B is ``is_current_owner()`` (1 or 0); then the
                       holder closes its lock (releasing it if still held) and exits 0

A write lands (the file is renamed into place) between its ``write-start`` and ``write-end``
times; once the holder holds the lock, every write is a renewal.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from prioritylock import LockBuilder, signals
from prioritylock.stores import LocalStore

_out_lock = threading.Lock()


def emit(*fields: object) -> None:
    """Write one whole line and flush it (heartbeat threads and the main thread both emit)."""
    line = " ".join(str(f) for f in fields) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


class TimedStore(LocalStore):
    """A LocalStore that reports when each conditional write starts and returns."""

    _numbers = itertools.count(1)

    def _timed(self, write: Callable[[], str]) -> str:
        number = next(self._numbers)
        emit("write-start", number, time.monotonic_ns())
        try:
            version = write()
        except BaseException:
            emit("write-failed", number, time.monotonic_ns())
            raise
        emit("write-end", number, time.monotonic_ns())
        return version

    def create(self, key: str, data: bytes) -> str:
        return self._timed(lambda: super(TimedStore, self).create(key, data))

    def replace(self, key: str, data: bytes, version: str) -> str:
        return self._timed(lambda: super(TimedStore, self).replace(key, data, version))

    def replace_unsynced(self, key: str, data: bytes, version: str) -> str:
        return self._timed(lambda: super(TimedStore, self).replace_unsynced(key, data, version))


def on_renewed(sender: Any, **kwargs: Any) -> None:
    emit("renewed", time.monotonic_ns())


def on_lost(sender: Any, **kwargs: Any) -> None:
    reason = str(kwargs.get("reason", "?")).replace(" ", "_")
    emit("lost", reason, time.monotonic_ns())


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    store_dir, lock_path, owner, lease_timeout, max_clock_drift = argv
    signals.renewed.connect(on_renewed, weak=False)
    signals.lock_lost.connect(on_lost, weak=False)
    lock = (
        LockBuilder()
        .store(TimedStore(store_dir))
        .path(lock_path)
        .owner(owner)
        .lease_timeout(float(lease_timeout))
        .max_clock_drift(float(max_clock_drift))
        .build()
    )
    lock.lock(timeout=30)
    emit("acquired", lock.fencing_token, time.monotonic_ns())
    sys.stdin.read()  # hold until the parent closes stdin (or kills us)
    emit("owner-at-exit", int(lock.is_current_owner()), time.monotonic_ns())
    lock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
