# ruff: noqa  (a throwaway, kept for one commit: see README.md)
"""Throwaway: a flat write with the same system calls and checks, state as a flat tuple, to size the target."""

import sys, time, tempfile, gc, os, fcntl, zlib

sys.path.insert(0, sys.argv[1])  # a checkout from before the tip (62b0abc)
from prioritylock.stores import _local
from prioritylock.stores._local import (
    LocalStore,
    _key_paths,
    _OBJECT_FLAGS,
    _LOCK_FILE_FLAGS,
    _new_version,
    _notices,
    _unlock,
)
from prioritylock.stores._slots import (
    FIRST_READ,
    SMALL_HEADER,
    BLOCK,
    SLOT_BYTES,
    _SLOT_CHECKED,
    _CRC,
    RECORD_AT,
)
from prioritylock.stores._log import unlogged

R = slice(24, 36)
H = [slice(o, o + 44) for o in (4096, 8192, 12288)]
tips = {}


def flat(self, key, data, version):
    k = self._keys[key]
    path, lock_path, stripe, where = k
    self._stats.count("replaces")
    lock = self._lock(key, lock_path, stripe, "replace")
    try:
        fd = os.open(path, _OBJECT_FLAGS)
        try:
            buf = os.pread(fd, FIRST_READ, 0)
            t = tips[key]
            rr, h0, h1, h2, cap, record, seq, pos, ver, length, crc, kept, at, free = t
            if not (
                buf.startswith(SMALL_HEADER)
                and buf[R] == rr
                and buf[H[0]] == h0
                and buf[H[1]] == h1
                and buf[H[2]] == h2
            ):
                raise RuntimeError("slow")
            start = BLOCK + pos * cap + SLOT_BYTES
            if zlib.crc32(buf[start : start + length]) != crc:
                raise RuntimeError("slow")
            if ver != version:
                raise RuntimeError("cond")
            nv = _new_version()
            written = nv.hex()
            _notices.OWN.wrote(where, version, written)
            seq += 1
            dcrc = zlib.crc32(data)
            head = _SLOT_CHECKED.pack(seq, len(data), nv, dcrc, 0)
            head += _CRC.pack(zlib.crc32(head))
            blob = head + data
            n = os.pwrite(fd, blob, BLOCK + free * cap)
            assert n == len(blob)
            heads = [h0, h1, h2]
            heads[free] = head
            third = 3 - pos - free
            tips[key] = (
                rr,
                *heads,
                cap,
                record,
                seq,
                free,
                written,
                len(data),
                dcrc,
                kept,
                at,
                pos if at == third else third,
            )
        finally:
            os.close(fd)
    finally:
        _unlock(lock, stripe)
    return written


d = tempfile.mkdtemp()
s = LocalStore(d)
s._keys = {"k": (*_key_paths(s._root, "k")[:3], (s._namespace, "k"))}
raw = unlogged(LocalStore.replace_unsynced)
data = b'{"x": "' + b"a" * 580 + b'"}'
v = s.create("k", data)
for _ in range(10):
    v = raw(s, "k", data, v)
# seed the tip from the store's layout
L = s._left["k"]
top = L.written[0]
p = L.plan
tips["k"] = (
    L.raw[0],
    *L.raw[1:],
    L.capacity,
    L.record,
    top.seq,
    top.position,
    top.version.hex(),
    top.length,
    top.data_crc,
    p.kept,
    p.at,
    p.free,
)
for _ in range(100):
    v = flat(s, "k", data, v)
assert s.read("k").version == v
gc.disable()
res = {"store": [], "flat": []}
for r in range(9):
    for name, fn in (("store", raw), ("flat", flat)):
        if name == "store":
            s._left.pop("k", None)
            v = raw(s, "k", data, v)
        t = time.process_time()
        for _ in range(3000):
            v = fn(s, "k", data, v)
        res[name].append((time.process_time() - t) / 3000 * 1e6)
        if name == "store":
            L = s._left["k"]
            top = L.written[0]
            p = L.plan
            tips["k"] = (
                L.raw[0],
                *L.raw[1:],
                L.capacity,
                L.record,
                top.seq,
                top.position,
                top.version.hex(),
                top.length,
                top.data_crc,
                p.kept,
                p.at,
                p.free,
            )
print({k: round(min(v), 2) for k, v in res.items()})
