"""Why the event loop stalls while 1,000 async leases renew on moto (issue 11's 20 ms line).

    python benchmarks/loop_lag.py [--rounds 3] [--windows 3] [--window 6.5] [--leases 1000]
                                  [--interval 6] [--variants a,b,...] [--json PATH]

One moto server is started here (``_servers.py``) and shared by every variant. Each variant runs
in a fresh child process (this script again, at normal priority), so that a thread pool, a Rust
runtime or the garbage collector's state cannot leak from one variant into the next; the rounds
interleave the variants (round r runs them in order, rotated by r). In each child a probe task
sleeps 5 ms at a time and records how late it wakes (the test's ``_probe``), in ``--windows``
windows of ``--window`` seconds, while the traffic of ``--leases`` leases renewed every
``--interval`` seconds (1,000 every 6 s: about 167 conditional PUTs a second) goes on. The leases
are taken one by one, evenly spread over one interval, so that their renewals are spread the same
way in every variant (taking them all at once would bunch them on a fast store). Variants:

- ``native``: ``AsyncLock`` leases on ``S3Store``, as the library is today: reads, creates and
  replaces on obstore's native async client (``async_io=native``).
- ``pool32``: the same leases with ``async_io=threads``: boto3 on the library's 32-thread I/O
  pool, as the library was before the native path (and still is with ``async_io=threads``).
- ``pool8``: the same with the pool capped at 8 threads (``_alock.NETWORK_WORKERS`` patched).
- ``sleepy``: control A. ``AsyncLock`` leases on a memory store whose every call first sleeps
  5 ms, made on the 32-thread pool (the wrapper says it is shared across hosts): pool threads that
  wait without holding the GIL, no boto3, no moto traffic.
- ``idle``: control B. No requests from the probing process at all, while another process (this
  script with ``--driver``: raw botocore calls on 32 threads) sends moto the same traffic.
- ``obstore``: the same traffic sent by the probing process with obstore's async API (Rust
  ``object_store`` on its own runtime, awaited on the loop): no Python threads doing I/O.
- ``pool32-nogc``, ``sleepy-nogc``, ``obstore-nogc`` (diagnostics, run only when named): the same
  with the cyclic garbage collector off in the probing process (``gc.freeze()``, ``gc.disable()``);
  ``pool32-si1``, ``pool32-nogc-si1``: with ``sys.setswitchinterval(0.001)`` (5 ms by default).

The raw traffic (``idle``, ``obstore``) is what the leases send moto: with these timings an
``AsyncLock`` lease is read (its watch, a conditional ``GET`` that moto answers 304) about as
often as it is renewed, so per lease and interval a plain ``GET`` and a ``PUT`` with ``If-Match``
the lease's last ETag; each key is created (``If-None-Match: *``) first, in the same spread.

Per variant run: each window's p50, p99 and max lateness, the best window's max (the figure issue
11's test judges), the renewals made in the windows, this process's and moto's CPU over the
windows (% of one core), the machine's busy share and its load average. Every renewal must
succeed (a lost lease or a refused PUT fails the run).

obstore comes with the ``s3`` extra; without it the ``native`` and ``obstore`` variants are
skipped with a message.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import _servers  # benchmarks/_servers.py: run as a script, this directory is on the path
from _harness import cpu_split, cpu_times, machine_info, percentile, process_cpu_s, write_json

from prioritylock import AsyncScheduler, LockBuilder, SystemClock, _alock
from prioritylock.stores import MemoryStore, ObjectStore, StoreCapabilities, open_store
from prioritylock.testing import DelegatingStore

T = TypeVar("T")

VARIANTS = ("native", "pool32", "pool8", "sleepy", "idle", "obstore")
#: Diagnostics, run only when named in ``--variants``: a variant with the cyclic garbage collector
#: off in the probing process (``gc.freeze()`` then ``gc.disable()`` before the leases are taken).
NOGC = ("pool32-nogc", "sleepy-nogc", "obstore-nogc")
#: Diagnostics, the same: ``-si1`` sets the interpreter's thread switch interval to 1 ms (5 ms by
#: default: how long a thread that wants the GIL waits before it asks the holder to let go).
SI1 = ("pool32-si1", "pool32-nogc-si1")
PROBE_STEP = 0.005
SLEEPY_CALL_S = 0.005
DRIVER_THREADS = 32
SETTINGS = ("rounds", "windows", "window", "leases", "interval")


# -- the probe -------------------------------------------------------------------------------------


async def _probe(stop: asyncio.Event, lags: list[float]) -> None:
    """How late the loop wakes a task that asked to sleep ``PROBE_STEP``."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(PROBE_STEP)
        lags.append(loop.time() - start - PROBE_STEP)


