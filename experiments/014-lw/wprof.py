# ruff: noqa  (a throwaway, kept for one commit: see README.md)
import sys, cProfile, pstats, tempfile

sys.path.insert(0, sys.argv[1])
from prioritylock.stores._local import LocalStore
from prioritylock.stores._log import unlogged

d = tempfile.mkdtemp()
s = LocalStore(d)
raw = unlogged(LocalStore.replace_unsynced)
data = b'{"x": "' + b"a" * 580 + b'"}'
v = s.create("k", data)
for _ in range(100):
    v = raw(s, "k", data, v)
N = 1000
p = cProfile.Profile()
p.enable()
for _ in range(N):
    v = raw(s, "k", data, v)
p.disable()
st = pstats.Stats(p)
total = sum(cc for (cc, nc, tt, ct, callers) in st.stats.values())
print("calls per write", total / N)
if len(sys.argv) > 2:
    st.sort_stats("tottime").print_stats(40)
