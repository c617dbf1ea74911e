"""What every benchmark shares: timed loops (:func:`timed`, :func:`timed_async`) run in
interleaved rounds within a time budget (:func:`run_interleaved`, so the machine's noise hits them
alike) and tabulated (:func:`compare`); statistics, the machine's facts and CPU (``/proc``),
:class:`Section` (a table for people, rows for the JSON file), :func:`write_json` (atomic)."""

from __future__ import annotations

import asyncio
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import filelock

import prioritylock
from prioritylock.stores import ObjectStore

if TYPE_CHECKING:  # _bench imports this module
    from _bench import Sizes

ROOT = Path(__file__).resolve().parents[1]
"""The source checkout (for its git commit)."""

Json = dict[str, Any]
T = TypeVar("T")


@dataclass
class Section:
    """One section's result: a table for people and rows for the JSON file."""

    name: str
    title: str
    headers: list[str]
    table: list[list[str]] = field(default_factory=list)
    rows: list[Json] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    load: float | None = None  # 1-minute load average when the section started
    steal: float | None = None  # % of the machine's CPU time stolen by the hypervisor meanwhile

    def add(self, cells: Sequence[str], row: Json) -> None:
        """One result: a line of the table and its row in the JSON file."""
        self.table.append(list(cells))
        self.rows.append(row)

    def render(self) -> str:
        widths = [max(map(len, column)) for column in zip(self.headers, *self.table, strict=True)]

        def fmt(cells: Sequence[str]) -> str:
            rest = (c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))
            return "  ".join([cells[0].ljust(widths[0]), *rest]).rstrip()

        load = "" if self.load is None else f", load average {self.load:.2f} at its start"
        steal = "" if self.steal is None else f", {self.steal:.0f}% of CPU time stolen (VM)"
        out = [self.title, fmt(self.headers), fmt(["-" * w for w in widths])]
        out += [fmt(line) for line in self.table] + [f"  {note}" for note in self.notes]
        return "\n".join([*out, f"  ({self.elapsed_s:.1f} s{load}{steal})"])


# -- statistics ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    p99: float
    mean: float
    min: float
    max: float

    def cells(self) -> list[str]:
        """Median, p99 and n, as a table shows them."""
        return [fmt_num(self.median), fmt_num(self.p99), str(self.n)]


def summarize(samples_ns: Sequence[int], unit_ns: float) -> Summary:
    """Median, p99 (nearest rank), mean, min and max of ``samples_ns`` in units of ``unit_ns``."""
    if not samples_ns:
        raise ValueError("no samples")
    s = sorted(samples_ns)
    stats = (statistics.median(s), percentile(s, 0.99), statistics.fmean(s), s[0], s[-1])
    return Summary(len(s), *(x / unit_ns for x in stats))


def fmt_num(value: float) -> str:
    """Three significant figures, at least; no exponent."""
    digits = 0 if value >= 100 else 1 if value >= 10 else 2 if value >= 1 else 3
    return f"{value:,.{digits}f}"


# -- timed loops, interleaved ----------------------------------------------------------------------

Cycles = Callable[[int], list[int]]  # run k timed cycles, return their durations in ns


@dataclass
class CycleVariant:
    key: str
    label: str
    target: int
    run: Cycles
    samples: list[int] = field(default_factory=list)
    spent_s: float = 0.0
    cpu_ns: int = 0  # process CPU time (every thread) over the timed chunks
    server: int | None = None  # the pid of a server the cycles call, whose CPU is measured too
    server_cpu_s: float = 0.0  # the server's CPU time over the timed chunks

    @property
    def cpu_us(self) -> float:
        """Mean process CPU µs per cycle: the work done, however loaded the machine is."""
        return self.cpu_ns / len(self.samples) / 1e3


def timed(body: Callable[..., object], setup: Callable[[], object] | None = None) -> Cycles:
    """k timed calls of ``body`` (ns each). With ``setup``, each call is ``body(setup())`` and the
    setup (e.g. building a new lock object) is left out of the time."""

    def run(k: int) -> list[int]:
        clock, out = time.perf_counter_ns, [0] * k
        for i in range(k):
            arg = () if setup is None else (setup(),)
            t0 = clock()
            body(*arg)
            out[i] = clock() - t0
        return out

    return run


