"""The other host of the hint tests: a process that holds or waits for a lock on S3 and reports.

Run as ``python -m tests.hints._peer SPEC`` (SPEC: JSON of the S3 server and bucket), with
``PRIORITYLOCK_HINTS`` saying where it listens. Commands come on stdin, one JSON object a line;
every report goes to stdout as one line, flushed, times as ``time.monotonic_ns()`` (system-wide
on Linux, so the test compares them with its own):

``{"op": "hold", "driver": "sync"|"async", "priority": P, "path": PATH, ...timings}`` ->
   ``held FENCE``;
   later ``cleanup NS`` (its cleanup returns at once: the lock passes) and ``lost REASON NS``
``{"op": "wait", "priority": P, ...timings}`` -> ``waiting``; later ``acquired NS``; with
   ``"trace": true`` also ``read NS`` as each of the waiter's reads starts
``{"op": "ask", "priority": P, ...timings}`` -> ``asked GOT LANDED_NS`` once its ``try_lock()``
   returned: whether it got the lock, and when its first write (the request) returned
``{"op": "force", "path": PATH}`` -> ``forced NS`` once its ``force_unlock`` returned
``{"op": "hint"}`` -> the hint its current acquisition recorded, ``hint TEXT`` (``none``)
``{"op": "release"}`` -> ``released NS``
``{"op": "stats"}`` -> ``stats DELIVERED COALESCED DROPPED`` (its listener's counts)
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

from prioritylock import AsyncLock, Lock, LockBuilder, LockListener, hint_stats
from prioritylock._listener import CleanupNotice
from prioritylock.stores import ObjectStore, S3Store
from prioritylock.stores._delegate import DelegatingStore

_out = threading.Lock()


def emit(*fields: object) -> None:
    with _out:
        sys.stdout.write(" ".join(str(f) for f in fields) + "\n")
        sys.stdout.flush()


class Reporter(LockListener):
    def on_cleanup_notification(self, notice: CleanupNotice) -> None:
        emit("cleanup", time.monotonic_ns(), f"{notice.deadline - time.monotonic():.3f}")

    def on_lock_lost(self, lock: Any, reason: str) -> None:
        emit("lost", reason, time.monotonic_ns())


class Traced(DelegatingStore):
    """Reports when each read starts; keeps when each replace returned."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.replaced: list[int] = []

    def _forward(self, op: str, key: str, call: Any) -> Any:
        if op.startswith("read"):
            emit("read", time.monotonic_ns())
        try:
            return call()
        finally:
            if op == "replace":
                self.replaced.append(time.monotonic_ns())


def builder(store: ObjectStore, command: dict[str, Any]) -> LockBuilder:
    path = command.get("path", "hints/test")
    b = LockBuilder().store(store).path(path).owner(f"peer-{command['op']}")
    b.priority(command.get("priority", 1)).listener(Reporter())
    b.lease_timeout(command.get("lease", 90.0)).renew_interval(command.get("renew", 30.0))
    b.watch_interval(command.get("watch", 30.0)).cleanup_timeout(command.get("cleanup", 10.0))
    b.waiting_timeout(command.get("waiting", 30.0)).poll_interval(command.get("poll", 10.0))
    return b


def main() -> None:
    spec = json.loads(sys.argv[1])
    store = S3Store(
        spec["bucket"],
        "locks/",
        endpoint_url=spec["endpoint"],
        region=spec["region"],
        addressing_style="path",
        aws_access_key_id=spec["key"],
        aws_secret_access_key=spec["secret"],
    )
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    lock: Lock | AsyncLock | None = None

    def run(coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(60)

    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "hold":
            b = builder(store, command)
            if command.get("driver") == "async":
                lock = run(_build_async(b))
                assert run(lock.try_lock())
                emit("held", lock.fencing_token)
            else:
                lock = b.build()
                assert lock.try_lock()
                emit("held", lock.fencing_token)
        elif op == "wait":
            waiter = builder(Traced(store) if command.get("trace") else store, command).build()
            lock = waiter

            def wait(waiter: Lock = waiter) -> None:
                waiter.lock(timeout=60)
                emit("acquired", time.monotonic_ns())

            threading.Thread(target=wait, daemon=True).start()
            emit("waiting")
        elif op == "ask":
            traced = Traced(store)
            asking = builder(traced, command).build()
            got = asking.try_lock()
            emit("asked", got, traced.replaced[0] if traced.replaced else 0)
            if got:
                asking.unlock()
            asking.close()
        elif op == "force":
            operator = builder(store, command).build()
            operator.force_unlock("hint test")
            emit("forced", time.monotonic_ns())
            operator.close()
        elif op == "hint":
            info = None if lock is None else lock._st.seen
            lease = None if info is None else info.lease
            hint = None
            if lease is not None and lease.holder is not None:
                hint = lease.holder.hint
            emit("hint", hint or "none")
        elif op == "stats":
            stats = hint_stats()
            emit("stats", stats.delivered, stats.coalesced, stats.dropped)
        elif op == "release":
            assert lock is not None
            if isinstance(lock, AsyncLock):
                run(lock.unlock())
            else:
                lock.unlock()
            emit("released", time.monotonic_ns())
    store.close()


async def _build_async(b: LockBuilder) -> AsyncLock:
    return b.build_async()


if __name__ == "__main__":
    main()
