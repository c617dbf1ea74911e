"""``native``: our lock on Redis, ZooKeeper and etcd against each server's own lock recipe:
redis-py's ``Lock`` (``SET NX PX``; a blocked acquire polls every 0.1 s), kazoo's ``Lock`` (an
ephemeral sequential node, a watch on the one before), etcd's lock API (``/v3/lock/lock`` on a
lease, through the JSON gateway). Per server: the uncontended acquire + release cycle, the handover
(release in one process -> acquired in another; ours on the store's notices alone) and the requests
each operation sends, counted in redis-py, kazoo and urllib3, which our stores use too. Also
``push``'s ZooKeeper comparator (:func:`zookeeper`)."""

from __future__ import annotations

import base64
import json
import multiprocessing as mp
import queue
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from functools import partial
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any
from unittest import mock
from urllib.parse import urlsplit

import _servers
from _bench import Bench
from _harness import CycleVariant, Json, Section, run_interleaved, summarize, timed

from prioritylock import LockBuilder

NATIVE = {"redis": "redis-py Lock", "zookeeper": "kazoo Lock", "etcd": "etcd lock API"}
TTL_S = 600  # the recipes' leases (etcd: one per client), longer than the section


class _Ours:
    def __init__(self, url: str, name: str) -> None:
        self.lock = LockBuilder().store(url).path("native", name).owner("bench").build()
        self.renew, self.release, self.close = self.lock.renew, self.lock.unlock, self.lock.close

    def acquire(self, wait: bool) -> bool:
        if wait:
            self.lock.lock(timeout=TTL_S)
        return wait or self.lock.try_lock()


class _Redis:
    def __init__(self, url: str, name: str) -> None:
        import redis

        self.client = redis.Redis.from_url(url.split("?", 1)[0])
        self.lock = self.client.lock(f"native:{name}", timeout=TTL_S)
        self.renew, self.release = self.lock.reacquire, self.lock.release
        self.close = self.client.close

    def acquire(self, wait: bool) -> bool:
        return bool(self.lock.acquire(blocking=wait, blocking_timeout=TTL_S))


class _Kazoo:
    renew = None  # the session's pings keep every lock of the client

    def __init__(self, url: str, name: str) -> None:
        from kazoo.client import KazooClient

        (client := KazooClient(urlsplit(url).netloc)).start(30)
        self.client, self.lock = client, client.Lock(f"/native/{name}", "bench")
        self.release, self.close = self.lock.release, client.stop

    def acquire(self, wait: bool) -> bool:
        return bool(self.lock.acquire(blocking=wait, timeout=TTL_S if wait else None))


class _Etcd:
    def __init__(self, url: str, name: str) -> None:
        import urllib3

        where = urlsplit(url)
        self.pool = urllib3.HTTPConnectionPool(str(where.hostname), where.port, maxsize=1)
        self.name = base64.b64encode(f"native/{name}".encode()).decode()
        self.lease, self.key = self._call("lease/grant", TTL=TTL_S)["ID"], ""
        self.renew = partial(self._call, "lease/keepalive", ID=self.lease)

    def _call(self, path: str, **body: str | int) -> Json:
        answer = self.pool.request("POST", f"/v3/{path}", body=json.dumps(body).encode())
        if answer.status != 200:
            raise RuntimeError(f"etcd {path}: {answer.status} {answer.data[:200]!r}")
        return dict(json.loads(answer.data))

    def acquire(self, wait: bool) -> bool:  # the lock API always waits; a free lock is at once
        self.key = self._call("lock/lock", name=self.name, lease=self.lease)["key"]
        return True

    def release(self) -> None:
        self._call("lock/unlock", key=self.key)

    def close(self) -> None:
        self._call("lease/revoke", ID=self.lease)
        self.pool.close()


Recipe = _Ours | _Redis | _Kazoo | _Etcd


_RECIPES: dict[str, Callable[[str, str], Recipe]] = {"redis": _Redis, "zk": _Kazoo, "etcd": _Etcd}


def _open(native: bool, url: str, name: str) -> Recipe:
    return _RECIPES[urlsplit(url).scheme](url, name) if native else _Ours(url, name)


def _holder(native: bool, url: str, name: str, conn: Connection) -> None:
    """The other process: holds when told; then releases (or, kazoo, sets ``/native/request``)
    50 ms into the other's wait, saying when."""
    recipe = _open(native, url, name)
    while (command := conn.recv()) is not None:
        if command == "hold":
            conn.send(recipe.acquire(wait=True))
            continue
        time.sleep(0.05)
        conn.send(time.monotonic_ns())
        if command == "release":
            recipe.release()
        elif isinstance(recipe, _Kazoo):
            recipe.client.set("/native/request", b"9")
    recipe.close()


def _handovers(native: bool, url: str, rounds: int, told: Any = None, host: Any = None) -> Any:
    """``rounds`` handovers (ns): the other's release -> our blocked acquire returns; with
    ``told``, also ``rounds`` of the other's ``set`` -> our watch's call (the other in ``host``)."""
    name, (conn, theirs) = f"handover-{uuid.uuid4().hex[:8]}", mp.Pipe()
    child = mp.get_context("spawn").Process(target=_holder, args=(native, url, name, theirs))
    with _servers.netns.inside(host):
        child.start()
    waiter, samples, requests = _open(native, url, name), [], []
    try:
        for _ in range(rounds):
            conn.send("hold")
            if not conn.recv():
                raise RuntimeError("the holder did not get a free lock")
            if told is not None:
                conn.send("request")
                requests.append(told.get(timeout=10) - conn.recv())
            conn.send("release")
            if not waiter.acquire(wait=True):
                raise RuntimeError("the waiter did not get the released lock")
            samples.append(time.monotonic_ns() - conn.recv())
            waiter.release()
        conn.send(None)
        child.join(30)
        return (requests, samples) if told is not None else samples
    finally:
        waiter.close()
        child.kill()


