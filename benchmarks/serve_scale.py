"""Scale through the service: N lock streams held at once through one ``prioritylock serve``.

    python benchmarks/serve_scale.py [--holders 1000] [--seconds 30] [--idle 5] [--ttl 30]
        [--store memory|URL|s3-moto|s3-seaweedfs] [--ping-interval S] [--transport http|grpc]
        [--json PATH]

One service and this process as its client. Each holder is a lock stream on its own lock (``ttl``
renewed by the service, pinged every ``--ping-interval``): NDJSON on an HTTP/1.1 connection of its
own (``http``) or a gRPC ``Lock`` call, all on one HTTP/2 connection (``grpc``). Measured: the
service's CPU idle, per acquisition, over the hold window (sampled every second, with a health
check's latency) and per release; this process's CPU and loop lag, the emulator's CPU, the
service's memory and open files. Exits 1 on any wrong answer (:class:`StreamHolders` says what is
checked); the JSON file is written either way (``failed`` says why). The alpha1 mode
(``serve-scale-memory*.json``) was retired after commit 63f5101, which holds it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import sys
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, cast

import _servers
import aiohttp
import attrs
import grpc
from _harness import CpuWindow, lag_probe, load_average, machine_info, ms_summary, write_json
from _servers import Service, ServiceError

from prioritylock.server._config import ServeConfig
from prioritylock.server._proto import lock_pb2, lock_pb2_grpc

STORE = "locks"
CONCURRENT = 32  # requests in flight besides the streams
SAMPLED = 36  # locks read back during the window
DEFAULT_PING_S = cast(float, attrs.fields(ServeConfig).ping_interval.default)


Events = AsyncGenerator[tuple[str, int | None], None]  # a stream's (type, fence), NDJSON's names


async def _ndjson(
    session: aiohttp.ClientSession, base: str, resource: str, owner: str, ttl: float
) -> Events:
    """A lock stream as NDJSON, on an HTTP/1.1 connection of its own."""
    response = await session.post(
        f"{base}/{resource}",
        json={"ttl": f"{ttl:g}s", "owner": owner, "immediate": True},
        headers={"Accept": "application/x-ndjson"},
        timeout=aiohttp.ClientTimeout(sock_connect=30),  # a stream outlives the session's timeout
    )
    try:
        if response.status != 200:
            raise ServiceError(f"{resource}: {response.status} {await response.text()}")
        while line := await response.content.readline():
            event = json.loads(line)
            yield event.get("type"), event.get("fence")
    finally:
        response.close()


async def _grpc(stub: Any, resource: str, owner: str, ttl: float) -> Events:
    """A lock stream as a ``LockService.Lock`` call (every call on one channel: one HTTP/2
    connection)."""
    ask = lock_pb2.LockRequest(store_name=STORE, resource_id=resource, owner=owner, immediate=True)
    ask.ttl.FromNanoseconds(round(ttl * 1e9))
    call = stub.Lock(ask)
    try:
        async for message in call:
            kind = message.WhichOneof("lock_server_stream")
            fence = message.lock_acquired.fence if kind == "lock_acquired" else None
            yield kind.replace("_", "-"), fence
    finally:
        call.cancel()


@dataclass
class _Stream:
    """One open stream: the lock it holds and what its reader saw."""

    index: int
    resource: str
    owner: str
    events: Events
    fence: int
    last_event: float
    reader: asyncio.Task[None] | None = None
    trouble: str | None = None  # why it stopped being a healthy holder


class StreamHolders:
    """N lock streams of ``ttl`` s (``stream(resource, owner, ttl)``), one lock each, ``immediate``.

    A task per stream reads its events: each ``ping`` is timed against the ping interval; anything
    else, the stream's end, a read error or three ping intervals of silence is trouble.
    :data:`SAMPLED` locks are read back (``GET .../{resourceId}``) one at a time at random, each
    about every half renewal interval: held by its owner at its fence and renewed within the
    renewal interval (a third of the ttl) plus ``slack``, or stale. A ``renewed_at`` that moved
    between two reads less than an interval apart moved by one renewal: less the interval, how
    late it ran.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession,
        service: Service,
        stream: Callable[[str, str, float], Events],
        args: Any,
    ) -> None:
        self._session, self._stream, self._n = session, stream, args.holders
        self._base = f"{service.url}/v1.0-alpha2/lock/{STORE}"
        self._ttl, self._ping, self._slack = args.ttl, args.ping_interval, args.slack
        self._renew = self._ttl / 3  # the service renews every third of the ttl
        self._limit, self._run = asyncio.Semaphore(CONCURRENT), uuid.uuid4().hex[:8]
        self._streams: list[_Stream] = []
        k = min(SAMPLED, self._n)
        self._sampled = sorted({i * self._n // k for i in range(k)})
        self._sampler: asyncio.Task[None] | None = None
        self._all_open, self._random = False, random.Random(self._n)
        self._renewed: dict[int, tuple[float, float]] = {}  # index -> (read at, its renewed_at)
        # A stream silent for three ping intervals has stalled.
        self._stall = 3 * self._ping + 5
        # s: lateness, one per ping once every stream was open; ages, renewed_at age of each
        # sample during the window (end_ages: of every lock at the end); renewal_late, renewed_at
        # step less the interval; time_left, time_left_approx of each sample.
        self.lateness, self.ages, self.end_ages = list[float](), list[float](), list[float]()
        self.renewal_late, self.time_left, self.stale = list[float](), list[float](), list[str]()

    async def _open(self, i: int) -> _Stream:
        resource, owner = f"stream-{self._run}-{i}", f"streamer-{i}"
        async with self._limit:
            events = self._stream(resource, owner, self._ttl)
            try:
                ended = ("the end of the stream", None)
                kind, fence = await asyncio.wait_for(anext(events, ended), self._stall)
                if kind != "lock-acquired" or fence is None:
                    raise ServiceError(f"stream #{i}: first event {kind!r}")
            except BaseException:
                await events.aclose()
                raise
        stream = _Stream(i, resource, owner, events, fence, time.monotonic())
        stream.reader = asyncio.create_task(self._read(stream))  # a ping left unread is late
        return stream

    async def acquire(self) -> None:
        opened = await asyncio.gather(*map(self._open, range(self._n)), return_exceptions=True)
        self._streams = [s for s in opened if isinstance(s, _Stream)]
        if failed := [e for e in opened if isinstance(e, BaseException)]:
            raise ServiceError(f"{len(failed)} of {self._n} streams not opened: {failed[0]!r}")
        self._all_open = True
        self._sampler = asyncio.create_task(self._sample_loop())

    async def _read(self, stream: _Stream) -> None:
        """Read ``stream`` until it ends (it must not while held) or the reader is cancelled."""
        try:
            async for kind, _ in stream.events:
                now = time.monotonic()
                if kind != "ping":
                    stream.trouble = f"event {kind!r}"
                elif self._all_open:
                    self.lateness.append(now - stream.last_event - self._ping)
                stream.last_event = now
            stream.trouble = "the stream ended"
        except (aiohttp.ClientError, grpc.RpcError, ValueError) as exc:
            stream.trouble = f"{type(exc).__name__}: {exc}"

    async def _info(self, stream: _Stream) -> dict[str, Any]:
        async with self._limit, self._session.get(f"{self._base}/{stream.resource}") as response:
            if response.status != 200:
                raise ServiceError(f"GET {stream.resource}: {response.status}")
            return cast(dict[str, Any], await response.json())

    async def _check_lease(self, stream: _Stream, ages: list[float]) -> None:
        """Read ``stream``'s lease back: its renewal's age into ``ages``, and whether stale."""
        info = await self._info(stream)
        now, read_at, renewed = time.time(), time.monotonic(), info.get("renewed_at")
        if not info.get("held") or info.get("owner") != stream.owner or renewed is None:
            self.stale.append(f"#{stream.index}: not held by its owner: {info.get('state')}")
            return
        if info.get("fence") != stream.fence:
            self.stale.append(f"#{stream.index}: fence {info.get('fence')} != {stream.fence}")
        ages.append(age := now - renewed)
        before = self._renewed.get(stream.index)
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
        mean = self._renew / 2 / len(self._sampled)
        while True:
            await self._check_lease(self._streams[self._random.choice(self._sampled)], self.ages)
            # Pacing the samples (not a synchronisation): exponential gaps, a Poisson process.
            await asyncio.sleep(self._random.expovariate(1 / mean))

    async def check_held(self) -> None:
        await self._stop_sampler()
        now = time.monotonic()
        for s in self._streams:
            if s.trouble is None and now - s.last_event > self._stall:
                s.trouble = f"stalled: nothing for {now - s.last_event:.1f} s"
        if troubled := [s for s in self._streams if s.trouble is not None]:
            n, first = len(troubled), f"#{troubled[0].index}: {troubled[0].trouble}"
            raise ServiceError(f"{n} of {self._n} streams stopped holding, e.g. {first}")
        await asyncio.gather(*(self._check_lease(s, self.end_ages) for s in self._streams))
        if self.stale:
            raise ServiceError(
                f"{len(self.stale)} stale lease readings (renewal interval {self._renew:g} s "
                f"+ {self._slack:g} s slack), e.g. {self.stale[0]}"
            )

    async def release(self) -> None:
        """Close every stream (that is the unlock) and wait until every lock reads free."""
        await self.abort()
        pending, deadline = self._streams, time.monotonic() + self._ping + 10
        while pending := [s for s in pending if (await self._info(s)).get("held")]:
            if time.monotonic() > deadline:
                raise ServiceError(f"{len(pending)} of {self._n} locks still held after close")
            await asyncio.sleep(0.1)  # polling the service: no event to wait on

    async def _stop_sampler(self) -> None:
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler  # a failed lease read raises here

    async def abort(self) -> None:
        await self._stop_sampler()
        readers = [s.reader for s in self._streams if s.reader is not None]
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        for stream in self._streams:
            await stream.events.aclose()  # a cancelled reader's already is

    def figures(self) -> dict[str, Any]:
        """What the streams and the samples showed (seconds in ms, as ``ms_summary``)."""
        ages = {"renewed_age_ms": self.ages, "renewed_age_at_end_ms": self.end_ages}
        return (
            {"ttl_s": self._ttl, "renew_interval_s": round(self._renew, 3)}
            | {"ping_interval_s": self._ping, "slack_s": self._slack, "pings": len(self.lateness)}
            | {"ping_late_ms": ms_summary(self.lateness), "sampled_locks": len(self._sampled)}
            | {"lease_reads": len(self.ages)}
            | {k: ms_summary(v) for k, v in ages.items()}
            | {"renewals_seen": len(self.renewal_late)}
            | {"renewal_late_ms": ms_summary(self.renewal_late)}
            | {"time_left_min_s": round(min(self.time_left), 3) if self.time_left else None}
            | {"stale": len(self.stale), "stale_examples": self.stale[:5]}
            | {"streams_in_trouble": sum(s.trouble is not None for s in self._streams)}
        )


async def _window(
    session: aiohttp.ClientSession, service: Service, seconds: float, emulator: int | None
) -> dict[str, Any]:
    """The service's CPU and a health check's latency once a second for ``seconds``; the
    window's CPU (service, this process, the emulator) and this process's loop lag."""
    lags, shares, health = list[float](), list[float](), list[float]()
    probe = asyncio.create_task(lag_probe(lags))
    with CpuWindow(service=service.pid, emulator=emulator) as window:
        last_cpu, last_t = service.cpu_s(), time.monotonic()
        while time.perf_counter() - window.started < seconds:
            await asyncio.sleep(1.0)  # the sampling period, not a synchronisation
            t0 = time.perf_counter()
            async with session.get(f"{service.url}/v1.0/healthz") as r:
                if r.status != 204:
                    raise ServiceError(f"healthz answered {r.status}")
            health.append(time.perf_counter() - t0)
            cpu, now = service.cpu_s(), time.monotonic()
            shares.append(100 * (cpu - last_cpu) / (now - last_t))
            last_cpu, last_t = cpu, now
    probe.cancel()
    pct = window.percent
    return (
        {"seconds": round(window.seconds, 2), "service_cpu_percent": pct["service"]}
        | {"service_cpu_percent_max_1s": round(max(shares), 2) if shares else None}
        | {"client_cpu_percent": pct["own"], "client_loop_lag_ms": ms_summary(lags)}
        | {"emulator_cpu_percent": pct.get("emulator"), "health_ms": ms_summary(health)}
        | {"machine_cpu": window.machine, "load_end": load_average()}
        | {"service_rss_kib": service.rss_kib(), "service_open_fds": service.open_fds()}
    )


async def _phase(service: Service, action: Callable[[], Awaitable[None]], n: int) -> Any:
    cpu0, t0 = service.cpu_s(), time.perf_counter()
    await action()
    wall, cpu = time.perf_counter() - t0, service.cpu_s() - cpu0
    each = {"service_cpu_s": round(cpu, 3), "service_cpu_us_each": round(1e6 * cpu / n, 1)}
    return {"wall_s": round(wall, 3), "per_s": round(n / wall, 1)} | each


async def run(args: Any, service: Service, result: dict[str, Any], emulator: int | None) -> None:
    """Idle, acquire, hold, check, release; figures go into ``result`` as they come, so a
    failed run still reports how far it got."""
    # Each stream keeps its connection: room for them all, plus the samples and health checks.
    connector = aiohttp.TCPConnector(limit=CONCURRENT + args.holders + 8)
    timeout = aiohttp.ClientTimeout(total=60)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as session,
        grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}") as channel,
    ):
        stub = lock_pb2_grpc.LockServiceStub(channel)  # type: ignore[no-untyped-call]
        http = partial(_ndjson, session, f"{service.url}/v1.0-alpha2/lock/{STORE}")
        stream = partial(_grpc, stub) if args.transport == "grpc" else http
        holders = StreamHolders(session, service, stream, args)
        try:
            result["load_start"] = load_average()
            streams = f"{args.holders} {args.transport} streams"
            print(f"idle {args.idle:g} s, then {streams} for {args.seconds:g} s")
            result["idle"] = await _window(session, service, args.idle, emulator)
            result["acquire"] = await _phase(service, holders.acquire, args.holders)
            result["load_hold"] = load_average()
            result["hold"] = await _window(session, service, args.seconds, emulator)
            result["check"] = await _phase(service, holders.check_held, args.holders)
            result["release"] = await _phase(service, holders.release, args.holders)
        except BaseException:
            await holders.abort()
            raise
        finally:
            result["streams"] = figures = holders.figures()
            if "check" in result:
                # The window's CPU includes our lease reads: estimated at what the check's read
                # of every lock cost the service each.
                each_s = result["check"]["service_cpu_us_each"] / 1e6
                share = 100 * figures["lease_reads"] * each_s / result["hold"]["seconds"]
                figures["lease_reads_cpu_percent_est"] = round(share, 3)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--holders", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0, help="the hold window")
    parser.add_argument("--idle", type=float, default=5.0, help="the idle window before it")
    parser.add_argument("--store", default="memory", help="memory, a URL, or an emulator")
    parser.add_argument("--ttl", type=float, default=30.0, help="each stream's lease, s")
    parser.add_argument("--ping-interval", type=float, default=DEFAULT_PING_S)
    parser.add_argument("--slack", type=float, default=1.0, help="renewal lateness allowed, s")
    parser.add_argument("--transport", choices=["http", "grpc"], default="http")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    # Every stream is a socket on each side: the service, started after, inherits the limit.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    machine = {**machine_info(), "open_files_limit": {"soft_before": soft, "hard": hard}}
    result: dict[str, Any] = {}
    failure: str | None = None
    with (
        _servers.store_url(args.store, "serve-scale") as (url, emulator),
        Service({STORE: url}, ["--ping-interval", f"{args.ping_interval:g}"]) as service,
    ):
        try:
            asyncio.run(run(args, service, result, emulator.pid if emulator else None))
        except ServiceError as exc:
            failure = str(exc)
        _, errors = service.stop()
        if failure is None and ("Traceback" in errors or "ERROR" in errors):
            failure = f"the service logged errors:\n{errors}"
    payload: dict[str, Any] = {"machine": machine, "mode": "streams", "transport": args.transport}
    payload |= {"holders": args.holders, "expiry_s": args.ttl, "concurrent": CONCURRENT}
    payload |= {"store": url.split("?", 1)[0]}
    payload |= {"emulator": emulator.name, "versions": _servers.versions()} if emulator else {}
    payload |= result | ({"failed": failure} if failure else {})
    if args.json:
        write_json(args.json, payload)
    for phase in ("idle", "acquire", "hold", "release", "streams"):
        print(f"{phase}: {json.dumps(result.get(phase))}")
    if failure is not None:
        print(f"FAILED: {failure}", file=sys.stderr)
        return 1
    print(f"all {args.holders} still held at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
