# ruff: noqa  (a throwaway, kept for one commit: see README.md)
"""Throwaway: CPU per try_lock()+unlock() on a LocalStore Lock against filelock and a MemoryStore Lock, same process,
min of interleaved rounds. argv: repo path, rounds, cycles per round."""

import sys, time, tempfile, gc

sys.path.insert(0, sys.argv[1])
import filelock
from prioritylock import LockBuilder
from prioritylock.stores import LocalStore, MemoryStore

rounds, n = int(sys.argv[2]), int(sys.argv[3])
d = tempfile.mkdtemp()
local = LockBuilder().store(LocalStore(d)).path("bench", "same").owner("bench").build()
mem = LockBuilder().store(MemoryStore()).path("bench", "same").owner("bench").build()
fl = filelock.FileLock(d + "/f")


def cyc(lock):
    assert lock.try_lock()
    lock.unlock()


variants = {
    "filelock": lambda: (fl.acquire(), fl.release()),
    "memory": lambda: cyc(mem),
    "local": lambda: cyc(local),
}
res = {k: [] for k in variants}
for f in variants.values():
    for _ in range(300):
        f()
for r in range(rounds):
    for name, f in variants.items():
        t = time.process_time()
        for _ in range(n):
            f()
        res[name].append((time.process_time() - t) / n * 1e6)
m = {k: min(v) for k, v in res.items()}
print(
    f"{sys.argv[1]:>16}",
    " ".join(f"{k} {v:.1f}" for k, v in m.items()),
    f"local/filelock {m['local'] / m['filelock']:.3f}  local/memory {m['local'] / m['memory']:.3f}",
)
