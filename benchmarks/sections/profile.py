"""``profile`` (``run.py --profile``): where the same-``Lock`` cycle spends its time.

cProfile per local store, the pieces of the memory cycle timed alone, the cost of waking the
heartbeat thread, and a pyinstrument profile to ``results/`` when pyinstrument is installed.
"""

from __future__ import annotations

import cProfile
import importlib
import pstats
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _bench import HERE, MEMORY, Bench, local_stores, lock_cycle
from _harness import (
    CycleVariant,
    Json,
    Section,
    Summary,
    fmt_num,
    run_interleaved,
    summarize,
    timed,
)

from prioritylock import Heartbeat, Lock, LockInfo
from prioritylock.stores import open_store


def func_name(key: tuple[str, int, str]) -> str:
    filename, line, name = key
    if filename == "~":
        return name
    if "prioritylock" in filename:
        return f"{filename[filename.rindex('prioritylock') :]}:{line}({name})"
    return f"{Path(filename).name}:{line}({name})"


def _profile_cycles(lock: Lock, cycles: int) -> pstats.Stats:
    cycle = lock_cycle(lock)
    for _ in range(50):
        cycle()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(cycles):
        cycle()
    profiler.disable()
    return pstats.Stats(profiler)


#: Library functions whose cumulative time per cycle the profile section reports, when present.
_WATCHED = tuple(
    f"({name})"
    for name in (
        "try_lock",
        "unlock",
        "encode",
        "decode",
        "rewritten",
        "_claim",
        "_become_holder",
        "_announce_acquired",
        "_announce_released",
        "schedule",
        "cancel",
        "current",
        "fire",
        "from_lease",
        "validate_key",
        "count",
        "read",
        "replace",
        "create",
    )
)


@dataclass(frozen=True)
class ProfileLine:
    function: str
    calls_per_cycle: float
    own_us: float  # per cycle, in the function itself
    cum_us: float  # per cycle, with what it calls


def _profile_lines(stats: pstats.Stats, cycles: int) -> list[ProfileLine]:
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    per_cycle = 1e6 / cycles
    return [
        ProfileLine(func_name(k), v[1] / cycles, v[2] * per_cycle, v[3] * per_cycle)
        for k, v in raw.items()
    ]


def _heartbeat_wakeup_cost(b: Bench) -> dict[str, Summary]:
    """The same memory-store cycle with the process heartbeat thread, and with an unthreaded
    heartbeat (no thread to wake): the difference is what waking the scheduler costs."""
    store = open_store(b.url(MEMORY))
    threaded = b.builder(store, b.path("hb"), "bench").build()
    manual = b.builder(store, b.path("hb"), "bench").heartbeat(Heartbeat(threaded=False)).build()
    s = b.sizes
    n = s.profile_cycles * 2
    variants = [
        CycleVariant("threaded", "", n, timed(lock_cycle(threaded))),
        CycleVariant("manual", "", n, timed(lock_cycle(manual))),
    ]
    run_interleaved(variants, s)
    return {v.key: summarize(v.samples, 1e3) for v in variants}


@dataclass(frozen=True)
class Component:
    name: str
    calls_per_cycle: float
    us_per_call: float


def _components(b: Bench, profiled: Sequence[ProfileLine]) -> list[Component]:
    """What the pieces of a same-Lock memory-store try_lock()+unlock() cost, each timed alone
    (no profiler), times how often the profiled cycle (``profiled``) called each. Reaches into
    library internals; if they moved, the caller skips the table."""
    lease_mod: Any = importlib.import_module("prioritylock._lease")
    store = open_store(b.url(MEMORY))
    lock = b.builder(store, b.path("components"), "bench").build()
    lock.try_lock()
    found = store.read(lock.key)
    lock.unlock()
    assert found is not None
    lease = lease_mod.decode(lock.key, found.data, name=lock.key)
    version = [found.version]

    def replace() -> None:
        version[0] = store.replace("bench/components-scratch", found.data, version[0])

    def calls(suffix: str) -> float:
        """Calls per profiled cycle of the function whose name ends with ``suffix``."""
        return sum(p.calls_per_cycle for p in profiled if p.function.endswith(suffix))

    version[0] = store.create("bench/components-scratch", found.data)
    pieces: list[tuple[str, float, Callable[[], object]]] = [
        (
            "encode (lease -> JSON bytes)",
            calls("_lease.py:" + _line(lease_mod.encode) + "(encode)"),
            lambda: lease_mod.encode(lease),
        ),
        (
            "Lease.rewritten (a copy + new nonce)",
            calls("(rewritten)"),
            lease.rewritten,
        ),
        ("new_lock_id (keyed BLAKE2b)", calls("(new_lock_id)"), lease_mod.new_lock_id),
        (
            "LockInfo.from_lease (only with a listener or receiver)",
            calls("(from_lease)"),
            lambda: LockInfo.from_lease(lease),
        ),
        (
            "threading.Event() (only when a lock() call waits)",
            calls("threading.py:" + _line(threading.Event.__init__) + "(__init__)"),
            threading.Event,
        ),
        ("MemoryStore.replace", calls("_memory.py:" + _line(store.replace) + "(replace)"), replace),
        (
            "decode (a first read whose document changed or is not cached in the process)",
            calls("(decode)"),
            lambda: lease_mod.decode(lock.key, found.data, name=lock.key),
        ),
    ]
    n = max(1000, b.sizes.profile_cycles)
    out: list[Component] = []
    for name, per_cycle, fn in pieces:
        for _ in range(100):
            fn()
        started = time.perf_counter_ns()
        for _ in range(n):
            fn()
        out.append(Component(name, per_cycle, (time.perf_counter_ns() - started) / n / 1e3))
    return out


