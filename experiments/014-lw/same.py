# ruff: noqa  (a throwaway, kept for one commit: see README.md)
"""Throwaway: one replace_unsynced at 62b0abc (the package copied as prioritylock_base) and on this
branch, and a flat write with the same system calls and checks, in one process, interleaved."""

import gc, os, sys, tempfile, time, zlib
import prioritylock_base.stores._local as B
from prioritylock_base.stores._log import unlogged as unlogged_b
from prioritylock_base.stores._slots import (
    FIRST_READ,
    SMALL_HEADER,
    BLOCK,
    SLOT_BYTES,
    _SLOT_CHECKED,
    _CRC,
)
import prioritylock.stores._local as N
from prioritylock.stores._log import unlogged

data = b'{"x": "' + b"a" * 580 + b'"}'
R = slice(24, 36)
H = [slice(o, o + 44) for o in (4096, 8192, 12288)]
tips = {}


def flat(self, key, data, version):  # the base store's lock, count and log; the rest inline
    path, lock_path, stripe, where = self._flat_keys[key]
    self._stats.count("replaces")
    lock = self._lock(key, lock_path, stripe, "replace")
    try:
        fd = os.open(path, B._OBJECT_FLAGS)
        try:
            buf = os.pread(fd, FIRST_READ, 0)
            rr, h0, h1, h2, cap, record, seq, pos, ver, length, crc, kept, at, free = tips[key]
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
            nv = B._new_version()
            written = nv.hex()
            B._notices.OWN.wrote(where, version, written)
            seq += 1
            dcrc = zlib.crc32(data)
            head = _SLOT_CHECKED.pack(seq, len(data), nv, dcrc, 0)
            head += _CRC.pack(zlib.crc32(head))
            blob = head + data
            assert os.pwrite(fd, blob, BLOCK + free * cap) == len(blob)
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
        B._unlock(lock, stripe)
    return written


def seed(s):
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


sb = B.LocalStore(tempfile.mkdtemp())
sn = N.LocalStore(tempfile.mkdtemp())
sb._flat_keys = {"k": (*B._key_paths(sb._root, "k")[:3], (sb._namespace, "k"))}
rb, rn = unlogged_b(B.LocalStore.replace_unsynced), unlogged(N.LocalStore.replace_unsynced)
v = {"base": sb.create("k", data), "new": sn.create("k", data)}
for _ in range(50):
    v["base"] = rb(sb, "k", data, v["base"])
    v["new"] = rn(sn, "k", data, v["new"])
res = {"62b0abc": [], "branch": [], "flat": []}
gc.disable()
for r in range(int(sys.argv[1])):
    for name in res:
        if name == "flat":
            seed(sb)
            fn, s, which = flat, sb, "base"
        else:
            fn, s, which = (rb, sb, "base") if name == "62b0abc" else (rn, sn, "new")
        x = v[which]
        t = time.process_time()
        for _ in range(3000):
            x = fn(s, "k", data, x)
        res[name].append((time.process_time() - t) / 3000 * 1e6)
        v[which] = x
        if name == "flat":
            sb._left.pop("k", None)
            v["base"] = rb(sb, "k", data, v["base"])
m = {k: min(x) for k, x in res.items()}
print(
    " ".join(f"{k} {x:.2f}" for k, x in m.items()),
    f"| branch/62b0abc {m['branch'] / m['62b0abc']:.2f} flat/62b0abc {m['flat'] / m['62b0abc']:.2f}",
)
