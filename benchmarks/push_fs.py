"""File-system notices between two processes on one LocalStore directory (issue 21).

    python benchmarks/push_fs.py [--rounds 300] [--keys 1000] [--seconds 5] [--rates 0,50,1000]

Latency: a child process writes one key (``replace``, durable, as a lock's request or release
is written) while this process watches it (``LocalStore.watch_key``); timed from just before the
write to the callback ("told"), and to a ``read_if_changed`` that returned the new version
("read"), p50/p99 over ``--rounds`` writes, one at a time. CPU: this process's CPU (all threads)
per second of wall time over ``--seconds``, with ``--keys`` keys of one directory watched and each
notice answered by one ``read_if_changed`` of its key (coalesced, as the lock does), against the
same process watching nothing (notifications off: its locks would only poll), idle and while the
child rewrites the keys at each of ``--rates`` writes per second (50: 1,000 leases renewed every
20 s).
"""

from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import statistics
import tempfile
import threading
import time
from multiprocessing.connection import Connection

from prioritylock.stores import NOT_MODIFIED, LocalStore, _fsnotify


def child(directory: str, conn: Connection) -> None:
    """Commands: ("one", key): replace it and answer the start time; ("load", keys, rate,
    seconds): rewrite the keys round robin at ``rate`` per second; None: stop."""
    store = LocalStore(directory)
    while (command := conn.recv()) is not None:
        if command[0] == "one":
            version = store.read(command[1]).version  # type: ignore[union-attr]
            started = time.monotonic()
            store.replace(command[1], b"request", version)  # durable: the sync comes last
            conn.send(started)
            continue
        _, keys, rate, seconds = command
        versions = {key: store.read(key).version for key in keys}  # type: ignore[union-attr]
        start, n = time.monotonic(), 0
        while (now := time.monotonic()) - start < seconds:
            if rate and n < (now - start) * rate:
                key = keys[n % len(keys)]
                versions[key] = store.replace_unsynced(key, b"renewed", versions[key])
                n += 1
            else:
                time.sleep(0.001)
        conn.send(n)


def latency(store: LocalStore, conn: Connection, rounds: int) -> tuple[list[float], list[float]]:
    store.create("lat/key", b"free")
    fence_version = store.create("lat/fence", b"0")
    told, read = [], []
    event, fence = threading.Event(), threading.Event()
    stops = [store.watch_key("lat/key", event.set), store.watch_key("lat/fence", fence.set)]
    version = store.read("lat/key").version  # type: ignore[union-attr]
    for _ in range(rounds):
        # Notices come in order: once the fence's came, none of an earlier write is left.
        fence.clear()
        fence_version = store.replace_unsynced("lat/fence", b"1", fence_version)
        fence.wait(5)
        event.clear()
        conn.send(("one", "lat/key"))
        if not (fence.is_set() and event.wait(5)):
            raise SystemExit("a notice was lost")
        at = time.monotonic()
        found = store.read_if_changed("lat/key", version)
        done = time.monotonic()
        assert found is not NOT_MODIFIED and found is not None, "told before the write was read"
        version = found.version
        started = conn.recv()
        told.append((at - started) * 1000)
        read.append((done - started) * 1000)
    for stop in stops:
        stop()
    return told, read


def cpu(
    store: LocalStore, conn: Connection, keys: list[str], watch: bool, rate: int, seconds: float
) -> float:
    """CPU seconds per second of this process while the child writes ``rate`` per second."""
    pending: set[str] = set()
    wake, done = threading.Event(), threading.Event()
    versions = {key: store.read(key).version for key in keys}  # type: ignore[union-attr]

    def told(key: str) -> None:
        pending.add(key)
        wake.set()

    stops = [store.watch_key(key, functools.partial(told, key)) for key in keys if watch]

    def reader() -> None:  # one read per key per wakeup, however many notices came
        while wake.wait() and not done.is_set():
            wake.clear()
            while pending:
                key = pending.pop()
                found = store.read_if_changed(key, versions[key])
                if found is not NOT_MODIFIED and found is not None:
                    versions[key] = found.version

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    begin = time.process_time()
    conn.send(("load", keys, rate, seconds))
    conn.recv()
    used = time.process_time() - begin
    for stop in [*stops, done.set, wake.set, thread.join]:
        stop()
    return used / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rates", default="0,50,1000")
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="push-fs-")
    store = LocalStore(directory)
    keys = [f"cpu/{i}" for i in range(args.keys)]
    for key in keys:
        store.create(key, b"held")
    context = mp.get_context("spawn")
    conn, child_conn = context.Pipe()
    process = context.Process(target=child, args=(directory, child_conn), daemon=True)
    process.start()
    assert _fsnotify.active(), "no inotify here: nothing to measure"
    told, read = latency(store, conn, args.rounds)
    print(f"two processes, one directory, {args.rounds} durable replaces (ms):")
    for name, values in (("write -> told", told), ("write -> read", read)):
        p50, p99 = statistics.median(values), statistics.quantiles(values, n=100)[98]
        print(f"  {name}: p50 {p50:.2f}  p99 {p99:.2f}  max {max(values):.2f}")
    print(f"CPU of this process, {args.keys} keys of one directory (% of one core):")
    for rate in map(int, args.rates.split(",")):
        on = cpu(store, conn, keys, True, rate, args.seconds)
        off = cpu(store, conn, keys, False, rate, args.seconds)
        print(f"  {rate} writes/s: notifications on {on:.2%}, off {off:.2%}")
    conn.send(None)
    process.join()


if __name__ == "__main__":
    main()
