# ruff: noqa  (a throwaway, kept for one commit: see README.md)
"""Throwaway: does a write's memory footprint cost more in the cycle than alone? An extra 48 KiB pread per store pread."""

import sys, time, tempfile, gc, os

sys.path.insert(0, sys.argv[1])
import filelock
from prioritylock import LockBuilder
from prioritylock.stores import LocalStore
from prioritylock.stores._log import unlogged

real = os.pread


def extra(fd, n, off):
    real(fd, 49152, 0)
    return real(fd, n, off)


d = tempfile.mkdtemp()
store = LocalStore(d)
lock = LockBuilder().store(store).path("bench", "same").owner("bench").build()
raw = unlogged(LocalStore.replace_unsynced)
data = b'{"x": "' + b"a" * 580 + b'"}'
big = d + "/big"
open(big, "wb").write(b"z" * 65536)
v = store.create("w", data)


def cyc():
    assert lock.try_lock()
    lock.unlock()


def wr():
    global v
    v = raw(store, "w", data, v)


res = {}
for r in range(9):
    for name, f, n in (("cycle", cyc, 1500), ("write", wr, 3000)):
        for mode in ("plain", "extra"):
            os.pread = real if mode == "plain" else extra
            t = time.process_time()
            for _ in range(n):
                f()
            res.setdefault((name, mode), []).append((time.process_time() - t) / n * 1e6)
os.pread = real
m = {k: min(x) for k, x in res.items()}
print({f"{a}/{b}": round(x, 1) for (a, b), x in m.items()})
print(
    "cycle delta",
    round(m[("cycle", "extra")] - m[("cycle", "plain")], 1),
    " 2x write delta",
    round(2 * (m[("write", "extra")] - m[("write", "plain")]), 1),
)
