# ruff: noqa  (a throwaway, kept for one commit: see README.md)
"""Throwaway: what parts of a replace_unsynced cost (CPU, min of interleaved rounds)."""

import sys, time, tempfile, gc, os, fcntl

sys.path.insert(0, sys.argv[1])
from prioritylock.stores import _local, _local_notices, _base
from prioritylock.stores._local import LocalStore
from prioritylock.stores._log import unlogged

d = tempfile.mkdtemp()
s = LocalStore(d)
raw = unlogged(LocalStore.replace_unsynced)
data = b'{"x": "' + b"a" * 580 + b'"}'
v = s.create("k", data)
for _ in range(20):
    v = raw(s, "k", data, v)
real_count, real_wrote = _base.StoreStats.count, _local_notices.OwnWrites.wrote
variants = {
    "as is": lambda: None,
    "no count": lambda: setattr(_base.StoreStats, "count", lambda self, kind: None),
    "no wrote": lambda: setattr(_local_notices.OwnWrites, "wrote", lambda self, w, b, a: None),
}
obj = _local._key_paths(s._root, "k")
F1 = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
F2 = os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW
blob = b"y" * 644


def sys7():
    l = os.open(obj[1], F1, 0o666)
    fcntl.flock(l, fcntl.LOCK_EX | fcntl.LOCK_NB)
    fd = os.open(obj[0] + ".scratch", F2 | os.O_CREAT, 0o666)
    os.pread(fd, 16384, 0)
    os.pwrite(fd, blob, 8192)
    os.close(fd)
    os.close(l)


res = {k: [] for k in [*variants, "7 system calls"]}
gc.disable()
for r in range(9):
    for name, setup in variants.items():
        _base.StoreStats.count, _local_notices.OwnWrites.wrote = real_count, real_wrote
        setup()
        t = time.process_time()
        for _ in range(3000):
            v = raw(s, "k", data, v)
        res[name].append((time.process_time() - t) / 3000 * 1e6)
    t = time.process_time()
    for _ in range(3000):
        sys7()
    res["7 system calls"].append((time.process_time() - t) / 3000 * 1e6)
print(sys.argv[1], {k: round(min(x), 2) for k, x in res.items()})
