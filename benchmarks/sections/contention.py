"""``contention``: 8 processes loop ``lock()`` -> ``unlock()`` on one lock for a fixed window.

Acquisitions per second, how often the lock changed process, and fairness (acquisitions per
process, waits), on the LocalStore (durable and ``durable=false``) against ``filelock.FileLock``
doing the same on the same disk. A child process is ``run.py --child-contention SPEC``.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass

import filelock
from _bench import NONDURABLE, RUN_PY, Bench
from _harness import Json, Section, Summary, fmt_counts, fmt_num, load_average, summarize

from prioritylock import LockBuilder, LockTimeout
from prioritylock.stores import StoreStats, open_store

#: How long a contending process holds the lock: 0, it calls unlock() as soon as lock() returns
#: (and lock() again as soon as unlock() returns), so the figures are the lock's own throughput.
CONTENTION_HOLD_S = 0.0
#: Between the "go" and the window's start: every child has read it before the window opens.
CONTENTION_LEAD_S = 0.2


@dataclass(frozen=True)
class ContentionVariant:
    key: str
    label: str
    #: What each child is told: ``{"mode": "filelock", "file": PATH}`` or
    #: ``{"mode": "prioritylock", "url": URL, "path": [a, b]}``.
    spec: Json


@dataclass
class ContentionChild:
    """One contending process's record of the window."""

    attempts_ns: list[int]  # lock() called
    acquired_ns: list[int]  # lock() returned
    released_ns: list[int]  # unlock() called
    cpu_s: float
    requests: dict[str, int]


@dataclass(frozen=True)
class ContentionResult:
    seconds: float
    per_process: list[int]
    switches: int  # consecutive acquisitions by different processes
    overlaps: int  # an acquisition before the previous holder's unlock() call: must be 0
    waits: Summary | None  # lock() call -> it returned, ms
    cpu_s: float  # all contending processes
    requests: dict[str, int]  # all contending processes, by kind
    load: float | None

    @property
    def acquisitions(self) -> int:
        return sum(self.per_process)


def _contention_variants(b: Bench) -> list[ContentionVariant]:
    flock_dir = b.root / "contention-filelock"
    flock_dir.mkdir()
    variants = [
        ContentionVariant(
            "filelock",
            "filelock.FileLock (same disk)",
            {"mode": "filelock", "file": str(flock_dir / "contended.lock")},
        )
    ]
    if any(k.name == "local" for k in b.kinds):
        for key, label, query in (
            ("local", "LocalStore (durable, the default)", ""),
            ("local-nondurable", "LocalStore, durable=false", NONDURABLE),
        ):
            url = (b.root / f"contention-{key}").as_uri() + query
            path = b.path("contended")
            first = LockBuilder().store(url).path(*path).owner("setup").build()
            first.lock(timeout=10)  # the document exists and is free when the window opens
            first.unlock()
            first.close()
            variants.append(
                ContentionVariant(key, label, {"mode": "prioritylock", "url": url, "path": path})
            )
    return variants