def zookeeper(rounds: int, work: Path, two: Any) -> tuple[list[int], list[int]] | None:
    """``push``'s comparator (issue 21), ns: a child's ``set`` -> our ``DataWatch`` called (Helix
    hears requests so), kazoo's handover; we in one of ``two`` hosts, it in the other, or None."""
    with ExitStack() as stack:
        try:
            from kazoo.client import KazooClient

            hosts = stack.enter_context(_servers.running(["zookeeper"], work))["zookeeper"].endpoint
        except (ImportError, _servers.EmulatorError):
            return None
        two.expose(int(hosts.rpartition(":")[2]))
        stack.enter_context(_servers.netns.inside(two.names[0]))  # our clients' sockets
        (zk := KazooClient(hosts)).start(30)
        stack.callback(zk.stop)
        told: queue.Queue[int] = queue.Queue()  # when our watch was called
        zk.ensure_path("/native/request")
        zk.DataWatch("/native/request", lambda *_: told.put(time.monotonic_ns()))
        told.get()  # called once as it is set
        return _handovers(True, f"zk://{hosts}", rounds, told, two.names[1])  # type: ignore[no-any-return]


@contextmanager
def _sent() -> Iterator[Counter[str]]:
    """Requests sent, counted in the clients both sides use (kazoo's pings left out)."""
    from kazoo.protocol.connection import ConnectionHandler
    from kazoo.protocol.serialization import Ping
    from redis.connection import AbstractConnection
    from urllib3 import HTTPConnectionPool

    sent: Counter[str] = Counter()

    def counting(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: object, first: object, *args: Any, **kwargs: Any) -> Any:
            sent["requests"] += not isinstance(first, Ping)  # kazoo's _submit(request, ...)
            return method(self, first, *args, **kwargs)

        return call

    with ExitStack() as stack:
        for cls, name in [
            (AbstractConnection, "send_packed_command"),
            (ConnectionHandler, "_submit"),
            (HTTPConnectionPool, "urlopen"),
        ]:
            stack.enter_context(mock.patch.object(cls, name, counting(getattr(cls, name))))
        yield sent


def _cycle(recipe: Recipe) -> None:
    if not recipe.acquire(wait=False):
        raise RuntimeError("an uncontended acquire failed")
    recipe.release()


def _requests(recipe: Recipe, reps: int = 10) -> dict[str, float | None]:
    """Mean requests per uncontended acquire, renewal and release (a first round left out)."""
    ops: dict[str, Callable[[], object] | None] = {"acquire": partial(recipe.acquire, False)}
    ops |= {"renew": recipe.renew, "release": recipe.release}
    out: Counter[str] = Counter()
    with _sent() as sent:
        for i in range(reps + 1):
            for op, call in ops.items():
                sent.clear()
                _ = call is not None and call()
                out[op] += sent.total() if i else 0
    return {op: None if ops[op] is None else out[op] / reps for op in ops}


def section_native(b: Bench) -> Section:
    table: list[list[str]] = []
    rows: list[Json] = []
    with _servers.environment({"PRIORITYLOCK_HINTS": "off"}):  # the store's notices alone
        kinds = [k for k in b.kinds if k.server and k.name in b.emulators]
        runs = {(k, nat): _open(nat, b.url(k), "cycle") for k in kinds for nat in (False, True)}
        variants = {}
        for (kind, native), recipe in runs.items():
            label = NATIVE[kind.name] if native else "prioritylock"
            run = timed(partial(_cycle, recipe))
            variants[kind, native] = CycleVariant(label, label, b.sizes.cycles_slow, run)
        run_interleaved(list(variants.values()), b.sizes)
        for recipe in runs.values():
            recipe.close()
        for kind, native in runs:  # one recipe open at a time: the requests are its own
            cycle_us = summarize((v := variants[kind, native]).samples, 1e3)
            handover = summarize(_handovers(native, b.url(kind), b.sizes.handoffs), 1e6)
            requests = _requests(recipe := _open(native, b.url(kind), "requests"))
            recipe.close()
            cells = [*cycle_us.cells()[:2], *handover.cells()[:2]]
            cells += ["" if n is None else f"{n:g}" for n in requests.values()]
            table.append([f"{kind.label}, {v.label}", *cells])
            row = {"store": kind.name, "lock": v.label, "native": native, "requests": requests}
            rows.append(row | {"cycle_us": asdict(cycle_us), "handover_ms": asdict(handover)})
    title = "Redis, ZooKeeper, etcd: our lock against the server's own (cycle µs, handover ms)"
    headers = ["lock", "cycle", "p99", "handover", "p99", "acquire", "renew", "release"]
    note = "cycle: uncontended acquire + release, median µs; handover: release in one process -> "
    note += "acquired in the other, ms; acquire / renew / release: requests sent, mean (kazoo's "
    note += "session pings keep its locks: no renewal)."
    return Section("native", title, headers, table, rows, [note])
