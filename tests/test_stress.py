"""Stress tests: many contenders on one lock, checked for mutual exclusion and fencing.

Two workloads, each looping acquire → hold a random 0-5 ms → release:

- 1,000 threads of one process on one shared :class:`~prioritylock.stores.MemoryStore`, each
  with its own :class:`~prioritylock.Lock` (distinct owner);
- 8 processes on one :class:`~prioritylock.stores.LocalStore` directory (the worker is
  ``tests/_helpers/stress_worker.py``).

Every critical section is recorded with ``time.monotonic_ns`` readings taken *inside* the held
region and the fencing token. The checks: no two sections overlap (an "inside" counter checked
on entry and exit where the contenders share memory, and a post-hoc interval check everywhere);
fences strictly increase in entry order, with no duplicates and no gaps (the fence grows by one
per change of holder, and here every change of holder is a recorded acquisition). Figures
(acquisitions, throughput) are printed: run with ``pytest -s`` to see them.

No lease expires in these runs (lease timeout 30 s, holds of milliseconds), so any overlap is a
mutual-exclusion bug, not a break-glass path.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from prioritylock import LockBuilder, LockTimeout
from prioritylock.stores import LocalStore, MemoryStore
from tests._soak import size

HELPERS = Path(__file__).parent / "_helpers"
LEASE_TIMEOUT = 30.0
MAX_HOLD = 0.005  # seconds: each holder sleeps a random 0-5 ms (the workload)
#: Seconds of contention: ~60 handovers among the 1,000 threads (their polls crowd each other),
#: hundreds between the processes in less time; minutes of them under scripts/soak.
THREAD_SECONDS = size(4.0, 120.0)
PROCESS_SECONDS = size(2.5, 120.0)

THREADS = 1000
THREAD_STACK_BYTES = 512 * 1024  # 1,000 threads x the 8 MiB default would be 8 GiB of address space

PROCESSES = 8


@dataclass(frozen=True)
class Section:
    """One critical section: monotonic entry and exit (ns, inside the held region), fence, who."""

    enter_ns: int
    exit_ns: int
    fence: int
    who: str


class Occupancy:
    """An "inside" counter: entering when someone is inside, or leaving not alone, is recorded."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._inside = 0
        self.violations: list[str] = []

    def enter(self, who: str) -> None:
        with self._mutex:
            self._inside += 1
            if self._inside != 1:
                self.violations.append(f"{who} entered with {self._inside - 1} others inside")

    def exit(self, who: str) -> None:
        with self._mutex:
            self._inside -= 1
            if self._inside != 0:
                self.violations.append(f"{who} left with {self._inside} others inside")


def check_sections(sections: Sequence[Section]) -> list[int]:
    """Assert no two sections overlap and fences go up by exactly one in entry order.

    :returns: the fences in entry order.
    """
    assert sections, "no critical section was recorded"
    ordered = sorted(sections, key=lambda s: s.enter_ns)
    backwards = [s for s in ordered if s.exit_ns < s.enter_ns]
    assert not backwards, f"sections ending before they start: {backwards[:3]}"

    overlaps: list[tuple[Section, Section]] = []
    latest = ordered[0]  # the section with the latest exit so far
    for section in ordered[1:]:
        if section.enter_ns <= latest.exit_ns:
            overlaps.append((latest, section))
        if section.exit_ns > latest.exit_ns:
            latest = section
    assert not overlaps, f"{len(overlaps)} overlapping critical sections; first: {overlaps[:3]}"

    fences = [s.fence for s in ordered]
    duplicates = len(fences) - len(set(fences))
    assert duplicates == 0, f"{duplicates} duplicate fences"
    not_increasing = [(a, b) for a, b in itertools.pairwise(ordered) if b.fence <= a.fence]
    assert not not_increasing, (
        f"{len(not_increasing)} fences not increasing in entry order; first: {not_increasing[:3]}"
    )
    gaps = [(a, b) for a, b in itertools.pairwise(ordered) if b.fence != a.fence + 1]
    assert not gaps, f"{len(gaps)} fence gaps (an unrecorded change of holder); first: {gaps[:3]}"
    return fences


