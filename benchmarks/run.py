"""prioritylock benchmarks: figures, not pass/fail. One run prints every table side by side.

    python benchmarks/run.py [--quick] [--stores a,b] [--sections a,b] [--json PATH]

Stores: ``STORE_KINDS`` in ``_bench.py`` (the emulated ones started on free ports of 127.0.0.1
for the run); sections: :data:`ORDER`, each ``section_NAME(Bench) -> Section`` in ``sections/``
(benchmarks/README.md says what each measures). A run that writes the default results file also
redraws the docs' figures.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

import _servers  # benchmarks/_servers.py: run as a script, this directory is on the path
import figures
from _bench import FULL, HERE, QUICK, STORE_KINDS, Bench
from _harness import CpuWindow, Json, Section, machine_info, write_json

DEFAULT_JSON = HERE / "results" / "latest.json"

#: The sections in the order they run: ``section_NAME(Bench) -> Section`` of ``sections/NAME.py``
#: (preemption before requests, whose table counts the requests of those same preemption runs).
ORDER = ["overhead", "cloud", "preemption", "requests", "contention", "aio", "serve", "push"]
ORDER += ["native"]  # Redis, ZooKeeper, etcd against their own locks
SECTIONS: dict[str, Callable[[Bench], Section]] = {
    name: getattr(importlib.import_module(f"sections.{name}"), f"section_{name}") for name in ORDER
}
#: The sections the emulators (started only when one of them runs) and the servers are for.
CLOUD_SECTIONS, SERVER_SECTIONS = frozenset(ORDER) - {"overhead", "native"}, {"native", "push"}


def _pick(parser: argparse.ArgumentParser, value: str, choices: Sequence[str]) -> list[str]:
    """The comma-separated names of ``value`` (all ``choices`` if none), checked."""
    picked = [x.strip() for x in value.split(",") if x.strip()] or list(choices)
    if unknown := sorted(set(picked) - set(choices)):
        parser.error(f"unknown: {', '.join(unknown)} (choose from {', '.join(choices)})")
    return picked


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write results")
    for option in ("--sections", "--stores"):
        parser.add_argument(option, default="", help="comma-separated (default: all)")
    args = parser.parse_args(argv)
    wanted = _pick(parser, args.sections, list(SECTIONS))
    picked = _pick(parser, args.stores, [k.name for k in STORE_KINDS])
    kinds = tuple(k for k in STORE_KINDS if k.name in picked)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="prioritylock-bench-") as tmp:
        bench = Bench(sizes=QUICK if args.quick else FULL, root=Path(tmp), kinds=kinds)
        machine = machine_info(bench.root)
        print(" | ".join(f"{k} {v}" for k, v in machine.items()), flush=True)
        done: dict[str, Section] = {}
        # The emulators of the picked stores, if a section that uses them is picked.
        uses = {k: set(wanted) & (SERVER_SECTIONS if k.server else CLOUD_SECTIONS) for k in kinds}
        names = [k.emulator for k in kinds if k.emulator and uses[k]]
        try:
            with _servers.running(names, bench.root) as bench.emulators:
                if running := bench.emulators:
                    machine["emulator_versions"] = _servers.versions()
                    machine["emulators"] = {
                        n: {"startup_s": round(e.startup_s, 2), "endpoint": e.endpoint}
                        for n, e in running.items()
                    }
                for name in (n for n in SECTIONS if n in wanted):
                    with CpuWindow() as window:
                        section = done[name] = SECTIONS[name](bench)
                    section.elapsed_s, section.load = window.seconds, window.load
                    section.steal = window.machine["steal"]
                    print(f"\n{section.render()}", flush=True)
        except _servers.EmulatorError as exc:
            print(f"error: {exc}\n(install it, or leave it out with --stores)", file=sys.stderr)
            return 2
    elapsed = time.monotonic() - started
    machine["loadavg_end"] = os.getloadavg()
    sections = {
        n: {"title": s.title, "elapsed_s": round(s.elapsed_s, 1), "load": s.load}
        | {"steal_percent": s.steal, "rows": s.rows, "notes": s.notes}
        for n, s in done.items()
    }
    payload: Json = {"machine": machine, "quick": args.quick, "stores": [k.name for k in kinds]}
    payload |= {"sizes": asdict(bench.sizes), "elapsed_s": round(elapsed, 1), "sections": sections}
    write_json(args.json, payload)
    print(f"\n{elapsed:.1f} s; results in {args.json}")
    if args.json.resolve() == DEFAULT_JSON:
        for path in figures.write_figures():
            print(f"redrawn: {path.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