def _window_stats(lags: Sequence[float]) -> dict[str, float]:
    return {
        "wakeups": len(lags),
        "p50_ms": round(1000 * statistics.median(lags), 3),
        "p99_ms": round(1000 * percentile(lags, 0.99), 3),
        "max_ms": round(1000 * max(lags), 3),
    }


async def _probe_windows(
    args: argparse.Namespace, moto_pid: int, count: Callable[[], int]
) -> dict[str, Any]:
    """Probe ``args.windows`` windows; with them this process's, moto's and the machine's CPU
    and the requests ``count()`` says were made meanwhile."""
    before = (time.process_time(), process_cpu_s(moto_pid), cpu_times(), count())
    started = time.monotonic()
    windows = []
    for _ in range(args.windows):
        stop = asyncio.Event()
        lags: list[float] = []
        probe = asyncio.create_task(_probe(stop, lags))
        await asyncio.sleep(args.window)
        stop.set()
        await probe
        windows.append(_window_stats(lags))
    elapsed = time.monotonic() - started
    moto_after = process_cpu_s(moto_pid)
    moto_cpu = None
    if before[1] is not None and moto_after is not None:
        moto_cpu = round(100 * (moto_after - before[1]) / elapsed, 1)
    requests = count() - before[3]
    return {
        "windows": windows,
        "best_max_ms": min(w["max_ms"] for w in windows),
        "requests": requests,
        "requests_per_s": round(requests / elapsed, 1),
        "seconds": round(elapsed, 2),
        "cpu_percent": round(100 * (time.process_time() - before[0]) / elapsed, 1),
        "moto_cpu_percent": moto_cpu,
        "machine": cpu_split(before[2], cpu_times()),
        "load": os.getloadavg()[0],
    }


