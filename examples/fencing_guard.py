"""Fencing: why a lease alone is not enough, and the guard that makes a stale holder harmless.

Shows the "replace if unchanged" pattern (as in Apache Ozone): a protected object in the same
store carries the fencing token of the last holder that wrote it, and every write goes through
``prioritylock.stores.replace_if_unchanged``: refused when the object carries a higher token,
retried when the object changed since it was read. An old holder is paused (its heartbeat stalls,
as in a long GC pause or a frozen VM) until its lease expires; a new holder takes over with a
higher token and writes; the old holder wakes up and its write is refused.

Run: ``python examples/fencing_guard.py [STORE_URL]`` (default: a fresh temporary directory).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time

from prioritylock import ConditionFailed, Heartbeat, LockBuilder
from prioritylock.stores import ObjectStore, Versioned, open_store, replace_if_unchanged

REPORT = "reports/daily.json"


def guarded_write(
    store: ObjectStore, key: str, token: int, text: str, seen: Versioned | None
) -> bool:
    """Write ``text`` stamped with ``token``, unless the object carries a higher token.

    ``seen`` is what the caller last read at ``key`` (None: absent). Returns False if refused.
    """
    while True:
        current = json.loads(seen.data) if seen is not None else {"fence": 0, "n": 0}
        if current["fence"] > token:
            return False  # a later holder has written here: this writer's lock is gone
        # "n" counts writes, so no two writes have the same bytes: on S3 a version is a hash of
        # the bytes, and equal bytes would mean equal versions.
        body = json.dumps({"fence": token, "n": current["n"] + 1, "text": text}).encode()
        try:
            replace_if_unchanged(store, key, body, seen)
            return True
        except ConditionFailed:
            seen = store.read(key)  # somebody wrote since we read: judge again


def run(url: str) -> None:
    store = open_store(url)  # one store object, shared by the locks and the report

    # The old holder's heartbeat is a manual one that nobody runs: its lease is never renewed.
    stalled = Heartbeat(threaded=False)
    old = (
        LockBuilder()
        .store(store)
        .path("reports/daily")
        .owner("old")
        .lease_timeout(1)
        .heartbeat(stalled)
        .build()
    )
    old.lock()
    old_token = old.fencing_token
    print(f"old holder: fencing token {old_token}")
    wrote = guarded_write(store, REPORT, old_token, "draft 1", store.read(REPORT))
    print(f"old holder writes draft 1: {wrote}")
    seen = store.read(REPORT)  # it reads the report, starts on draft 2 ... and pauses
    print("old holder pauses; its lease (1 s) is not renewed")

    new = (
        LockBuilder()
        .store(store)
        .path("reports/daily")
        .owner("new")
        .max_clock_drift(0.2)
        .poll_interval(0.05)
        .build()
    )
    started = time.monotonic()
    new.lock(timeout=10)  # takes over once the old lease stayed unchanged for 1 s + 0.2 s
    print(
        f"new holder: took over after {time.monotonic() - started:.1f} s, "
        f"fencing token {new.fencing_token}"
    )
    wrote = guarded_write(store, REPORT, new.fencing_token, "final", store.read(REPORT))
    print(f"new holder writes the final report: {wrote}")

    print("old holder wakes up and finishes draft 2 with its token")
    if guarded_write(store, REPORT, old_token, "draft 2", seen):
        print("old holder's write landed (this must not happen)")
    else:
        print(f"old holder's write refused: the report carries a token above {old_token}")
    print(f"old holder is_current_owner() -> {old.is_current_owner()} (its own clock agrees)")

    current = store.read(REPORT)
    assert current is not None
    print(f"report now: {current.data.decode()}")
    new.unlock()
    old.close()
    new.close()


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="prioritylock-example-") as tmp:
        run(argv[1] if len(argv) > 1 else f"file://{tmp}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
