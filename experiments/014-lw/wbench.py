# ruff: noqa  (a throwaway, kept for one commit: see README.md)
"""Throwaway: CPU per LocalStore.replace_unsynced (raw, as the lock calls it). argv: repo path, rounds, n."""

import sys, time, tempfile, gc

sys.path.insert(0, sys.argv[1])
from prioritylock.stores._local import LocalStore
from prioritylock.stores._log import unlogged

rounds, n = int(sys.argv[2]), int(sys.argv[3])
d = tempfile.mkdtemp()
s = LocalStore(d)
raw = unlogged(LocalStore.replace_unsynced)
data = b'{"x": "' + b"a" * 580 + b'"}'
v = s.create("k", data)
for _ in range(200):
    v = raw(s, "k", data, v)
best = []
gc.disable()
for r in range(rounds):
    t = time.process_time()
    for _ in range(n):
        v = raw(s, "k", data, v)
    best.append((time.process_time() - t) / n * 1e6)
print(f"{sys.argv[1]:>16} min {min(best):.2f} us  med {sorted(best)[len(best) // 2]:.2f}")
