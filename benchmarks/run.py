"""prioritylock benchmarks: figures, not pass/fail. One run prints every table side by side.

Run ``python benchmarks/run.py [--quick] [--stores a,b] [--sections a,b] [--json PATH]
[--profile]``.

Stores (``STORE_KINDS``, all by default; ``--stores`` picks some): ``memory`` and ``local``, and the
cloud stores on their emulators, ``s3-moto``, ``s3-seaweedfs``, ``gcs`` (fake-gcs-server) and
``azure`` (Azurite). The emulators are started by the run itself on free ports on 127.0.0.1
(``_servers.py``), only when a section that uses them runs, and stopped at its end however it ends.

Sections, in order (``SECTIONS``); each is a module of ``sections/`` with a function
``(Bench) -> Section``:

- ``overhead``: µs per uncontended acquire+release cycle on the memory and local stores (the
  LocalStore durable, its default, and ``durable=false``), against ``filelock.FileLock`` on the
  same disk and ``threading.Lock`` (the floor); wall clock (median, p99) and process CPU per
  cycle.
- ``cloud``: per cloud store on its emulator, median and p99 of acquire (``try_lock()`` on a free
  lock), renew and release, with their requests from ``store.stats``, next to one GET and one
  conditional PUT made directly with the SDK: the library's overhead over the store's own cost.
- ``preemption``: a higher-priority ``try_lock()`` call -> it holds, against a holder whose
  cleanup takes 0 or 50 ms, on every store.
- ``requests``: store requests per operation on every store, from ``store.stats``; where two
  clients share a store (a blocked waiter, a preemption) a per-thread tally splits them, checked
  against the store's own totals. Also what a held lock and an idle one cost per renew interval.
- ``handoff``: holder's ``unlock()`` call -> the next waiter's ``lock()`` returns, between threads
  and between processes (``time.monotonic_ns`` is system-wide).
- ``contention``: 8 processes loop ``lock()`` -> ``unlock()`` on one lock for a fixed window
  (10 s; ``--quick`` 2 s): acquisitions per second, how often the lock changed process, and
  fairness (acquisitions per process, waits), on the LocalStore (durable and ``durable=false``)
  against ``filelock.FileLock`` doing the same on the same disk.
- ``aio``: the asyncio lock's acquire+release cycle (``AsyncLock``, the same object and a fresh
  one) on every store against the sync ``Lock``'s on the same store, and against
  ``filelock.AsyncFileLock``; ``aio-handoff``: the handoff between two tasks of one loop.
- ``serve``: a TryLock + Unlock round trip through ``prioritylock serve`` (a subprocess) over
  HTTP, gRPC and the Dapr Python SDK, on the memory store and each picked cloud store, against
  the in-process ``AsyncLock`` cycle; with the service's CPU per cycle.
- ``profile`` (with ``--profile``): where the cycle spends its time.

What they share is in ``_harness.py`` (timing, interleaved rounds, statistics, machine facts,
the JSON file), ``_bench.py`` (sizes, the stores under test, the run's context), ``_wrappers.py``
(store wrappers that time and tally requests) and ``_servers.py`` (the emulators). After a run
that writes the default results file, ``figures.py`` redraws the docs' benchmark figures from it.

To add a store: add a ``StoreKind`` to ``STORE_KINDS`` in ``_bench.py`` (an emulated one also to
``_servers.py``); every section that loops over kinds picks it up, and ``cross_process`` kinds
join the cross-process handoff. To add a section: write a module in ``sections/`` with a
``(Bench) -> Section`` function and list it in ``SECTIONS``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import _servers  # benchmarks/_servers.py: run as a script, this directory is on the path
import figures
from _bench import FULL, HERE, QUICK, STORE_KINDS, Bench, StoreKind
from _harness import (
    Json,
    Section,
    cpu_times,
    emulator_line,
    load_average,
    machine_info,
    machine_line,
    steal_percent,
    write_json,
)
from _servers import EmulatorError
from sections.aio import section_aio, section_aio_handoff
from sections.cloud import section_cloud
from sections.contention import child_contention, section_contention
from sections.handoff import child_handoff, section_handoff
from sections.overhead import section_overhead
from sections.preemption import section_preemption
from sections.profile import section_profile
from sections.push import section_push
from sections.requests import section_requests
from sections.serve import section_serve

DEFAULT_JSON = HERE / "results" / "latest.json"

#: Sections that use the emulated stores: the emulators start only when one of them runs.
CLOUD_SECTIONS = frozenset(
    {"cloud", "preemption", "requests", "handoff", "aio", "aio-handoff", "serve"}
)


SECTIONS: dict[str, Callable[[Bench], Section]] = {
    "overhead": section_overhead,
    "cloud": section_cloud,
    # Before requests, whose table counts the requests of these same preemption runs.
    "preemption": section_preemption,
    "requests": section_requests,
    "handoff": section_handoff,
    "contention": section_contention,
    "aio": section_aio,
    "aio-handoff": section_aio_handoff,
    "serve": section_serve,
    "push": section_push,
    "profile": section_profile,
}


@contextmanager
def _scratch(parent: str | None) -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="prioritylock-bench-", dir=parent))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _emulators(bench: Bench, kinds: Sequence[StoreKind], sections: Sequence[str]) -> Iterator[None]:
    """The emulators of the picked cloud stores, running (and their store URLs' environment set)
    while the ``with`` block runs, if a section that uses them is picked; stopped however it
    ends. SIGTERM unwinds like Ctrl-C, so the servers are stopped then too."""
    names = [k.emulator for k in kinds if k.emulator is not None]
    if not names or not set(sections) & CLOUD_SECTIONS:
        yield
        return

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, terminate)
    work = bench.root / "emulators"
    work.mkdir()
    try:
        print(f"starting emulators: {', '.join(names)}", flush=True)
        with _servers.running(names, work) as running:
            env: dict[str, str | None] = {}
            for emulator in running.values():
                env.update(emulator.env())
            bench.emulators = running
            with _servers.environment(env):
                yield
            print("stopping emulators", flush=True)
    finally:
        bench.emulators = {}
        signal.signal(signal.SIGTERM, previous)


def _run_sections(
    bench: Bench, wanted: Sequence[str], machine: Json, done: dict[str, Section]
) -> None:
    machine["emulators"] = {
        name: {"startup_s": round(e.startup_s, 2), "endpoint": e.endpoint}
        for name, e in bench.emulators.items()
    }
    if bench.emulators:
        machine["emulator_versions"] = _servers.versions()
        print(emulator_line(machine), flush=True)
    for name, run in SECTIONS.items():
        if name in wanted:
            load = load_average()
            cpu = cpu_times()
            t0 = time.monotonic()
            section = done[name] = run(bench)
            section.elapsed_s = time.monotonic() - t0
            section.load = load
            section.steal = steal_percent(cpu, cpu_times())
            print()
            print(section.render(), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test (< 60 s)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    parser.add_argument("--profile", action="store_true", help="also profile the cycle")
    parser.add_argument(
        "--sections",
        default="",
        help=f"comma-separated subset of {','.join(SECTIONS)} (default: all but profile)",
    )
    parser.add_argument(
        "--stores",
        default="",
        help=f"comma-separated subset of {','.join(k.name for k in STORE_KINDS)} (default: all)",
    )
    parser.add_argument("--dir", default=None, help="parent of the scratch dir (default: $TMPDIR)")
    parser.add_argument("--child-handoff", help=argparse.SUPPRESS)
    parser.add_argument("--child-contention", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_handoff:
        return child_handoff(args.child_handoff)
    if args.child_contention:
        return child_contention(args.child_contention)

    wanted = [s.strip() for s in args.sections.split(",") if s.strip()] or [
        s for s in SECTIONS if s != "profile" or args.profile
    ]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        parser.error(f"unknown sections: {', '.join(unknown)}")
    picked = {s.strip() for s in args.stores.split(",") if s.strip()}
    unknown = sorted(picked - {k.name for k in STORE_KINDS})
    if unknown:
        parser.error(f"unknown stores: {', '.join(unknown)}")
    kinds = tuple(k for k in STORE_KINDS if not picked or k.name in picked)
    started = time.monotonic()
    with _scratch(args.dir) as root:
        bench = Bench(sizes=QUICK if args.quick else FULL, root=root, kinds=kinds)
        machine = machine_info(root)
        print(f"prioritylock benchmarks{' (quick)' if args.quick else ''}")
        print(machine_line(machine), flush=True)
        done: dict[str, Section] = {}
        try:
            with _emulators(bench, kinds, wanted):
                _run_sections(bench, wanted, machine, done)
        except EmulatorError as exc:
            print(f"error: {exc}", file=sys.stderr)
            print("(install it, or leave its store out with --stores)", file=sys.stderr)
            return 2
    elapsed = time.monotonic() - started
    machine["loadavg_end"] = os.getloadavg() if hasattr(os, "getloadavg") else None
    payload: Json = {
        "machine": machine,
        "quick": args.quick,
        "stores": [k.name for k in kinds],
        "sizes": asdict(bench.sizes),
        "elapsed_s": round(elapsed, 1),
        "sections": {
            n: {
                "title": s.title,
                "elapsed_s": round(s.elapsed_s, 1),
                "load": s.load,
                "steal_percent": s.steal,
                "rows": s.rows,
                "notes": s.notes,
            }
            for n, s in done.items()
        },
    }
    write_json(args.json, payload)
    print(f"\n{elapsed:.1f} s; results in {args.json}")
    if args.json.resolve() == DEFAULT_JSON:
        for path in figures.write_figures():
            print(f"redrawn: {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
