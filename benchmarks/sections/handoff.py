"""``handoff``: holder's ``unlock()`` call -> the next waiter's ``lock()`` returns.

Between threads and between processes (``time.monotonic_ns`` is system-wide); a child process is
``run.py --child-handoff SPEC``.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import partial
from typing import IO, Protocol

from _bench import NONDURABLE, RUN_PY, Bench
from _harness import Json, Section, fmt_num, summarize
from _wrappers import TallyStore

from prioritylock import Lock, LockBuilder
from prioritylock.stores import ObjectStore, open_store


class Channel(Protocol):
    """Coordination between the two peers of a handoff run (never part of a timed path)."""

    def send(self, message: str) -> None: ...

    def recv(self) -> str: ...


class QueueChannel:
    def __init__(self, inbox: queue.Queue[str], outbox: queue.Queue[str]) -> None:
        self._inbox = inbox
        self._outbox = outbox

    def send(self, message: str) -> None:
        self._outbox.put(message)

    def recv(self) -> str:
        try:
            return self._inbox.get(timeout=60)
        except queue.Empty:
            raise RuntimeError("handoff peer went silent") from None


class PipeChannel:
    def __init__(self, rfile: IO[str], wfile: IO[str]) -> None:
        self._r = rfile
        self._w = wfile

    def send(self, message: str) -> None:
        self._w.write(message + "\n")
        self._w.flush()

    def recv(self) -> str:
        line = self._r.readline()
        if not line:
            raise RuntimeError("handoff peer closed its pipe")
        return line.rstrip("\n")


def _expect(chan: Channel, what: str) -> None:
    got = chan.recv()
    if got != what:
        raise RuntimeError(f"handoff peer said {got!r}, expected {what!r}")


def handoff_peer(
    lock: Lock, chan: Channel, *, first: bool, handoffs: int, hold_s: float
) -> dict[str, dict[int, int]]:
    """One side of a ping-pong: the lock passes ``handoffs`` times between two peers.

    Handoff ``i``: the waiter says "ready" and calls ``lock()``; the holder waits ``hold_s`` so the
    waiter is surely blocked, notes ``monotonic_ns()`` and calls ``unlock()``; the waiter notes the
    time ``lock()`` returned and says "got". Then they swap roles.
    """
    releases: dict[int, int] = {}
    acquires: dict[int, int] = {}
    if first:
        lock.lock(timeout=10)
        chan.send("go")
    else:
        _expect(chan, "go")
    for i in range(handoffs):
        if (i % 2 == 0) == first:
            _expect(chan, "ready")
            time.sleep(hold_s)
            releases[i] = time.monotonic_ns()
            lock.unlock()
            _expect(chan, "got")
        else:
            chan.send("ready")
            lock.lock(timeout=10)
            acquires[i] = time.monotonic_ns()
            chan.send("got")
    if lock.is_current_owner():
        lock.unlock()
    return {"releases": releases, "acquires": acquires}


def _latencies(a: dict[str, dict[int, int]], b: dict[str, dict[int, int]]) -> list[int]:
    releases = {**a["releases"], **b["releases"]}
    acquires = {**a["acquires"], **b["acquires"]}
    return [acquires[i] - releases[i] for i in sorted(releases)]


def handoff_threads(
    b: Bench, stores: tuple[ObjectStore, ObjectStore], handoffs: int, hold_s: float
) -> list[int]:
    path = b.path("handoff")
    locks = [b.builder(st, path, f"peer-{i}").build() for i, st in enumerate(stores)]
    q1: queue.Queue[str] = queue.Queue()
    q2: queue.Queue[str] = queue.Queue()
    result: dict[str, dict[int, int]] = {}
    error: list[BaseException] = []

    def second() -> None:
        try:
            result.update(
                handoff_peer(
                    locks[1], QueueChannel(q2, q1), first=False, handoffs=handoffs, hold_s=hold_s
                )
            )
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=second, name="bench-handoff-peer")
    thread.start()
    mine = handoff_peer(
        locks[0], QueueChannel(q1, q2), first=True, handoffs=handoffs, hold_s=hold_s
    )
    thread.join()
    if error:
        raise error[0]
    return _latencies(mine, result)


def handoff_processes(b: Bench, url: str, handoffs: int, hold_s: float) -> list[int]:
    path = b.path("handoff-proc")
    spec = json.dumps({"url": url, "path": list(path), "handoffs": handoffs, "hold_s": hold_s})
    child = subprocess.Popen(
        [sys.executable, str(RUN_PY), "--child-handoff", spec],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        lock = b.builder(open_store(url), path, "parent").build()
        mine = handoff_peer(
            lock,
            PipeChannel(child.stdout, child.stdin),
            first=True,
            handoffs=handoffs,
            hold_s=hold_s,
        )
        out, err = child.communicate(timeout=30)
        if child.returncode != 0 or not out.startswith("result "):
            raise RuntimeError(f"handoff child failed ({child.returncode}): {out!r} {err}")
        raw = json.loads(out[len("result ") :])
        theirs = {k: {int(i): t for i, t in v.items()} for k, v in raw.items()}
        return _latencies(mine, theirs)
    except BaseException:
        if child.poll() is None:
            child.kill()
            _, err = child.communicate()
            sys.stderr.write(err)
        raise


def child_handoff(spec_json: str) -> int:
    """The child process of :func:`handoff_processes` (``--child-handoff SPEC``)."""
    spec = json.loads(spec_json)
    lock = LockBuilder().store(spec["url"]).path(*spec["path"]).owner("child").build()
    chan = PipeChannel(sys.stdin, sys.stdout)
    result = handoff_peer(lock, chan, first=False, handoffs=spec["handoffs"], hold_s=spec["hold_s"])
    sys.stdout.write("result " + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


@dataclass(frozen=True)
class HandoffCase:
    key: str
    label: str
    hold_s: float
    run: Callable[[], list[int]]


def section_handoff(b: Bench) -> Section:
    s = b.sizes
    cases: list[HandoffCase] = []
    for kind in b.local_kinds:
        url = b.url(kind)
        shared = open_store(url)
        cases.append(
            HandoffCase(
                f"{kind.name}/threads",
                f"{kind.label}, 2 threads, one store object",
                s.hold_s,
                partial(handoff_threads, b, (shared, shared), s.handoffs, s.hold_s),
            )
        )
        holds = ((s.hold_s, s.handoffs), (s.hold_long_s, s.handoffs_long))
        if open_store(url) is not shared:
            # Two .store("file://...") calls: separate store objects whose ``namespace`` (the
            # directory) is the same, so in-process wakeups still reach across.
            for hold, n in holds:
                cases.append(
                    HandoffCase(
                        f"{kind.name}/threads-2-stores/{hold:g}",
                        f"{kind.label}, 2 threads, a store object each",
                        hold,
                        partial(handoff_threads, b, (open_store(url), open_store(url)), n, hold),
                    )
                )
        if kind.cross_process:
            for hold, n in holds:
                cases.append(
                    HandoffCase(
                        f"{kind.name}/processes/{hold:g}",
                        f"{kind.label}, 2 processes",
                        hold,
                        partial(handoff_processes, b, url, n, hold),
                    )
                )
        if kind.name == "local":  # the same without fsync: threads, and processes
            fast = b.url(kind) + NONDURABLE
            fast_shared = open_store(fast)
            cases.append(
                HandoffCase(
                    "local-nondurable/threads",
                    "LocalStore durable=false, 2 threads, one store object",
                    s.hold_s,
                    partial(handoff_threads, b, (fast_shared, fast_shared), s.handoffs, s.hold_s),
                )
            )
            cases.append(
                HandoffCase(
                    f"local-nondurable/processes/{s.hold_s:g}",
                    "LocalStore durable=false, 2 processes",
                    s.hold_s,
                    partial(handoff_processes, b, fast, s.handoffs, s.hold_s),
                )
            )
    for kind in b.cloud_kinds:
        url = b.url(kind)
        shared = open_store(url)
        n = s.cloud_handoffs
        clients = (open_store(url), open_store(url))  # two SDK clients, one namespace
        # Wrapped, the two clients lose their shared ``namespace``: no in-process wakeup, the
        # waiter polls as one in another process or on another host would.
        isolated = (TallyStore(open_store(url)), TallyStore(open_store(url)))
        for key, label, stores in (
            ("threads", "2 threads, one store object", (shared, shared)),
            ("threads-2-clients", "2 threads, a store client each", clients),
            ("threads-2-clients-polling", "2 store clients, no in-process wakeup", isolated),
        ):
            cases.append(
                HandoffCase(
                    f"{kind.name}/{key}",
                    f"{kind.label}, {label}",
                    s.hold_s,
                    partial(handoff_threads, b, stores, n, s.hold_s),
                )
            )
    table: list[list[str]] = []
    rows: list[Json] = []
    for case in cases:
        summary = summarize(case.run(), 1e6)
        hold_ms = f"{case.hold_s * 1000:g}"
        table.append(
            [case.label, hold_ms, fmt_num(summary.median), fmt_num(summary.p99), str(summary.n)]
        )
        rows.append(
            {
                "case": case.key,
                "label": case.label,
                "hold_ms": case.hold_s * 1000,
                "unit": "ms",
                **asdict(summary),
            }
        )
    return Section(
        name="handoff",
        title="Handoff: holder's unlock() call -> the blocked waiter's lock() returns (ms)",
        headers=["case", "hold ms", "median", "p99", "n"],
        table=table,
        rows=rows,
        notes=[
            "hold: how long the waiter has been blocked when the holder releases; a waiter that "
            "polls backs off from 5 ms towards poll_interval (default 1 s), so longer holds mean "
            "later wakeups.",
            "Cloud stores: 'a store client each' is two open_store(url) calls (two SDK clients; "
            "their common namespace lets the release wake the waiter in-process); 'no in-process "
            "wakeup' hides the namespace, so the waiter polls as in another process or host.",
        ],
    )
