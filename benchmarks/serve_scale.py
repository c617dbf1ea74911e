"""Scale through the service: N locks held at once through one ``prioritylock serve``, and the
CPU the service process uses to hold them.

    python benchmarks/serve_scale.py [--holders 1000] [--seconds 30] [--idle 5]
                                     [--mode alpha1|streams] [--store URL] [--expiry 600]
                                     [--concurrent 32] [--json PATH]

One service (a subprocess on free ports of 127.0.0.1; ``--store``, default a memory store, so
the figures are the service's own cost) and one client process (this one, aiohttp, at most
``--concurrent`` requests in flight). In order:

1. idle: the service's CPU over ``--idle`` seconds (5) with nothing held (its floor);
2. acquire: N holders take N distinct locks (every answer checked); wall time and the
   service's CPU per acquisition;
3. hold: the window (``--seconds``), sampled every second: the service's CPU as % of one core
   (``/proc/PID/stat``), the machine's CPU (``/proc/stat``), and how long a health check takes
   to answer (a stalled event loop shows there); then every lock is checked still held (another
   owner's TryLock must fail);
4. release: every holder unlocks (status 0 each), and the service's CPU for it.

Modes (``Holders`` implementations):

- ``alpha1`` (today): each holder is a TryLock of ``--expiry`` seconds (default 600, longer than
  the run). Alpha1 leases are never renewed, so holding them should cost the service nothing:
  the window measures that.
- ``streams``: each holder an NDJSON stream of the alpha2 API (``POST
  /v1.0-alpha2/lock/{store}/{resourceId}`` with ``Accept: application/x-ndjson``), whose lease the
  service renews while the stream is open: the window then measures the renewals' cost and,
  from the streams' ``ping`` lines, whether they stay on time. Not built yet: fill in
  :func:`open_streams` when the alpha2 API lands.

The script exits with status 1 if any answer is wrong or a lock was not held to the end.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import aiohttp
from _harness import cpu_split, cpu_times, load_average, machine_info, ms_summary, write_json
from _service import Service, ServiceError

STORE = "locks"


class Holders(Protocol):
    """N locks held through the service, however a mode holds them."""

    async def acquire(self) -> None:
        """Take every lock; raise :class:`ServiceError` if one is refused."""

    async def check_held(self) -> None:
        """Raise :class:`ServiceError` unless every lock is still held."""

    async def release(self) -> None:
        """Give every lock back; raise :class:`ServiceError` on a wrong answer."""


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    async with session.post(url, json=body) as response:
        if response.status != 200:
            raise ServiceError(f"POST {url}: {response.status} {await response.text()}")
        return await response.json()


class Alpha1Holders:
    """N alpha1 locks of ``expiry`` seconds: resource ``hold-I``, owner ``holder-I``."""

    def __init__(
        self, session: aiohttp.ClientSession, service: Service, n: int, expiry: int, limit: int
    ) -> None:
        self._session = session
        self._base = f"http://127.0.0.1:{service.http_port}/v1.0-alpha1"
        self._n = n
        self._expiry = expiry
        self._limit = asyncio.Semaphore(limit)
        self._run = uuid.uuid4().hex[:8]

    def _resource(self, i: int) -> str:
        return f"hold-{self._run}-{i}"

    async def _each(self, call: Any) -> list[Any]:
        async def one(i: int) -> Any:
            async with self._limit:
                return await call(i)

        return list(await asyncio.gather(*(one(i) for i in range(self._n))))

    async def acquire(self) -> None:
        async def lock(i: int) -> Any:
            body = {
                "resourceId": self._resource(i),
                "lockOwner": f"holder-{i}",
                "expiryInSeconds": self._expiry,
            }
            return (await _post(self._session, f"{self._base}/lock/{STORE}", body))["success"]

        refused = [i for i, ok in enumerate(await self._each(lock)) if ok is not True]
        if refused:
            raise ServiceError(f"{len(refused)} of {self._n} TryLocks refused, e.g. #{refused[0]}")

    async def check_held(self) -> None:
        async def rival(i: int) -> Any:
            body = {
                "resourceId": self._resource(i),
                "lockOwner": "rival",
                "expiryInSeconds": 1,
            }
            return (await _post(self._session, f"{self._base}/lock/{STORE}", body))["success"]

        taken = [i for i, ok in enumerate(await self._each(rival)) if ok is not False]
        if taken:
            raise ServiceError(f"{len(taken)} of {self._n} locks were free to a rival")

    async def release(self) -> None:
        async def unlock(i: int) -> Any:
            body = {"resourceId": self._resource(i), "lockOwner": f"holder-{i}"}
            return (await _post(self._session, f"{self._base}/unlock/{STORE}", body))["status"]

        wrong = [(i, s) for i, s in enumerate(await self._each(unlock)) if s != 0]
        if wrong:
            raise ServiceError(f"{len(wrong)} of {self._n} unlocks answered non-zero: {wrong[:3]}")


def open_streams(
    session: aiohttp.ClientSession, service: Service, n: int, ttl_s: float, limit: int
) -> Holders:
    """N alpha2 NDJSON streams, one lock each, held until :meth:`Holders.release`.

    To fill in once ``POST /v1.0-alpha2/lock/{store}/{resourceId}`` exists: ``acquire`` opens N
    ``session.post(..., json={"ttl": ..., "owner": ...}, headers={"Accept":
    "application/x-ndjson"})`` and reads each one's first line (``lock-acquired``, with a fence),
    then keeps a task per stream reading ``ping`` lines (record how late each came) and failing
    on ``lost`` or ``error``; ``check_held`` checks no stream ended or reported a loss;
    ``release`` closes the streams and checks each lock is free again.
    """
    raise NotImplementedError(
        "streams mode needs the alpha2 API (POST /v1.0-alpha2/lock/{store}/{resourceId}); "
        "fill in open_streams() in benchmarks/serve_scale.py"
    )


async def _health_ms(session: aiohttp.ClientSession, service: Service) -> float:
    t0 = time.perf_counter()
    async with session.get(f"http://127.0.0.1:{service.http_port}/v1.0/healthz") as response:
        if response.status != 204:
            raise ServiceError(f"healthz answered {response.status}")
    return 1000 * (time.perf_counter() - t0)


async def _window(
    session: aiohttp.ClientSession, service: Service, seconds: float
) -> dict[str, Any]:
    """Sample the service's CPU and a health check's latency once a second for ``seconds``."""
    machine = cpu_times()
    cpu0, t0 = service.cpu_s(), time.monotonic()
    shares: list[float] = []
    health: list[float] = []
    last_cpu, last_t = cpu0, t0
    while time.monotonic() - t0 < seconds:
        await asyncio.sleep(1.0)  # the sampling period, not a synchronisation
        health.append(await _health_ms(session, service))
        cpu, now = service.cpu_s(), time.monotonic()
        shares.append(100 * (cpu - last_cpu) / (now - last_t))
        last_cpu, last_t = cpu, now
    elapsed = max(time.monotonic() - t0, 1e-6)
    return {
        "seconds": round(elapsed, 2),
        "service_cpu_percent": round(100 * (service.cpu_s() - cpu0) / elapsed, 2),
        "service_cpu_percent_max_1s": round(max(shares), 2) if shares else None,
        "health_ms": ms_summary([h / 1000 for h in health]),
        "machine_cpu": cpu_split(machine, cpu_times()),
    }


async def _phase(service: Service, action: Any, n: int) -> dict[str, Any]:
    cpu0, t0 = service.cpu_s(), time.perf_counter()
    await action()
    wall, cpu = time.perf_counter() - t0, service.cpu_s() - cpu0
    return {
        "wall_s": round(wall, 3),
        "per_s": round(n / wall, 1),
        "service_cpu_s": round(cpu, 3),
        "service_cpu_us_each": round(1e6 * cpu / n, 1),
    }


async def run(args: argparse.Namespace, service: Service) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=args.concurrent)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        holders: Holders
        if args.mode == "alpha1":
            holders = Alpha1Holders(session, service, args.holders, args.expiry, args.concurrent)
        else:
            holders = open_streams(session, service, args.holders, args.expiry, args.concurrent)
        result: dict[str, Any] = {"load_start": load_average()}
        print(f"idle window, {args.idle:g} s ...", flush=True)
        result["idle"] = await _window(session, service, args.idle)
        print(f"acquiring {args.holders} locks ...", flush=True)
        result["acquire"] = await _phase(service, holders.acquire, args.holders)
        print(f"holding them for {args.seconds:g} s ...", flush=True)
        result["load_hold"] = load_average()
        result["hold"] = await _window(session, service, args.seconds)
        result["check"] = await _phase(service, holders.check_held, args.holders)
        result["release"] = await _phase(service, holders.release, args.holders)
        return result


def _report(result: dict[str, Any], n: int) -> None:
    idle, hold = result["idle"], result["hold"]
    acq, rel = result["acquire"], result["release"]
    print(f"idle: service CPU {idle['service_cpu_percent']:.2f}% of a core")
    print(
        f"acquire {n}: {acq['wall_s']:.2f} s ({acq['per_s']:,.0f}/s), "
        f"service CPU {acq['service_cpu_us_each']:,.0f} µs each"
    )
    print(
        f"hold {n} for {hold['seconds']:.0f} s: service CPU {hold['service_cpu_percent']:.2f}% "
        f"of a core (max {hold['service_cpu_percent_max_1s']}% in a second); health check "
        f"p50 {hold['health_ms']['p50']} ms, max {hold['health_ms']['max']} ms; "
        f"machine {hold['machine_cpu']}"
    )
    print(
        f"all {n} still held at the end; release: {rel['wall_s']:.2f} s, "
        f"service CPU {rel['service_cpu_us_each']:,.0f} µs each"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--holders", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="the hold window")
    parser.add_argument("--idle", type=float, default=5.0, help="the idle window before, s")
    parser.add_argument("--mode", choices=("alpha1", "streams"), default="alpha1")
    parser.add_argument("--store", default=None, help="store URL (default: a memory store)")
    parser.add_argument("--expiry", type=int, default=600, help="each lock's expiry / ttl, s")
    parser.add_argument("--concurrent", type=int, default=32, help="requests in flight")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    url = args.store or f"memory://serve-scale-{uuid.uuid4().hex[:8]}"
    machine = machine_info()
    with (
        tempfile.TemporaryDirectory(prefix="prioritylock-serve-scale-") as logs,
        Service({STORE: url}, Path(logs)) as service,
    ):
        try:
            result = asyncio.run(run(args, service))
        except ServiceError as exc:
            print(f"FAILED: {exc}", file=sys.stderr)
            return 1
        finally:
            service.close()
        errors = service.stderr(tail=None)
    _report(result, args.holders)
    payload = {
        "machine": machine,
        "mode": args.mode,
        "holders": args.holders,
        "expiry_s": args.expiry,
        "concurrent": args.concurrent,
        "store": url.split("?", 1)[0],
        **result,
    }
    if args.json:
        write_json(args.json, payload)
        print(f"results in {args.json}")
    if "Traceback" in errors or "ERROR" in errors:
        print(f"the service logged errors:\n{errors}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