def describe(
    label: str,
    sections: Sequence[Section],
    seconds: float,
    per_client: Sequence[int],
    timeouts: int,
) -> str:
    held = sum(s.exit_ns - s.enter_ns for s in sections) / 1e9
    return (
        f"\n[{label}] {len(sections)} acquisitions in {seconds:.2f} s = "
        f"{len(sections) / seconds:.1f} acquisitions/s; lock held {100 * held / seconds:.0f}% of "
        f"the time; per client min/median/max = {min(per_client)}/"
        f"{statistics.median(per_client):g}/{max(per_client)}, "
        f"{sum(1 for n in per_client if n == 0)} clients never acquired; "
        f"lock() timeouts at the end of the run: {timeouts}"
    )


@pytest.mark.slow
@pytest.mark.timeout(10)
def test_checker_catches_overlaps_and_fence_errors() -> None:
    """The post-hoc checks fail on what they are meant to catch (a checker that never fails
    would make the stress tests below vacuous)."""
    good = [Section(0, 10, 1, "a"), Section(20, 30, 2, "b"), Section(31, 40, 3, "a")]
    assert check_sections(list(reversed(good))) == [1, 2, 3]
    bad_cases = {
        "overlapping": [Section(0, 10, 1, "a"), Section(5, 30, 2, "b")],
        "nested": [Section(0, 50, 1, "a"), Section(20, 30, 2, "b"), Section(60, 70, 3, "a")],
        "duplicate": [Section(0, 10, 1, "a"), Section(20, 30, 1, "b")],
        "decreasing": [Section(0, 10, 2, "a"), Section(20, 30, 1, "b")],
        "gap": [Section(0, 10, 1, "a"), Section(20, 30, 3, "b")],
    }
    for name, sections in bad_cases.items():
        try:
            check_sections(sections)
        except AssertionError:
            continue
        pytest.fail(f"check_sections accepted {name} sections")
    occupancy = Occupancy()
    occupancy.enter("a")
    occupancy.enter("b")
    occupancy.exit("b")
    occupancy.exit("a")
    assert len(occupancy.violations) == 2


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.load
@pytest.mark.timeout(THREAD_SECONDS + 60)
def test_thousand_threads_on_memory_store() -> None:
    store = MemoryStore("stress-threads")
    occupancy = Occupancy()
    records: list[list[Section]] = [[] for _ in range(THREADS)]
    timeouts = [0] * THREADS
    errors: list[tuple[int, BaseException]] = []
    errors_lock = threading.Lock()
    start = threading.Barrier(THREADS + 1)
    end_ns = [0]  # set by the main thread before it passes the barrier

    def contend(index: int) -> None:
        owner = f"thread-{index}"
        try:
            lock = (
                LockBuilder()
                .store(store)
                .path("stress", "threads")
                .owner(owner)
                .lease_timeout(LEASE_TIMEOUT)
                .build()
            )
            rng = random.Random(index)
            mine = records[index]
            start.wait()
            try:
                while True:
                    remaining = (end_ns[0] - time.monotonic_ns()) / 1e9
                    if remaining <= 0:
                        break
                    try:
                        lock.lock(timeout=remaining)
                    except LockTimeout:
                        timeouts[index] += 1
                        continue
                    enter = time.monotonic_ns()
                    occupancy.enter(owner)
                    fence = lock.fencing_token
                    assert lock.is_current_owner(), f"{owner}: holds the lock but says it does not"
                    time.sleep(rng.uniform(0.0, MAX_HOLD))  # the workload, not synchronisation
                    occupancy.exit(owner)
                    exit_ = time.monotonic_ns()
                    lock.unlock()
                    mine.append(Section(enter, exit_, fence, owner))
            finally:
                lock.close()
        except BaseException as exc:
            with errors_lock:
                errors.append((index, exc))
            start.abort()  # don't leave the others waiting for a thread that died before starting

    previous_stack = threading.stack_size(THREAD_STACK_BYTES)
    try:
        threads = [
            threading.Thread(target=contend, args=(i,), name=f"stress-{i}", daemon=True)
            for i in range(THREADS)
        ]
        for thread in threads:
            thread.start()
    finally:
        threading.stack_size(previous_stack)

    began_ns = time.monotonic_ns()
    end_ns[0] = began_ns + int(THREAD_SECONDS * 1e9)
    with contextlib.suppress(threading.BrokenBarrierError):
        start.wait(timeout=30)  # if a thread failed before the start, its error is reported below
    join_by = time.monotonic() + THREAD_SECONDS + 30
    for thread in threads:
        thread.join(timeout=max(0.0, join_by - time.monotonic()))
    finished_ns = time.monotonic_ns()
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"{len(stuck)} threads did not finish: {stuck[:10]}"
    assert not errors, f"{len(errors)} threads raised; first: {errors[:3]!r}"
    assert not occupancy.violations, (
        f"{len(occupancy.violations)} mutual-exclusion violations: {occupancy.violations[:5]}"
    )

    sections = [s for mine in records for s in mine]
    fences = check_sections(sections)
    info = LockBuilder().store(store).path("stress", "threads").owner("inspector").build().info()
    assert info is not None
    assert not info.held
    assert info.fence == fences[-1]
    assert info.last_event == "released"

    seconds = (finished_ns - began_ns) / 1e9
    assert seconds >= THREAD_SECONDS
    print(
        describe(
            f"memory, {THREADS} threads",
            sections,
            seconds,
            [len(mine) for mine in records],
            sum(timeouts),
        )
    )


