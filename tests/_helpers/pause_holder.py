"""A lock holder for the pause tests (``tests/test_pause.py``): hold a lock, and do fenced work
on a protected object on command, so the parent can freeze it (SIGSTOP) mid-work.

Usage: ``python pause_holder.py STORE_URL LOCK_PATH PROTECTED_KEY LEASE_TIMEOUT MAX_CLOCK_DRIFT``
(cloud credentials from the usual environment variables).

Commands, one per line on stdin; answers, one per line on stdout (flushed at once):

``read``   answers ``read OWNER FENCE SEEN_FENCE``: it checked ``is_current_owner()`` (OWNER is 1
           or 0), then read the protected object (SEEN_FENCE: the fence stored in it, 0 if none),
           and keeps what it read for ``write``. The classic pause comes next: the holder
           believes it holds the lock and has read the resource; then it stops for a while.
``write``  answers ``write RESULT OWNER``: it checks ``is_current_owner()`` (OWNER, first thing:
           a holder thawed with this command waiting reads it at once), then writes the
           protected object back with its own fence, fenced: ``refused-by-fence`` if the object
           now carries a higher fence than its own, ``conflict`` if the object changed since
           ``read`` (the conditional write failed), ``written`` if it was written.
Also, unprompted: ``acquired FENCE``, ``renewed``, ``lost REASON`` (the ``lock_lost`` signal),
and at the end of stdin ``owner-at-exit B`` (B: ``is_current_owner()``), then it closes its lock.
"""

from __future__ import annotations

import json
import sys
import threading
from typing import Any

from prioritylock import ConditionFailed, LockBuilder, LockLost, NotLockOwner, signals
from prioritylock.stores import Versioned, open_store, replace_if_unchanged

_out_lock = threading.Lock()


def emit(*fields: object) -> None:
    line = " ".join(str(f) for f in fields) + "\n"
    with _out_lock:
        sys.stdout.write(line)
        sys.stdout.flush()


def fence_in(seen: Versioned | None) -> int:
    return int(json.loads(seen.data)["fence"]) if seen is not None else 0


def main(argv: list[str]) -> int:
    if len(argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    url, lock_path, protected, lease_timeout, drift = argv
    store = open_store(url)
    signals.renewed.connect(lambda sender, **kw: emit("renewed"), weak=False)

    def on_lost(sender: Any, **kwargs: Any) -> None:
        emit("lost", str(kwargs.get("reason", "?")).replace(" ", "_"))

    signals.lock_lost.connect(on_lost, weak=False)
    lock = (
        LockBuilder()
        .store(store)
        .path(lock_path)
        .owner("paused")
        .lease_timeout(float(lease_timeout))
        .max_clock_drift(float(drift))
        .build()
    )
    lock.lock(timeout=30)
    fence = lock.fencing_token
    emit("acquired", fence)
    seen: Versioned | None = None
    for line in sys.stdin:
        command = line.strip()
        if command == "read":
            owner = int(lock.is_current_owner())
            seen = store.read(protected)
            emit("read", owner, fence_in(seen))
        elif command == "write":
            owner = int(lock.is_current_owner())  # before anything else: a pause ends here
            # Fenced: refuse a higher fence, and write only if unchanged since read.
            if fence_in(store.read(protected)) > fence:
                emit("write", "refused-by-fence", owner)
                continue
            body = json.dumps({"fence": fence, "by": "paused"}).encode()
            try:
                replace_if_unchanged(store, protected, body, seen)
            except ConditionFailed:
                emit("write", "conflict", owner)
            else:
                emit("write", "written", owner)
    emit("owner-at-exit", int(lock.is_current_owner()))
    try:
        lock.unlock()
    except (LockLost, NotLockOwner) as exc:
        emit("unlock", type(exc).__name__)
    lock.close()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
