"""One contender process of the multi-process stress test (``tests/test_stress.py``).

Usage: ``python stress_worker.py STORE_DIR LOCK_PATH OWNER OUT_FILE SEED [GAP_MS]``.

The worker builds its lock on a :class:`~prioritylock.stores.LocalStore` in ``STORE_DIR``, prints
``ready`` and waits for one line ``go END_NS`` on stdin (``END_NS`` is a ``time.monotonic_ns``
reading; CLOCK_MONOTONIC is system-wide on Linux, so every process shares it). It then loops
acquire → hold a random 0-5 ms → release until ``END_NS``, and writes one JSON line per critical
section to ``OUT_FILE`` — ``{"enter": ns, "exit": ns, "fence": n}``, both times taken inside the
held region — followed by a summary line ``{"summary": true, "timeouts": n}``. Any exception is
printed to stderr and makes the exit status non-zero.
"""

from __future__ import annotations

import json
import random
import sys
import time
import traceback

from prioritylock import LockBuilder, LockTimeout
from prioritylock.stores import LocalStore

#: A waiter's longest sleep between polls: processes can't wake each other, so they poll.
POLL_INTERVAL = 0.01
#: Long enough that no lease expires during the run: every holder releases within milliseconds.
LEASE_TIMEOUT = 30.0
MAX_HOLD = 0.005


def run(
    store_dir: str, lock_path: str, owner: str, out_file: str, seed: int, gap: float = 0.0
) -> None:
    lock = (
        LockBuilder()
        .store(LocalStore(store_dir))
        .path(lock_path)
        .owner(owner)
        .lease_timeout(LEASE_TIMEOUT)
        .poll_interval(POLL_INTERVAL)
        .build()
    )
    rng = random.Random(seed)
    sections: list[tuple[int, int, int]] = []
    timeouts = 0
    print("ready", flush=True)
    command = sys.stdin.readline().split()
    if len(command) != 2 or command[0] != "go":
        raise SystemExit(f"expected 'go END_NS' on stdin, got {command!r}")
    end_ns = int(command[1])
    try:
        while True:
            remaining = (end_ns - time.monotonic_ns()) / 1e9
            if remaining <= 0:
                break
            try:
                lock.lock(timeout=remaining)
            except LockTimeout:
                timeouts += 1
                continue
            enter = time.monotonic_ns()
            fence = lock.fencing_token
            if not lock.is_current_owner():
                raise AssertionError(f"{owner}: lock() returned but is_current_owner() is false")
            time.sleep(rng.uniform(0.0, MAX_HOLD))  # the workload, not synchronisation
            exit_ = time.monotonic_ns()
            lock.unlock()
            sections.append((enter, exit_, fence))
            if gap:
                time.sleep(rng.uniform(0.0, gap))  # room for contenders that poll (the workload)
    finally:
        lock.close()
        with open(out_file, "w", encoding="utf-8") as out:
            for enter, exit_, fence in sections:
                out.write(json.dumps({"enter": enter, "exit": exit_, "fence": fence}) + "\n")
            out.write(json.dumps({"summary": True, "timeouts": timeouts}) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) not in (5, 6):
        print(__doc__, file=sys.stderr)
        return 2
    store_dir, lock_path, owner, out_file, seed = argv[:5]
    gap = float(argv[5]) / 1000 if len(argv) == 6 else 0.0
    try:
        run(store_dir, lock_path, owner, out_file, int(seed), gap)
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