def _read_results(path: Path, who: str) -> tuple[list[Section], int]:
    sections: list[Section] = []
    timeouts: int | None = None
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row.get("summary"):
                timeouts = int(row["timeouts"])
            else:
                sections.append(
                    Section(int(row["enter"]), int(row["exit"]), int(row["fence"]), who)
                )
    assert timeouts is not None, f"{path}: no summary line (the worker did not finish)"
    return sections, timeouts


@pytest.mark.slow
@pytest.mark.soak
@pytest.mark.load
@pytest.mark.timeout(PROCESS_SECONDS + 60)
def test_eight_processes_on_local_store(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    procs: list[subprocess.Popen[str]] = []
    outputs: list[Path] = []
    stderrs: list[IO[str]] = []
    try:
        for i in range(PROCESSES):
            out = tmp_path / f"sections-{i}.jsonl"
            err: IO[str] = (tmp_path / f"stderr-{i}.txt").open("w+", encoding="utf-8")
            outputs.append(out)
            stderrs.append(err)
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        str(HELPERS / "stress_worker.py"),
                        str(store_dir),
                        "stress/processes",
                        f"process-{i}",
                        str(out),
                        str(i),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=err,
                    text=True,
                )
            )
        for i, proc in enumerate(procs):
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.strip() == "ready", (
                f"worker {i} did not start: {line!r} {_tail(stderrs[i])}"
            )

        began_ns = time.monotonic_ns()
        end_ns = began_ns + int(PROCESS_SECONDS * 1e9)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(f"go {end_ns}\n")
            proc.stdin.close()
        for i, proc in enumerate(procs):
            status = proc.wait(timeout=PROCESS_SECONDS + 30)
            assert status == 0, f"worker {i} exited with {status}: {_tail(stderrs[i])}"
        finished_ns = time.monotonic_ns()
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
        for err in stderrs:
            err.close()

    sections: list[Section] = []
    per_process: list[int] = []
    timeouts = 0
    for i, out in enumerate(outputs):
        mine, timed_out = _read_results(out, f"process-{i}")
        sections.extend(mine)
        per_process.append(len(mine))
        timeouts += timed_out
    fences = check_sections(sections)
    info = (
        LockBuilder()
        .store(LocalStore(store_dir))
        .path("stress/processes")
        .owner("inspector")
        .build()
        .info()
    )
    assert info is not None
    assert not info.held
    assert info.fence == fences[-1]

    seconds = (finished_ns - began_ns) / 1e9
    assert seconds >= PROCESS_SECONDS
    print(describe(f"local, {PROCESSES} processes", sections, seconds, per_process, timeouts))
    print(f"[local, {PROCESSES} processes] acquisitions per process: {per_process}")


def _tail(file: IO[str], chars: int = 2000) -> str:
    file.flush()
    file.seek(0)
    return file.read()[-chars:]
