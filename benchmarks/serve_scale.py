"""Scale through the service: N locks held at once through one ``prioritylock serve``.

    python benchmarks/serve_scale.py [--holders 1000] [--seconds 30] [--idle 5]
        [--mode alpha1|streams] [--store memory|URL|s3-moto|s3-seaweedfs] [--expiry S]
        [--concurrent 32] [--ping-interval S] [--sample 36] [--slack 1] [--json PATH]

One service (``_service.py``) and this process as its client (aiohttp, ``--concurrent``
requests in flight besides the streams): the service's CPU idle, per acquisition, over the hold
window (sampled every second, with a health check's latency as a view of its event loop) and per
release; at the window's end also this process's CPU and loop lag, the emulator's CPU, and the
service's memory and open files. ``alpha1`` holds TryLock leases of ``--expiry`` s (600; never
renewed): at the end a rival's TryLock must fail. ``streams`` holds alpha2 NDJSON streams of a
``--expiry`` s ttl (30), renewed by the service, pinged every ``--ping-interval``; see
:class:`StreamHolders` for what is checked. Exits 1 on any wrong answer, a lock not held to the
end or a stale lease; the JSON file is written either way (``failed`` says why).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import _servers
import aiohttp
import attrs
from _harness import CpuWindow, lag_probe, load_average, machine_info, ms_summary, write_json
from _service import Service, ServiceError

from prioritylock.server._config import ServeConfig

STORE = "locks"
#: The service's own default ``--ping-interval``.
DEFAULT_PING_S = cast(float, attrs.fields(ServeConfig).ping_interval.default)


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    async with session.post(url, json=body) as response:
        if response.status != 200:
            raise ServiceError(f"POST {url}: {response.status} {await response.text()}")
        return await response.json()


class Alpha1Holders:
    """N alpha1 locks of ``expiry`` s (never renewed): resource ``hold-RUN-I``, owner
    ``holder-I``. Held at the end: a rival's TryLock of each must fail."""

    def __init__(self, session: aiohttp.ClientSession, service: Service, args: Any) -> None:
        self._session, self._n, self._expiry = session, args.holders, int(args.expiry)
        self._base = f"http://127.0.0.1:{service.http_port}/v1.0-alpha1"
        self._limit = asyncio.Semaphore(args.concurrent)
        self._run = uuid.uuid4().hex[:8]

    async def _each(self, op: str, owner: str | None, answer: str) -> list[Any]:
        async def one(i: int) -> Any:
            body: dict[str, Any] = {
                "resourceId": f"hold-{self._run}-{i}",
                "lockOwner": owner or f"holder-{i}",
            }
            if op == "lock":
                body["expiryInSeconds"] = self._expiry if owner is None else 1
            async with self._limit:
                return (await _post(self._session, f"{self._base}/{op}/{STORE}", body))[answer]

        return list(await asyncio.gather(*map(one, range(self._n))))

    async def acquire(self) -> None:
        refused = [i for i, ok in enumerate(await self._each("lock", None, "success")) if not ok]
        if refused:
            raise ServiceError(f"{len(refused)} of {self._n} TryLocks refused, e.g. #{refused[0]}")

    async def check_held(self) -> None:
        if taken := [ok for ok in await self._each("lock", "rival", "success") if ok is not False]:
            raise ServiceError(f"{len(taken)} of {self._n} locks were free to a rival")

    async def release(self) -> None:
        statuses = await self._each("unlock", None, "status")
        if wrong := [(i, s) for i, s in enumerate(statuses) if s != 0]:
            raise ServiceError(f"{len(wrong)} of {self._n} unlocks answered non-zero: {wrong[:3]}")

    async def abort(self) -> None:
        pass  # nothing open: the leases run out their expiry


NDJSON = "application/x-ndjson"


@dataclass
class _Stream:
    """One open stream: the lock it holds and what its reader saw."""

    index: int
    resource: str
    owner: str
    response: aiohttp.ClientResponse
    fence: int
    last_line: float
    reader: asyncio.Task[None] | None = None
    #: Why it stopped being a healthy holder (None while it is one).
    trouble: str | None = None


