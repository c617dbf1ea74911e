"""A fault-injecting HTTP/1.1 proxy for the tests: asyncio, 127.0.0.1 only, seeded.

One :class:`FaultProxy` stands in front of one server (an emulator's ``host:port``). Each client
gets its own *route*: a listening port of its own (:meth:`FaultProxy.route`), so faults and
partitions can be aimed at one client while the others carry on. The proxy understands just
enough HTTP/1.1 to tell requests apart on a kept-alive connection (Content-Length and chunked
bodies, ``Expect: 100-continue``, bodiless answers), and decides for every request, with a
random generator seeded per route, whether to:

``drop``       forward it, let the server act on it, then cut the client's connection instead of
               answering (a write lands, its answer is lost: an unknown outcome);
``reset``      reset the client's connection before forwarding anything (the request never lands);
``delay``      hold it for a while, then forward it;
``partition``  (for a while, one route or all) hold every request and answer in both directions
               until the partition heals, then deliver them, as TCP would, even to a client that
               has given up waiting (a late write landing after its sender timed out).

A test that wants a given fault on a given request, rather than a seeded draw, sets
:attr:`FaultProxy.chooser`: it sees each request's method and target and returns a
:class:`Choice`, which can also answer in the server's place (``answer``: say a 503 and never
forward; ``replace``: forward, let the server act, then say the fabricated answer instead of its
own). ``tests/lock/_cloud_faults.py`` drives the proxy this way for the store fault suite.

With ``raw=True`` it is a TCP proxy for servers that do not speak HTTP (Redis, ZooKeeper): it
copies bytes both ways and knows no requests, so its only fault is the partition, which holds
the bytes in both directions until it heals and then delivers them.

It runs its event loop on a thread of its own, so threaded clients (boto3, google-cloud-storage,
azure-storage-blob) can use it unchanged: point the client's endpoint at ``route(name)``. Counts of
requests and of each fault are kept in :attr:`FaultProxy.counts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Choice", "FaultPlan", "FaultProxy"]

_HEAD_LIMIT = 64 * 1024


@dataclass(frozen=True)
class FaultPlan:
    """How often each per-request fault happens (probabilities; the rest is forwarded as is)."""

    drop: float = 0.0
    reset: float = 0.0
    delay: float = 0.0
    #: Seconds a delayed request is held: uniform between these.
    delay_range: tuple[float, float] = (0.05, 0.3)

    def __post_init__(self) -> None:
        if min(self.drop, self.reset, self.delay) < 0 or self.drop + self.reset + self.delay > 1:
            raise ValueError(f"fault probabilities must be >= 0 and sum to <= 1: {self}")


@dataclass(frozen=True)
class Choice:
    """What the proxy does with one request, as a :attr:`FaultProxy.chooser` decides it.

    ``forward``, ``drop``, ``reset`` and ``delay`` are the plan's faults (see the module);
    ``answer`` sends :attr:`answer` without forwarding; ``replace`` forwards, then sends
    :attr:`answer` instead of the server's answer.
    """

    fault: Literal["forward", "drop", "reset", "delay", "answer", "replace"]
    #: A whole HTTP/1.1 response (status line, headers, body), for ``answer`` and ``replace``.
    answer: bytes = b""

    def __post_init__(self) -> None:
        if (self.fault in ("answer", "replace")) != bool(self.answer):
            raise ValueError(f"{self.fault!r} takes an answer exactly when it sends one")


#: Decides per request, from its method and target, instead of the plan (None: the plan decides).
Chooser = Callable[[str, str], Choice | None]


@dataclass
class _Route:
    name: str
    rng: random.Random
    server: asyncio.Server | None = None
    port: int = 0
    partitioned_until: float = 0.0  # time.monotonic(); 0: not partitioned
    connections: set[asyncio.StreamWriter] = field(default_factory=set)


class FaultProxy:
    """An HTTP/1.1 fault proxy in front of ``upstream`` (``"127.0.0.1:PORT"``); see the module."""

    def __init__(
        self, upstream: str, *, seed: int, plan: FaultPlan | None = None, raw: bool = False
    ) -> None:
        host, _, port = upstream.rpartition(":")
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError(f"the fault proxy only forwards to 127.0.0.1, not {host!r}")
        self._upstream = ("127.0.0.1", int(port))
        self._raw = raw
        self._seed = seed
        self.plan = plan or FaultPlan()
        #: Called on the proxy's thread for every request; see :class:`Choice`.
        self.chooser: Chooser | None = None
        self.counts: Counter[str] = Counter()
        self._count_lock = threading.Lock()
        self._routes: dict[str, _Route] = {}
        self._all_partitioned_until = 0.0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="fault-proxy", daemon=True)
        self._thread.start()

    # -- control, from any thread ---------------------------------------------------------------

    def route(self, name: str) -> str:
        """A new listening address (``http://127.0.0.1:PORT``) for the client called ``name``
        (raw: ``127.0.0.1:PORT``)."""
        if name in self._routes:
            raise ValueError(f"route {name!r} exists")
        # One generator per route, from the seed and the route's name: a route's choices do
        # not depend on how other routes' requests interleave with its own.
        route = _Route(name, random.Random(f"{self._seed}:{name}"))
        self._routes[name] = route
        self._call(self._listen(route))
        return f"127.0.0.1:{route.port}" if self._raw else f"http://127.0.0.1:{route.port}"

    def partition(self, seconds: float, name: str | None = None) -> None:
        """Cut route ``name`` (or every route) off from the server for ``seconds`` from now."""
        until = time.monotonic() + seconds
        self._count("partitions")
        if name is None:
            self._all_partitioned_until = max(self._all_partitioned_until, until)
        else:
            route = self._routes[name]
            route.partitioned_until = max(route.partitioned_until, until)

    def partitioned(self, name: str) -> bool:
        return time.monotonic() < self._until(self._routes[name])

    def heal(self) -> None:
        """Stop every fault: end partitions, forward everything from now on."""
        self.plan = FaultPlan()
        self._all_partitioned_until = 0.0
        for route in self._routes.values():
            route.partitioned_until = 0.0

    def snapshot(self) -> dict[str, int]:
        with self._count_lock:
            return dict(self.counts)

    def close(self) -> None:
        if self._loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the event loop -------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=10)

    async def _listen(self, route: _Route) -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if self._raw:
                await self._pipe(route, reader, writer)
            else:
                await self._serve(route, reader, writer)

        route.server = await asyncio.start_server(serve, "127.0.0.1", 0)
        route.port = route.server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        for route in self._routes.values():
            if route.server is not None:
                route.server.close()
            for writer in list(route.connections):
                _reset(writer)
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _count(self, what: str) -> None:
        with self._count_lock:
            self.counts[what] += 1

    def _until(self, route: _Route) -> float:
        return max(route.partitioned_until, self._all_partitioned_until)

    async def _through_partition(self, route: _Route) -> bool:
        """Wait out a partition of ``route``; whether there was one."""
        held = False
        while time.monotonic() < self._until(route):
            held = True
            await asyncio.sleep(0.01)
        return held

    def _choose(self, route: _Route, head: bytes) -> Choice:
        chooser = self.chooser
        if chooser is not None:
            method, target = head.decode("latin-1").split(" ", 2)[:2]
            chosen = chooser(method.upper(), target)
            if chosen is not None:
                return chosen
        return _PLANNED[self._draw(route)]

    def _draw(self, route: _Route) -> str:
        plan = self.plan
        draw = route.rng.random()
        if draw < plan.drop:
            return "drop"
        if draw < plan.drop + plan.reset:
            return "reset"
        if draw < plan.drop + plan.reset + plan.delay:
            return "delay"
        return "forward"

    async def _serve(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        route.connections.add(writer)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        try:
            while True:
                request = await _read_request(reader, writer)
                if request is None:
                    return
                head, body, method = request
                self._count("requests")
                choice = self._choose(route, head)
                fault = choice.fault
                if await self._through_partition(route):
                    self._count("held by a partition")
                if fault == "answer":
                    self._count("answered in the server's place")
                    writer.write(choice.answer)
                    await writer.drain()
                    continue
                if fault == "reset":
                    self._count("reset before forwarding")
                    _reset(writer)
                    return
                if fault == "delay":
                    self._count("delayed")
                    await asyncio.sleep(route.rng.uniform(*self.plan.delay_range))
                if upstream is None:
                    upstream = await asyncio.open_connection(*self._upstream)
                up_reader, up_writer = upstream
                up_writer.write(head + body)
                await up_writer.drain()
                response = await _read_response(up_reader, method)
                if response is None:  # the server closed on us: pass that on
                    _reset(writer)
                    return
                answer, keep_upstream = response
                if not keep_upstream:
                    up_writer.close()
                    upstream = None
                if fault == "drop":
                    self._count("dropped after forwarding")
                    _reset(writer)
                    return
                if fault == "replace":
                    self._count("answer replaced after forwarding")
                    answer = choice.answer
                if await self._through_partition(route):
                    self._count("answer held by a partition")
                writer.write(answer)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            self._count("connection errors")
        finally:
            route.connections.discard(writer)
            if upstream is not None:
                upstream[1].close()
            writer.close()

    async def _pipe(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """Raw mode: copy bytes both ways, held while ``route`` is partitioned."""
        route.connections.add(writer)
        self._count("connections")
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._upstream)

            async def copy(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
                while chunk := await source.read(65536):
                    if time.monotonic() < self._until(route):
                        self._count("held by a partition")
                        await self._through_partition(route)
                    sink.write(chunk)
                    await sink.drain()

            done, pending = await asyncio.wait(
                [
                    asyncio.ensure_future(copy(reader, up_writer)),
                    asyncio.ensure_future(copy(up_reader, writer)),
                ],
                return_when=asyncio.FIRST_COMPLETED,
            )
            for task in pending:
                task.cancel()
            await asyncio.gather(*done, *pending, return_exceptions=True)  # a side's end ends both
        except (ConnectionError, OSError):
            self._count("connection errors")
        except asyncio.CancelledError:
            pass  # the proxy is closing: its connections end with it
        finally:
            route.connections.discard(writer)
            if up_writer is not None:
                up_writer.close()
            writer.close()


_PLANNED = {
    "forward": Choice("forward"),
    "drop": Choice("drop"),
    "reset": Choice("reset"),
    "delay": Choice("delay"),
}


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a dead middlebox or crashed peer would."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _headers(head: bytes) -> dict[str, str]:
    lines = head.decode("latin-1").split("\r\n")[1:]
    out: dict[str, str] = {}
    for line in lines:
        name, sep, value = line.partition(":")
        if sep:
            out[name.strip().lower()] = value.strip()
    return out


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None  # closed between requests
        raise
    except asyncio.LimitOverrunError as exc:
        raise ConnectionError("HTTP head too large") from exc


async def _read_body(reader: asyncio.StreamReader, headers: dict[str, str]) -> bytes | None:
    """The raw body bytes as framed by ``headers``; None if it runs to the end of the stream."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        parts = []
        while True:
            size_line = await reader.readuntil(b"\r\n")
            parts.append(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            if size == 0:
                while True:  # trailers, then the empty line
                    trailer = await reader.readuntil(b"\r\n")
                    parts.append(trailer)
                    if trailer == b"\r\n":
                        return b"".join(parts)
            parts.append(await reader.readexactly(size + 2))
    if "content-length" in headers:
        return await reader.readexactly(int(headers["content-length"]))
    return None


async def _read_request(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> tuple[bytes, bytes, str] | None:
    head = await _read_head(reader)
    if head is None:
        return None
    headers = _headers(head)
    method = head.split(b" ", 1)[0].decode("latin-1").upper()
    if headers.get("expect", "").lower() == "100-continue":
        # Answer the interim response ourselves and forward the request without the header:
        # the faults act on whole requests, and the server then needs no interim answer.
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        await writer.drain()
        head = b"\r\n".join(
            line for line in head.split(b"\r\n") if not line.lower().startswith(b"expect:")
        )
        head = head if head.endswith(b"\r\n\r\n") else head + b"\r\n\r\n"
    body = await _read_body(reader, headers)
    return head, body or b"", method


async def _read_response(reader: asyncio.StreamReader, method: str) -> tuple[bytes, bool] | None:
    """The whole answer (interim ones included) and whether the connection stays usable."""
    parts: list[bytes] = []
    while True:
        head = await _read_head(reader)
        if head is None:
            return None
        parts.append(head)
        status = int(head.split(b" ", 2)[1])
        if 100 <= status < 200:
            continue
        headers = _headers(head)
        keep = headers.get("connection", "").lower() != "close"
        if method == "HEAD" or status in (204, 304):
            return b"".join(parts), keep
        body = await _read_body(reader, headers)
        if body is None:  # delimited by the end of the stream
            parts.append(await reader.read())
            return b"".join(parts), False
        parts.append(body)
        return b"".join(parts), keep