async def _spread(n: int, interval: float, start: Callable[[int], Any]) -> list[Any]:
    """Start ``start(i)`` for ``i`` in ``range(n)``, evenly spread over ``interval``; gather."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    tasks = []
    for i in range(n):
        delay = t0 + i * interval / n - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(start(i)))
    return list(await asyncio.gather(*tasks))


# -- variants with AsyncLock leases ---------------------------------------------------------------


class SleepyStore(DelegatingStore):
    """Control A: a memory store whose every call first sleeps without the GIL, and which says
    it is shared across hosts, so ``AsyncLock`` makes its calls on the network pool."""

    def _forward(self, op: str, key: str, call: Callable[[], T]) -> T:
        time.sleep(SLEEPY_CALL_S)
        return call()

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(shared_across_processes=True, shared_across_hosts=True)


async def _lock_variant(args: argparse.Namespace, store: ObjectStore) -> dict[str, Any]:
    clock = SystemClock()
    scheduler = AsyncScheduler(clock)
    prefix = uuid.uuid4().hex[:8]
    locks = [
        LockBuilder()
        .store(store)
        .path("lag", prefix, f"lease-{i}")
        .owner(f"o{i}")
        .clock(clock)
        .lease_timeout(10 * args.interval)
        .renew_interval(args.interval)
        .build_async(scheduler=scheduler)
        for i in range(args.leases)
    ]
    try:
        took = await _spread(args.leases, args.interval, lambda i: locks[i].try_lock())
        if not all(took):
            raise SystemExit(f"{took.count(False)} leases were not acquired")
        kinds = ("reads", "creates", "replaces", "deletes", "lists")
        before = {kind: getattr(store.stats, kind) for kind in kinds}
        result = await _probe_windows(args, args.moto_pid, lambda: store.stats.replaces)
        result["store_requests"] = {k: getattr(store.stats, k) - before[k] for k in kinds}
        lost = sum(not lock.is_current_owner() for lock in locks)
        if lost:
            raise SystemExit(f"{lost} leases lost")
    finally:
        await scheduler.aclose()
    result["pool_threads"] = _alock.NETWORK_WORKERS
    return result


# -- raw renewals: obstore in this process, botocore in a driver process --------------------------


def _document(i: int, seq: int) -> bytes:
    """A lease-sized body that differs on every write (S3 ETags hash the content)."""
    return json.dumps({"owner": f"o{i}", "seq": seq, "nonce": uuid.uuid4().hex}).encode() * 4


async def _obstore_variant(args: argparse.Namespace) -> dict[str, Any]:
    import obstore  # type: ignore[import-not-found, unused-ignore]
    from obstore.store import S3Store  # type: ignore[import-not-found, unused-ignore]

    store = S3Store(
        args.bucket,
        endpoint=args.endpoint,
        region=_servers.REGION,
        access_key_id=os.environ["AWS_ACCESS_KEY_ID"],
        secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
        virtual_hosted_style_request=False,
        conditional_put="etag",
        client_options={"allow_http": True},
        retry_config={"max_retries": 0},
    )
    prefix = f"lag/{uuid.uuid4().hex[:8]}/lease-"
    etags: list[str] = [""] * args.leases
    done = [0]

    async def create(i: int) -> None:
        result = await obstore.put_async(store, f"{prefix}{i}", _document(i, 0), mode="create")
        etags[i] = str(result["e_tag"])

    async def renew(i: int, seq: int) -> None:
        got = await obstore.get_async(store, f"{prefix}{i}")
        await got.bytes_async()
        mode: Any = {"e_tag": etags[i]}
        result = await obstore.put_async(store, f"{prefix}{i}", _document(i, seq), mode=mode)
        etags[i] = str(result["e_tag"])
        done[0] += 1

    await _spread(args.leases, args.interval, create)
    return await _paced(args, renew, lambda: done[0])


async def _paced(
    args: argparse.Namespace, renew: Callable[[int, int], Any], count: Callable[[], int]
) -> dict[str, Any]:
    """Renew lease ``seq % leases`` at ``seq * interval / leases`` while probing."""
    loop = asyncio.get_running_loop()
    failures: list[BaseException] = []
    tasks: set[asyncio.Task[Any]] = set()

    def settled(task: asyncio.Task[Any]) -> None:
        tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            failures.append(task.exception())  # type: ignore[arg-type]

    async def pacer() -> None:
        t0 = loop.time()
        seq = 0
        while True:
            delay = t0 + seq * args.interval / args.leases - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            task = asyncio.create_task(renew(seq % args.leases, seq))
            tasks.add(task)
            task.add_done_callback(settled)
            seq += 1

    pacing = asyncio.create_task(pacer())
    try:
        result = await _probe_windows(args, args.moto_pid, count)
    finally:
        pacing.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if failures:
        raise SystemExit(f"{len(failures)} renewals failed, first: {failures[0]!r}")
    return result


def _driver(args: argparse.Namespace) -> int:
    """Control B's traffic, from a process of its own: the same GET + PUT pairs with botocore on
    ``DRIVER_THREADS`` threads. Prints ``ready`` once every key exists, renews for
    ``args.seconds``, then prints the renewals made and the failures as JSON."""
    key = (os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"])
    raw = _servers._RawS3(args.endpoint, args.bucket, key)
    prefix = f"lag/{uuid.uuid4().hex[:8]}/lease-"
    etags: list[str] = [""] * args.leases
    counts = {"renewals": 0, "failures": 0}
    mutex = threading.Lock()

    def put(i: int, seq: int) -> None:
        try:
            if seq:
                raw.get(f"{prefix}{i}")
            etag = raw.put(f"{prefix}{i}", _document(i, seq), etags[i] or None)
        except Exception:
            with mutex:
                counts["failures"] += 1
            return
        etags[i] = etag
        if seq:
            with mutex:
                counts["renewals"] += 1

    with ThreadPoolExecutor(DRIVER_THREADS) as pool:
        t0 = time.monotonic()
        for i in range(args.leases):  # create, spread over one interval
            time.sleep(max(0.0, t0 + i * args.interval / args.leases - time.monotonic()))
            pool.submit(put, i, 0)
        print("ready", flush=True)
        t0 = time.monotonic()
        end = t0 + args.seconds
        seq = args.leases
        while (now := time.monotonic()) < end:
            time.sleep(max(0.0, t0 + (seq - args.leases) * args.interval / args.leases - now))
            pool.submit(put, seq % args.leases, seq)
            seq += 1
    raw.close()
    print(json.dumps(counts), flush=True)
    return 1 if counts["failures"] else 0


async def _idle_variant(args: argparse.Namespace) -> dict[str, Any]:
    return await _probe_windows(args, args.moto_pid, lambda: 0)


def _child(args: argparse.Namespace) -> int:
    variant: str = args.child
    if variant.endswith("-si1"):
        variant = variant.removesuffix("-si1")
        sys.setswitchinterval(0.001)
    if variant.endswith("-nogc"):
        variant = variant.removesuffix("-nogc")
        gc.freeze()
        gc.disable()
    if variant in ("native", "pool32", "pool8"):
        _alock.NETWORK_WORKERS = 8 if variant == "pool8" else 32
        store = open_store(
            f"s3://{args.bucket}/lag?endpoint={args.endpoint}&region={_servers.REGION}"
            f"&addressing=path&async_io={'native' if variant == 'native' else 'threads'}"
        )
        try:
            result = asyncio.run(_lock_variant(args, store))
        finally:
            store.close()
    elif variant == "sleepy":
        result = asyncio.run(_lock_variant(args, SleepyStore(MemoryStore())))
    elif variant == "idle":
        result = asyncio.run(_idle_variant(args))
    elif variant == "obstore":
        result = asyncio.run(_obstore_variant(args))
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    print(json.dumps(result), flush=True)
    return 0


# -- the parent: moto, the rounds, the table -------------------------------------------------------


def _has_obstore() -> bool:
    try:
        import obstore  # type: ignore[import-not-found, unused-ignore]  # noqa: F401
    except ImportError:
        return False
    return True


def _common(args: argparse.Namespace, endpoint: str, bucket: str, moto_pid: int) -> list[str]:
    return [
        "--endpoint",
        endpoint,
        "--bucket",
        bucket,
        "--moto-pid",
        str(moto_pid),
        "--leases",
        str(args.leases),
        "--interval",
        str(args.interval),
        "--windows",
        str(args.windows),
        "--window",
        str(args.window),
    ]


def _run_variant(
    variant: str, args: argparse.Namespace, common: list[str], timeout: float
) -> dict[str, Any]:
    me = [sys.executable, "-X", "faulthandler", str(Path(__file__).resolve())]
    driver = None
    try:
        if variant == "idle":
            seconds = args.windows * args.window + 5
            driver = subprocess.Popen(
                [*me, "--driver", "--seconds", str(seconds), *common],
                stdout=subprocess.PIPE,
                text=True,
            )
            assert driver.stdout is not None
            if driver.stdout.readline().strip() != "ready":
                raise SystemExit("the driver did not start")
        child = subprocess.run(
            [*me, "--child", variant, *common],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if child.returncode != 0:
            raise SystemExit(
                f"{variant} failed (exit status {child.returncode}):\n{child.stderr[-3000:]}"
            )
        result: dict[str, Any] = json.loads(child.stdout.strip().splitlines()[-1])
        if driver is not None:
            out, _ = driver.communicate(timeout=timeout)
            counts = json.loads(out.strip().splitlines()[-1])
            if driver.returncode != 0:
                raise SystemExit(f"the driver's renewals failed: {counts}")
            # The driver renews over its whole run (the windows and 5 s more): its rate.
            result["requests"] = counts["renewals"]
            result["requests_per_s"] = round(counts["renewals"] / seconds, 1)
        return result
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
            driver.wait()


def _ms(rows: Sequence[dict[str, Any]], name: str) -> str:
    return ", ".join(f"{row[name]:.1f}" for row in rows)


def _fmt_row(variant: str, runs: Sequence[dict[str, Any]]) -> str:
    def span(values: Sequence[float]) -> str:
        return f"{min(values):.1f}-{max(values):.1f}"

    wins = [w for r in runs for w in r["windows"]]
    return (
        f"{variant:8} | {span([w['p50_ms'] for w in wins]):>11} | "
        f"{span([w['p99_ms'] for w in wins]):>11} | {span([w['max_ms'] for w in wins]):>12} | "
        f"{_ms(runs, 'best_max_ms'):>18} | "
        f"{span([r['cpu_percent'] for r in runs]):>11} | "
        f"{span([r['moto_cpu_percent'] or 0.0 for r in runs]):>11} | "
        f"{span([(r['machine'] or {}).get('busy', 0.0) for r in runs]):>11} | "
        f"{span([r['load'] for r in runs]):>9} | "
        f"{_ms(runs, 'requests_per_s')}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window", type=float, default=6.5)
    parser.add_argument("--leases", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=6.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", type=Path, default=None)
    # the children's side
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", help=argparse.SUPPRESS)
    parser.add_argument("--bucket", help=argparse.SUPPRESS)
    parser.add_argument("--moto-pid", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.driver:
        return _driver(args)
    if args.child:
        return _child(args)

    variants = [v for v in args.variants.split(",") if v]
    unknown = set(variants) - set(VARIANTS) - set(NOGC) - set(SI1)
    if unknown:
        parser.error(f"unknown variants: {', '.join(sorted(unknown))}")
    if not _has_obstore() and any(v.startswith(("obstore", "native")) for v in variants):
        print("obstore is not installed (pip install 'prioritylock[s3]'): skipping its variants")
        variants = [v for v in variants if not v.startswith(("obstore", "native"))]
    machine = machine_info()
    results: dict[str, list[dict[str, Any]]] = {v: [] for v in variants}
    failed: list[dict[str, Any]] = []
    timeout = 3 * args.interval + args.windows * args.window + 120
    with (
        tempfile.TemporaryDirectory(prefix="prioritylock-lag-") as work,
        _servers.running(["s3-moto"], Path(work)) as running,
    ):
        moto = running["s3-moto"]
        with _servers.environment(moto.env()):
            bucket = moto.make_bucket()
            common = _common(args, moto.endpoint, bucket, moto.pid)
            for r in range(args.rounds):
                order = variants[r % len(variants) :] + variants[: r % len(variants)]
                for variant in order:
                    try:
                        result = _run_variant(variant, args, common, timeout)
                    except SystemExit as exc:  # recorded; the run goes on, and fails at the end
                        print(f"round {r + 1} {variant}: {exc}", flush=True)
                        failed.append({"variant": variant, "round": r + 1, "error": str(exc)})
                        continue
                    result["round"] = r + 1
                    results[variant].append(result)
                    w = result["windows"]
                    kinds = (
                        f"; requests {result['store_requests']}"
                        if "store_requests" in result
                        else ""
                    )
                    print(
                        f"round {r + 1} {variant:8} best max {result['best_max_ms']:6.1f} ms; "
                        f"windows max {_ms(w, 'max_ms')}; p99 {_ms(w, 'p99_ms')}; "
                        f"cpu {result['cpu_percent']}%, moto {result['moto_cpu_percent']}%, "
                        f"machine {result['machine']}, load {result['load']:.2f}, "
                        f"{result['requests_per_s']} renewals/s{kinds}",
                        flush=True,
                    )
        versions = _servers.versions()
    header = (
        "variant  | p50 ms (win) | p99 ms (win) | max ms (win) | best-window max/run | "
        "cpu % core | moto cpu % | machine busy % | load | renewals/s per run"
    )
    print()
    print(header)
    for variant in variants:
        if results[variant]:
            print(_fmt_row(variant, results[variant]))
    for failure in failed:
        print(f"FAILED: round {failure['round']} {failure['variant']}")
    if args.json is not None:
        obstore_version = None
        if any(v.startswith("obstore") for v in variants):
            import importlib.metadata

            obstore_version = importlib.metadata.version("obstore")
        write_json(
            args.json,
            {
                "machine": machine,
                "versions": {**versions, "obstore": obstore_version},
                "settings": {k: getattr(args, k) for k in SETTINGS},
                "probe_step_s": PROBE_STEP,
                "results": results,
                "failed": failed,
            },
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