class StreamHolders:
    """N alpha2 NDJSON streams of ``ttl_s``, one lock each: resource ``stream-RUN-I``, owner
    ``streamer-I``, each taken ``immediate`` (a refusal is a 409 before any stream).

    While they are held, a task per stream reads its lines: every ``ping`` is timed against
    ``ping_s`` (how late it came after the line before), anything else (``lost``, ``error``,
    ``cleanup-requested``), the stream's end or a read error marks it in trouble. From outside,
    ``sample`` of the locks (spread over the N) are read back through ``GET
    .../{resourceId}``, one at a time at random (each about every half renewal interval, at
    random moments, so that the reads don't keep step with the renewals): the lease must be
    held, by its owner, at the fence it was acquired with, and renewed within the renewal
    interval (a third of the ttl) plus ``slack_s``, or the lease counts as stale. Where a lock's
    ``renewed_at`` moved between two reads less than an interval apart, it moved by one
    renewal: the step less the interval is how late that renewal ran.
    """

    def __init__(self, session: aiohttp.ClientSession, service: Service, args: Any) -> None:
        self._session, self._n, n, sample = session, args.holders, args.holders, args.sample
        self._base = f"http://127.0.0.1:{service.http_port}/v1.0-alpha2/lock/{STORE}"
        self._ttl, self._ping, self._slack = args.expiry, args.ping_interval, args.slack
        self._renew = self._ttl / 3  # the service renews every third of the ttl
        self._limit = asyncio.Semaphore(args.concurrent)
        self._run = uuid.uuid4().hex[:8]
        self._streams: list[_Stream] = []
        self._sampled = sorted({i * n // min(sample, n) for i in range(min(sample, n))})
        self._sampler: asyncio.Task[None] | None = None
        self._all_open = False
        self._random = random.Random(n)
        # stream index -> (when we last read it, monotonic; the renewed_at it showed)
        self._renewed: dict[int, tuple[float, float]] = {}
        # A stalled stream (no line for three ping intervals) is a read timeout, not a hang.
        self._stream_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=30, sock_read=3 * self._ping + 5
        )
        self.lateness: list[float] = []  # s, one per ping once every stream was open
        self.ages: list[float] = []  # s, renewed_at age of each sample during the window
        self.renewal_late: list[float] = []  # s, renewed_at step less the interval
        self.end_ages: list[float] = []  # s, the same of every lock at the end
        self.time_left: list[float] = []  # s, time_left_approx of each sample
        self.stale: list[str] = []

    def _resource(self, i: int) -> str:
        return f"stream-{self._run}-{i}"

    async def acquire(self) -> None:
        async def open_one(i: int) -> _Stream:
            async with self._limit:
                owner = f"streamer-{i}"
                response = await self._session.post(
                    f"{self._base}/{self._resource(i)}",
                    json={"ttl": f"{self._ttl:g}s", "owner": owner, "immediate": True},
                    headers={"Accept": NDJSON},
                    timeout=self._stream_timeout,
                )
                try:
                    if response.status != 200:
                        raise ServiceError(
                            f"stream #{i}: {response.status} {await response.text()}"
                        )
                    event = json.loads(await response.content.readline() or b"null")
                    if not isinstance(event, dict) or event.get("type") != "lock-acquired":
                        raise ServiceError(f"stream #{i}: first line {event!r}")
                except BaseException:
                    response.close()
                    raise
                stream = _Stream(
                    i, self._resource(i), owner, response, event["fence"], time.monotonic()
                )
                # Read from now on: a ping left in the buffer would be timed when read.
                stream.reader = asyncio.create_task(self._read(stream))
                return stream

        opened = await asyncio.gather(
            *(open_one(i) for i in range(self._n)), return_exceptions=True
        )
        self._streams = [s for s in opened if isinstance(s, _Stream)]
        failed = [e for e in opened if isinstance(e, BaseException)]
        if failed:
            raise ServiceError(f"{len(failed)} of {self._n} streams not opened: {failed[0]!r}")
        self._all_open = True
        self._sampler = asyncio.create_task(self._sample_loop())

    async def _read(self, stream: _Stream) -> None:
        """Read ``stream`` until it ends (it must not while held) or the reader is cancelled."""
        try:
            while True:
                line = await stream.response.content.readline()
                now = time.monotonic()
                if not line:
                    stream.trouble = "the stream ended"
                    return
                event = json.loads(line)
                if event.get("type") != "ping":
                    stream.trouble = f"event {event!r}"
                    if event.get("type") in ("lost", "error"):
                        return
                else:
                    late = now - stream.last_line - self._ping
                    if self._all_open:
                        self.lateness.append(late)
                stream.last_line = now
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            stream.trouble = f"{type(exc).__name__}: {exc}"

    async def _info(self, stream: _Stream) -> dict[str, Any]:
        async with self._limit, self._session.get(f"{self._base}/{stream.resource}") as response:
            if response.status != 200:
                raise ServiceError(f"GET {stream.resource}: {response.status}")
            info: dict[str, Any] = await response.json()
            return info

    async def _check_lease(self, stream: _Stream, ages: list[float]) -> None:
        """Read ``stream``'s lease back; record its renewal's age in ``ages`` and whether it
        is stale."""
        info = await self._info(stream)
        now = time.time()
        renewed = info.get("renewed_at")
        if not info.get("held") or info.get("owner") != stream.owner or renewed is None:
            self.stale.append(f"#{stream.index}: not held by its owner: {info.get('state')}")
            return
        if info.get("fence") != stream.fence:
            self.stale.append(f"#{stream.index}: fence {info.get('fence')} != {stream.fence}")
        age = now - renewed
        ages.append(age)
        before = self._renewed.get(stream.index)
        read_at = time.monotonic()
        self._renewed[stream.index] = (read_at, renewed)
        # Renewals are never early, so two reads less than an interval apart straddle at most
        # one: its step from the renewal before is exactly the interval the service kept.
        if before is not None and renewed != before[1] and read_at - before[0] < self._renew:
            self.renewal_late.append(renewed - before[1] - self._renew)
        if info.get("time_left_approx") is not None:
            self.time_left.append(info["time_left_approx"])
        if age > self._renew + self._slack:
            self.stale.append(f"#{stream.index}: renewed {age:.2f} s ago")

    async def _sample_loop(self) -> None:
        """A random sampled lock at random moments, each about every half renewal interval."""
        mean = self._renew / 2 / len(self._sampled)
        while True:
            index = self._random.choice(self._sampled)
            await self._check_lease(self._streams[index], self.ages)
            # Pacing the samples (not a synchronisation): exponential gaps, a Poisson process.
            await asyncio.sleep(self._random.expovariate(1 / mean))

    async def _stop_sampler(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sampler
            self._sampler = None

    async def check_held(self) -> None:
        await self._stop_sampler()
        troubled = [s for s in self._streams if s.trouble is not None]
        if troubled:
            s = troubled[0]
            raise ServiceError(
                f"{len(troubled)} of {self._n} streams stopped holding, e.g. #{s.index}: "
                f"{s.trouble}"
            )
        # Every lease at the end, not only the sampled ones.
        await asyncio.gather(*(self._check_lease(s, self.end_ages) for s in self._streams))
        if self.stale:
            raise ServiceError(
                f"{len(self.stale)} stale lease readings (renewal interval {self._renew:g} s "
                f"+ {self._slack:g} s slack), e.g. {self.stale[0]}"
            )

    async def release(self) -> None:
        """Close every stream (that is the unlock) and wait until every lock reads free."""
        await self.abort()
        pending = list(range(len(self._streams)))
        deadline = time.monotonic() + self._ping + 10
        while pending:

            async def held(i: int) -> bool:
                return bool((await self._info(self._streams[i])).get("held"))

            still = await asyncio.gather(*(held(i) for i in pending))
            pending = [i for i, h in zip(pending, still, strict=True) if h]
            if pending and time.monotonic() > deadline:
                raise ServiceError(f"{len(pending)} of {self._n} locks still held after close")
            if pending:
                await asyncio.sleep(0.1)  # polling the service: no event to wait on

    async def abort(self) -> None:
        await self._stop_sampler()
        for stream in self._streams:
            if stream.reader is not None:
                stream.reader.cancel()
        readers = [s.reader for s in self._streams if s.reader is not None]
        await asyncio.gather(*readers, return_exceptions=True)
        for stream in self._streams:
            stream.response.close()

    def figures(self) -> dict[str, Any]:
        """What the streams and the samples showed (seconds in ms, as ``ms_summary``)."""
        return {
            "ttl_s": self._ttl,
            "renew_interval_s": round(self._renew, 3),
            "ping_interval_s": self._ping,
            "slack_s": self._slack,
            "pings": len(self.lateness),
            "ping_late_ms": ms_summary(self.lateness),
            "sampled_locks": len(self._sampled),
            "lease_reads": len(self.ages),
            "renewed_age_ms": ms_summary(self.ages),
            "renewed_age_at_end_ms": ms_summary(self.end_ages),
            "renewals_seen": len(self.renewal_late),
            "renewal_late_ms": ms_summary(self.renewal_late),
            "time_left_min_s": round(min(self.time_left), 3) if self.time_left else None,
            "stale": len(self.stale),
            "stale_examples": self.stale[:5],
            "streams_in_trouble": sum(s.trouble is not None for s in self._streams),
        }


async def _health_s(session: aiohttp.ClientSession, service: Service) -> float:
    t0 = time.perf_counter()
    async with session.get(f"http://127.0.0.1:{service.http_port}/v1.0/healthz") as response:
        if response.status != 204:
            raise ServiceError(f"healthz answered {response.status}")
    return time.perf_counter() - t0


async def _window(
    session: aiohttp.ClientSession, service: Service, seconds: float, emulator: int | None
) -> dict[str, Any]:
    """The service's CPU and a health check's latency once a second for ``seconds``; the
    window's CPU (service, this process, the emulator) and this process's loop lag."""
    lags: list[float] = []
    probe = asyncio.create_task(lag_probe(lags))
    shares: list[float] = []
    health: list[float] = []
    with CpuWindow(service=service.pid, emulator=emulator) as window:
        last_cpu, last_t = service.cpu_s(), time.monotonic()
        while time.perf_counter() - window.started < seconds:
            await asyncio.sleep(1.0)  # the sampling period, not a synchronisation
            health.append(await _health_s(session, service))
            cpu, now = service.cpu_s(), time.monotonic()
            shares.append(100 * (cpu - last_cpu) / (now - last_t))
            last_cpu, last_t = cpu, now
    probe.cancel()
    return {
        "seconds": round(window.seconds, 2),
        "service_cpu_percent": window.percent["service"],
        "service_cpu_percent_max_1s": round(max(shares), 2) if shares else None,
        "client_cpu_percent": window.percent["own"],
        "client_loop_lag_ms": ms_summary(lags),
        "emulator_cpu_percent": window.percent.get("emulator"),
        "health_ms": ms_summary(health),
        "machine_cpu": window.machine,
        "load_end": load_average(),
        "service_rss_kib": service.rss_kib(),
        "service_open_fds": service.open_fds(),
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


async def run(
    args: argparse.Namespace,
    service: Service,
    result: dict[str, Any],
    emulator_pid: int | None = None,
) -> None:
    """Idle, acquire, hold, check, release; figures go into ``result`` as they come, so a
    failed run still reports how far it got."""
    streams = args.mode == "streams"
    # A stream keeps its connection for the whole run: room for every stream, plus the
    # requests in flight beside them (samples, health checks).
    limit = args.concurrent + (args.holders + 8 if streams else 0)
    connector = aiohttp.TCPConnector(limit=limit)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        holders = (StreamHolders if streams else Alpha1Holders)(session, service, args)
        try:
            result["load_start"] = load_average()
            print(f"idle window, {args.idle:g} s ...", flush=True)
            result["idle"] = await _window(session, service, args.idle, emulator_pid)
            print(f"acquiring {args.holders} locks ...", flush=True)
            result["acquire"] = await _phase(service, holders.acquire, args.holders)
            print(f"holding them for {args.seconds:g} s ...", flush=True)
            result["load_hold"] = load_average()
            result["hold"] = await _window(session, service, args.seconds, emulator_pid)
            result["check"] = await _phase(service, holders.check_held, args.holders)
            result["release"] = await _phase(service, holders.release, args.holders)
        except BaseException:
            await holders.abort()
            raise
        finally:
            if isinstance(holders, StreamHolders):
                result["streams"] = figures = holders.figures()
                if "check" in result:
                    # The window's CPU includes our lease reads: estimated at what the check's
                    # read of every lock cost the service each.
                    each_s = result["check"]["service_cpu_us_each"] / 1e6
                    share = 100 * figures["lease_reads"] * each_s / result["hold"]["seconds"]
                    figures["lease_reads_cpu_percent_est"] = round(share, 3)


def _report(result: dict[str, Any], n: int) -> None:
    idle, acq, hold, rel = (result[k] for k in ("idle", "acquire", "hold", "release"))
    print(f"idle: service CPU {idle['service_cpu_percent']:.2f}% of a core")
    print(
        f"acquire {n}: {acq['per_s']:,.0f}/s, service CPU {acq['service_cpu_us_each']:,.0f} µs each"
    )
    print(
        f"hold {n} for {hold['seconds']:.0f} s: service CPU {hold['service_cpu_percent']:.2f}% "
        f"(max {hold['service_cpu_percent_max_1s']}% in a second), {hold['service_rss_kib']} KiB, "
        f"{hold['service_open_fds']} fds; health check {_ms(hold['health_ms'])}; client CPU "
        f"{hold['client_cpu_percent']:.2f}%, loop lag {_ms(hold['client_loop_lag_ms'])}; "
        f"emulator CPU {hold['emulator_cpu_percent']}%"
    )
    if "streams" in result:
        print(_streams_line(result["streams"]))
    print(f"all {n} still held at the end; release: {rel['service_cpu_us_each']:,.0f} µs each")


def _ms(summary: dict[str, float | None]) -> str:
    return "p50 / p99 / max " + " / ".join(str(v) for v in summary.values()) + " ms"


def _streams_line(f: dict[str, Any]) -> str:
    return (
        f"streams: {f['pings']} pings late by {_ms(f['ping_late_ms'])}; {f['lease_reads']} "
        f"lease reads of {f['sampled_locks']} locks: renewed {_ms(f['renewed_age_ms'])} ago "
        f"(at the end: max {f['renewed_age_at_end_ms']['max']} ms); {f['renewals_seen']} "
        f"renewals late by {_ms(f['renewal_late_ms'])}; time left min {f['time_left_min_s']} s; "
        f"{f['stale']} stale, {f['streams_in_trouble']} streams in trouble; the reads cost the "
        f"service about {f.get('lease_reads_cpu_percent_est')}% of a core"
    )


def _raise_fd_limit() -> dict[str, int]:
    """Raise this process's soft limit of open files to its hard limit (the service, started
    after, inherits it): every stream is a socket on each side."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return {"soft_before": soft, "hard": hard}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--holders", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="the hold window")
    parser.add_argument("--idle", type=float, default=5.0, help="the idle window before, s")
    parser.add_argument("--mode", choices=("alpha1", "streams"), default="alpha1")
    parser.add_argument("--store", default="memory", help="memory, a URL, or an emulator")
    parser.add_argument(
        "--expiry",
        type=float,
        default=None,
        help="each lock's expiry (alpha1, whole seconds; default 600) or ttl (streams; 30)",
    )
    parser.add_argument("--concurrent", type=int, default=32, help="requests in flight")
    parser.add_argument(
        "--ping-interval",
        type=float,
        default=None,
        help=f"streams: the service's --ping-interval, s (default: its own, {DEFAULT_PING_S:g})",
    )
    parser.add_argument("--sample", type=int, default=36, help="streams: locks read back")
    parser.add_argument(
        "--slack", type=float, default=1.0, help="streams: renewal lateness allowed, s"
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.expiry is None:
        args.expiry = 30.0 if args.mode == "streams" else 600.0
    elif args.mode == "alpha1" and args.expiry != int(args.expiry):
        parser.error("--expiry: alpha1 takes whole seconds")
    extra = []
    if args.ping_interval is not None:
        extra = ["--ping-interval", f"{args.ping_interval:g}"]
    else:
        args.ping_interval = DEFAULT_PING_S
    fds = _raise_fd_limit()
    machine = {**machine_info(), "open_files_limit": fds}
    result: dict[str, Any] = {}
    failure: str | None = None
    with (
        _servers.store_url(args.store, "serve-scale") as (url, emulator),
        tempfile.TemporaryDirectory(prefix="prioritylock-serve-scale-") as logs,
        Service({STORE: url}, Path(logs), extra_args=extra) as service,
    ):
        try:
            asyncio.run(run(args, service, result, emulator.pid if emulator else None))
        except ServiceError as exc:
            failure = str(exc)
        finally:
            service.close()
        errors = service.stderr(tail=None)
    payload = {
        "machine": machine,
        "mode": args.mode,
        "holders": args.holders,
        "expiry_s": args.expiry,
        "concurrent": args.concurrent,
        "store": url.split("?", 1)[0],
        **({"emulator": emulator.name, "versions": _servers.versions()} if emulator else {}),
        **result,
    }
    if failure is not None:
        payload["failed"] = failure
    if args.json:
        write_json(args.json, payload)
        print(f"results in {args.json}")
    if failure is not None:
        if "streams" in result:
            print(_streams_line(result["streams"]), file=sys.stderr)
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    _report(result, args.holders)
    if "Traceback" in errors or "ERROR" in errors:
        print(f"the service logged errors:\n{errors}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