def _contention_children(
    variant: ContentionVariant, procs: int, seconds: float
) -> tuple[list[ContentionChild], float | None]:
    """Run the ``procs`` children of one variant through one window: their records, and the
    load average when the window opened. A child's stderr goes to a file, so a chatty child
    never blocks on a full pipe while it holds the lock."""
    with ExitStack() as stack:
        logs = [stack.enter_context(tempfile.TemporaryFile("w+")) for _ in range(procs)]
        children = [
            subprocess.Popen(
                [
                    sys.executable,
                    str(RUN_PY),
                    "--child-contention",
                    json.dumps({**variant.spec, "index": i, "hold_s": CONTENTION_HOLD_S}),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=logs[i],
                text=True,
            )
            for i in range(procs)
        ]

        def failed(i: int, what: str) -> RuntimeError:
            children[i].wait(10)
            logs[i].seek(0)
            return RuntimeError(f"contention child {what}: {logs[i].read()[-2000:]}")

        try:
            for i, child in enumerate(children):
                assert child.stdout is not None
                if child.stdout.readline().strip() != "ready":
                    raise failed(i, "did not start")
            load = load_average()
            start = time.monotonic_ns() + int(CONTENTION_LEAD_S * 1e9)
            end = start + int(seconds * 1e9)
            for child in children:
                assert child.stdin is not None
                child.stdin.write(f"go {start} {end}\n")
                child.stdin.flush()
            records: list[ContentionChild] = []
            for i, child in enumerate(children):
                out, _ = child.communicate(timeout=seconds + 60)
                if child.returncode != 0 or not out.startswith("result "):
                    raise failed(i, f"failed ({child.returncode})")
                records.append(ContentionChild(**json.loads(out[len("result ") :])))
        except BaseException:
            for child in children:
                if child.poll() is None:
                    child.kill()
                    child.communicate()
            raise
    return records, load


def contention_run(variant: ContentionVariant, procs: int, seconds: float) -> ContentionResult:
    """``procs`` processes loop lock() -> unlock() on one lock for ``seconds``, all starting at
    once; every acquisition is noted with ``time.monotonic_ns`` (system-wide)."""
    records, load = _contention_children(variant, procs, seconds)
    events = sorted(
        (acq, rel, i)
        for i, rec in enumerate(records)
        for acq, rel in zip(rec.acquired_ns, rec.released_ns, strict=True)
    )
    switches = sum(1 for x, y in itertools.pairwise(events) if x[2] != y[2])
    overlaps = sum(1 for x, y in itertools.pairwise(events) if y[0] < x[1])
    waits = [
        acq - att
        for rec in records
        for att, acq in zip(rec.attempts_ns, rec.acquired_ns, strict=True)
    ]
    requests: dict[str, int] = {}
    for rec in records:
        for k, v in rec.requests.items():
            requests[k] = requests.get(k, 0) + v
    return ContentionResult(
        seconds=seconds,
        per_process=[len(rec.acquired_ns) for rec in records],
        switches=switches,
        overlaps=overlaps,
        waits=summarize(waits, 1e6) if waits else None,
        cpu_s=sum(rec.cpu_s for rec in records),
        requests=requests,
        load=load,
    )


def child_contention(spec_json: str) -> int:
    """A child process of :func:`contention_run` (``--child-contention SPEC``): says "ready",
    waits for "go START END" (monotonic ns), then loops lock() -> unlock() until END."""
    spec = json.loads(spec_json)
    hold_s = float(spec["hold_s"])
    stats: StoreStats | None = None
    if spec["mode"] == "filelock":
        flock = filelock.FileLock(spec["file"])

        def acquire(timeout: float) -> bool:
            try:
                flock.acquire(timeout=timeout)
            except filelock.Timeout:
                return False
            return True

        release: Callable[[], object] = flock.release
        close: Callable[[], object] = flock.release
    else:
        store = open_store(spec["url"])
        stats = store.stats
        lock = LockBuilder().store(store).path(*spec["path"]).owner(f"proc-{spec['index']}").build()

        def acquire(timeout: float) -> bool:
            try:
                lock.lock(timeout=timeout)
            except LockTimeout:
                return False
            return True

        release = lock.unlock
        close = lock.close
    print("ready", flush=True)
    words = sys.stdin.readline().split()
    if len(words) != 3 or words[0] != "go":
        return 2
    start, end = int(words[1]), int(words[2])
    time.sleep(max(0.0, (start - time.monotonic_ns()) / 1e9))
    attempts: list[int] = []
    acquired: list[int] = []
    released: list[int] = []
    before = stats.snapshot() if stats is not None else {}
    cpu = time.process_time()
    clock = time.monotonic_ns
    while True:
        t0 = clock()
        if t0 >= end or not acquire((end - t0) / 1e9):
            break
        t1 = clock()
        if hold_s:
            time.sleep(hold_s)
        t2 = clock()
        release()
        attempts.append(t0)
        acquired.append(t1)
        released.append(t2)
    cpu = time.process_time() - cpu
    after = stats.snapshot() if stats is not None else {}
    close()
    result = ContentionChild(
        attempts_ns=attempts,
        acquired_ns=acquired,
        released_ns=released,
        cpu_s=cpu,
        requests={k: after[k] - before[k] for k in after if k != "total" and after[k] != before[k]},
    )
    sys.stdout.write("result " + json.dumps(asdict(result)) + "\n")
    sys.stdout.flush()
    return 0


def section_contention(b: Bench) -> Section:
    s = b.sizes
    variants = _contention_variants(b)
    results = {v.key: contention_run(v, s.contention_procs, s.contention_s) for v in variants}
    ref = results["filelock"].acquisitions / s.contention_s
    table: list[list[str]] = []
    rows: list[Json] = []
    for v in variants:
        r = results[v.key]
        rate = r.acquisitions / r.seconds
        counts = sorted(r.per_process)
        per_acq = {k: n / r.acquisitions for k, n in r.requests.items()} if r.acquisitions else {}
        waits = r.waits
        table.append(
            [
                v.label,
                fmt_num(rate),
                f"{rate / ref:.2f}x" if ref else "-",
                fmt_num(r.switches / r.seconds),
                f"{counts[0]} / {statistics.median(counts):g} / {counts[-1]}",
                "-" if waits is None else f"{fmt_num(waits.median)} / {fmt_num(waits.p99)}",
                "-" if waits is None else fmt_num(waits.max),
                fmt_counts({k: round(x, 2) for k, x in per_acq.items()}) if per_acq else "-",
                f"{100 * r.cpu_s / r.seconds:.0f}",
                str(r.overlaps),
            ]
        )
        rows.append(
            {
                "variant": v.key,
                "label": v.label,
                "processes": s.contention_procs,
                "hold_s": CONTENTION_HOLD_S,
                "seconds": r.seconds,
                "acquisitions": r.acquisitions,
                "acquisitions_per_s": rate,
                "vs_filelock": rate / ref if ref else None,
                "switches": r.switches,
                "switches_per_s": r.switches / r.seconds,
                "per_process": r.per_process,
                "per_process_min": counts[0],
                "per_process_median": statistics.median(counts),
                "per_process_max": counts[-1],
                "wait_ms": None if waits is None else asdict(waits),
                "requests": r.requests,
                "requests_per_acquisition": per_acq,
                "cpu_s": r.cpu_s,
                "cpu_percent_of_one_core": 100 * r.cpu_s / r.seconds,
                "overlaps": r.overlaps,
                "load": r.load,
            }
        )
    notes = [
        f"{s.contention_procs} processes, one lock, {s.contention_s:g} s each variant, all "
        "starting at once; each loops lock(timeout=rest of the window) -> unlock() with no hold "
        f"({CONTENTION_HOLD_S:g} s) and no pause, one Lock (FileLock) object per process, default "
        "settings (prioritylock poll_interval 1 s; filelock polls every 50 ms).",
        "switches/s: consecutive acquisitions by different processes. per process: acquisitions "
        "of the least / median / busiest process. wait: lock() call -> it returned, over every "
        "acquisition (ms). CPU: all the contending processes together, % of one core. overlaps: "
        "acquisitions noted before the previous holder's unlock() call (must be 0).",
        f"The machine has {os.cpu_count()} cores: the {s.contention_procs} processes also "
        "contend for CPU.",
    ]
    if "local" not in results:
        notes.append("LocalStore not picked (--stores): filelock alone.")
    return Section(
        name="contention",
        title=f"Contention: {s.contention_procs} processes x 1 lock, lock() -> unlock() loop",
        headers=[
            "variant",
            "acq/s",
            "vs filelock",
            "switches/s",
            "per process min/med/max",
            "wait p50/p99 ms",
            "max ms",
            "requests/acq",
            "CPU %",
            "overlaps",
        ],
        table=table,
        rows=rows,
        notes=notes,
    )