def timed_async(
    loop: asyncio.AbstractEventLoop,
    body: Callable[..., Awaitable[object]],
    setup: Callable[[], object] | None = None,
) -> Cycles:
    """:func:`timed` for a coroutine function, each chunk of k cycles run inside ``loop``."""

    async def run(k: int) -> list[int]:
        clock, out = time.perf_counter_ns, [0] * k
        for i in range(k):
            arg = () if setup is None else (setup(),)
            t0 = clock()
            await body(*arg)
            out[i] = clock() - t0
        return out

    return lambda k: loop.run_until_complete(run(k))


async def lag_probe(lags: list[float], period_s: float = 0.05) -> None:
    """Until cancelled: sleep ``period_s`` at a time and record by how much the event loop
    overslept (s), a view of how long it stalls."""
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time()
        await asyncio.sleep(period_s)
        lags.append(loop.time() - asked - period_s)


def run_interleaved(variants: list[CycleVariant], sizes: Sizes) -> None:
    """Run every variant's warm-up, then its cycles in ``sizes.rounds`` interleaved chunks,
    each variant stopping early once it has used ``sizes.budget_s``; the CPU of the chunks is
    counted, the warm-up's is not."""
    for v in variants:
        v.run(sizes.warmup)
    for r in range(sizes.rounds):
        for v in variants:
            left = v.target - len(v.samples)
            # Each round's share of the budget, and the rounds' before it.
            if left <= 0 or v.spent_s >= sizes.budget_s * (r + 1) / sizes.rounds:
                continue
            chunk = min(left, math.ceil(v.target / sizes.rounds))
            started = time.perf_counter()
            cpu, server = time.process_time_ns(), process_cpu_s(v.server) if v.server else 0.0
            v.samples += v.run(chunk)
            v.cpu_ns += time.process_time_ns() - cpu
            v.server_cpu_s += process_cpu_s(v.server) - server if v.server else 0.0
            v.spent_s += time.perf_counter() - started


def compare(
    name: str,
    title: str,
    variants: Sequence[CycleVariant],
    against: Mapping[str, str],
    vs: str,
    sizes: Sizes,
    notes: Sequence[str] = (),
) -> Section:
    """The section of timed ``variants`` (µs): label, median, p99, vs ref, CPU per cycle, CPU vs
    ref and n, each compared with the variant ``against[key]`` (none if absent), called ``vs``."""
    by_key = {v.key: (v, summarize(v.samples, 1e3)) for v in variants}
    table: list[list[str]] = []
    rows: list[Json] = []
    for v, s in by_key.values():
        ref = by_key.get(against.get(v.key, ""))
        ratio = None if ref is None else s.median / ref[1].median
        cpu = None if ref is None else v.cpu_us / max(ref[0].cpu_us, 1e-9)
        cells = [fmt_num(s.median), fmt_num(s.p99), _times(ratio), fmt_num(v.cpu_us), _times(cpu)]
        table.append([v.label, *cells, str(s.n)])
        rows.append(
            {"variant": v.key, "label": v.label, "unit": "us", "cpu_us_per_cycle": v.cpu_us}
            | {"vs": against.get(v.key), "ratio": ratio, "cpu_ratio": cpu, **asdict(s)}
        )
    headers = ["variant", "median", "p99", f"vs {vs}", "CPU µs", f"CPU vs {vs}", "n"]
    pacing = (
        f"Variants interleaved in {sizes.rounds} rounds after {sizes.warmup} warm-up cycles each; "
        f"each capped at {sizes.budget_s:g} s. CPU µs: process CPU of all threads per cycle, mean."
    )
    return Section(name, title, headers, table, rows, [*notes, pacing])


def _times(ratio: float | None) -> str:
    return "" if ratio is None else "<0.01x" if ratio < 0.01 else f"{ratio:.2f}x"


_KIND_NAMES = {"reads": "read", "creates": "create", "replaces": "replace", "deletes": "delete"}


def fmt_counts(counts: Mapping[str, float]) -> str:
    """``2 (1 read, 1 replace)``; averages keep one decimal."""

    def num(x: float) -> str:
        return str(int(x)) if float(x).is_integer() else f"{x:.1f}"

    total = sum(v for k, v in counts.items() if k != "total")
    parts = [f"{num(v)} {_KIND_NAMES.get(k, k)}" for k, v in counts.items() if v and k != "total"]
    return f"{num(total)} ({', '.join(parts)})" if parts else "0"