def _line(fn: Callable[..., object]) -> str:
    """The line a function starts on, as cProfile names it."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return str(code.co_firstlineno) if code is not None else "?"


def section_profile(b: Bench) -> Section:
    s = b.sizes
    table: list[list[str]] = []
    rows: list[Json] = []
    notes: list[str] = []
    memory_lines: list[ProfileLine] = []
    for key, label, kind, url in local_stores(b):
        cycles = s.profile_cycles_slow if kind.slow else s.profile_cycles
        lock = b.builder(open_store(url), b.path("profile"), "bench").build()
        lines = _profile_lines(_profile_cycles(lock, cycles), cycles)
        if kind is MEMORY:
            memory_lines = lines
        own = sorted(lines, key=lambda p: p.own_us, reverse=True)[: 6 if kind.slow else 12]
        table.append([f"{label}: top own time ({cycles} cycles under cProfile)", "", "", ""])
        for p in own:
            table.append(
                [
                    f"  {p.function}",
                    f"{p.calls_per_cycle:.1f}",
                    fmt_num(p.own_us),
                    fmt_num(p.cum_us),
                ]
            )
        watched = sorted(
            (p for p in lines if "prioritylock/" in p.function and p.function.endswith(_WATCHED)),
            key=lambda p: p.cum_us,
            reverse=True,
        )
        if not kind.slow:
            table.append([f"{label}: library functions, cumulative", "", "", ""])
            for p in watched:
                table.append([f"  {p.function}", f"{p.calls_per_cycle:.1f}", "", fmt_num(p.cum_us)])
        rows.append(
            {
                "store": key,
                "cycles": cycles,
                "top_own": [asdict(p) for p in own],
                "library_cumulative": [asdict(p) for p in watched],
            }
        )
        _pyinstrument(lock, cycles, HERE / "results" / f"profile-{key}.txt", notes)
    hb = _heartbeat_wakeup_cost(b)
    rows.append({"heartbeat_wakeup": {k: asdict(v) for k, v in hb.items()}})
    try:
        parts = _components(b, memory_lines)
    except (ImportError, AttributeError, TypeError) as exc:
        notes.append(f"component timings skipped: library internals changed ({exc})")
    else:
        table.append(
            [
                "Pieces of the MemoryStore cycle, timed alone (µs; calls: from the profile)",
                "",
                "per call",
                "per cycle",
            ]
        )
        for c in parts:
            table.append(
                [
                    f"  {c.name}",
                    f"{c.calls_per_cycle:g}",
                    fmt_num(c.us_per_call),
                    fmt_num(c.us_per_call * c.calls_per_cycle),
                ]
            )
        total = sum(c.us_per_call * c.calls_per_cycle for c in parts)
        table.append(
            [
                "  sum of the above / the cycle (threaded heartbeat)",
                "",
                "",
                f"{fmt_num(total)} / {fmt_num(hb['threaded'].median)}",
            ]
        )
        rows.append({"components": [asdict(c) for c in parts]})
    notes.append(
        "cProfile sees only the calling thread and inflates small calls; µs here are relative. "
        f"Same memory cycle, wall clock: {fmt_num(hb['threaded'].median)} µs with the process "
        f"heartbeat thread, {fmt_num(hb['manual'].median)} µs with Heartbeat(threaded=False) "
        "(no scheduler thread to wake on schedule/cancel)."
    )
    return Section(
        name="profile",
        title="Profile of the same-Lock cycle (µs per cycle, under the profiler)",
        headers=["function", "calls", "own", "cumulative"],
        table=table,
        rows=rows,
        notes=notes,
    )


def _pyinstrument(lock: Lock, cycles: int, out: Path, notes: list[str]) -> None:
    """A wall-clock sampling profile (pyinstrument, if installed) of the same cycle, to a file."""
    try:
        module: Any = importlib.import_module("pyinstrument")
    except ImportError:
        return
    profiler = module.Profiler(interval=0.0002)
    cycle = lock_cycle(lock)
    profiler.start()
    for _ in range(cycles):
        cycle()
    profiler.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(profiler.output_text(unicode=False, color=False, show_all=False))
    notes.append(f"pyinstrument (wall clock) profile written to {out.relative_to(HERE.parent)}")