def stats_delta(store: ObjectStore, action: Callable[[], object]) -> dict[str, int]:
    before = store.stats.snapshot()
    action()
    return {k: v - before[k] for k, v in store.stats.snapshot().items() if k != "total"}


def run_threads(bodies: Sequence[Callable[[], T]], name: str) -> list[T]:
    """Run ``bodies`` on threads at the same time: what each returned, in order; the first
    failure re-raised here."""
    with ThreadPoolExecutor(len(bodies), thread_name_prefix=name) as pool:
        return [future.result() for future in [pool.submit(body) for body in bodies]]


# -- machine ---------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def load_average() -> float | None:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def machine_info(root: Path | None = None) -> Json:
    """The machine, software and moment of a run (Linux); ``root``: the scratch directory (its
    filesystem is where LocalStore and filelock live)."""
    cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines()
    cpu = next((x.split(":", 1)[1].strip() for x in cpuinfo if x.startswith("model name")), "?")
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    python = f"{platform.python_implementation()} {platform.python_version()}"
    facts: Json = {"date": now, "platform": platform.platform(), "cpu": cpu}
    facts |= {"cores": os.cpu_count(), "python": python, "prioritylock": prioritylock.__version__}
    facts |= {"filelock": filelock.__version__, "git_commit": _git("rev-parse", "--short", "HEAD")}
    facts |= {"git_dirty_files": len(_git("status", "--porcelain").splitlines())}
    facts["loadavg_start"] = os.getloadavg()
    if root is not None:  # the longest mount point above ``root``: ``device fstype on mount``
        mounts = [m.split() for m in Path("/proc/mounts").read_text(encoding="utf-8").splitlines()]
        dev, on, fs = max(
            (m for m in mounts if str(root).startswith(m[1])), key=lambda m: len(m[1])
        )[:3]
        facts |= {"tmp_dir": str(root), "filesystem": f"{dev} {fs} on {on}"}
    return facts


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def ms_summary(values: Sequence[float]) -> dict[str, float | None]:
    """p50, p99 and max of ``values`` (seconds) in ms, rounded to µs; None when there are none."""
    if not values:
        return dict.fromkeys(("p50", "p99", "max"))
    stats = {"p50": statistics.median(values), "p99": percentile(values, 0.99), "max": max(values)}
    return {k: round(1000 * x, 3) for k, x in stats.items()}


def cpu_times() -> list[int]:
    """The machine's CPU time counters (``/proc/stat``: user nice system idle iowait irq softirq
    steal), in clock ticks."""
    return [int(x) for x in Path("/proc/stat").read_text(encoding="ascii").split()[1:9]]


def cpu_split(before: list[int], after: list[int]) -> dict[str, float]:
    """How the machine's CPU time went between two :func:`cpu_times`: % busy, idle (iowait
    included) and stolen by a hypervisor."""
    d = [a - b for a, b in zip(after, before, strict=True)]
    total, idle, steal = sum(d) or 1, d[3] + d[4], d[7]
    shares = {"busy": total - idle - steal, "idle": idle, "steal": steal}
    return {name: round(100 * ticks / total, 1) for name, ticks in shares.items()}


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_json(path: Path, payload: Json) -> None:
    """Write ``payload`` to ``path`` as indented JSON, atomically (a reader never sees half)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class CpuWindow:
    """CPU over a ``with`` block, as % of one core: this process's (``own``), other processes'
    by name (``CpuWindow(emulator=pid)``; a None pid is left out), and how the machine's went."""

    def __init__(self, **pids: int | None) -> None:
        self._pids = {name: pid for name, pid in pids.items() if pid}

    def __enter__(self) -> CpuWindow:
        self.load, self._machine, self._own = load_average(), cpu_times(), time.process_time()
        self._others = {name: process_cpu_s(pid) for name, pid in self._pids.items()}
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = max(time.perf_counter() - self.started, 1e-6)
        used = {name: process_cpu_s(pid) - self._others[name] for name, pid in self._pids.items()}
        used["own"] = time.process_time() - self._own
        self.percent = {name: round(100 * s / self.seconds, 2) for name, s in used.items()}
        self.machine = cpu_split(self._machine, cpu_times())
