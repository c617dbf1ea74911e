"""``serve``: a lock + unlock round trip through ``prioritylock serve``, against the same cycle
made in process with ``AsyncLock`` (a new lock object each cycle, as the service builds one per
acquisition, and the same object).

Per picked store (memory and the cloud ones), one service (``_servers.Service``) and one client at a
time, each on its own resource, the same every cycle. Dapr's alpha1 API: HTTP
(``/v1.0-alpha1/lock`` and ``/unlock`` on one kept-alive connection), gRPC (the ``dapr``
package's stubs on one channel) and the Dapr SDK (``DaprClient``: what an existing Dapr app pays).
The full API: HTTP ``POST`` + ``DELETE``, gRPC ``Acquire`` + ``Unlock``, and a gRPC ``Lock``
stream from the call to ``lock_acquired``, then cancelled (the release; the next cycle's call
waits for it). Variants are interleaved; the service's CPU per cycle comes from ``/proc``
(warm-up excluded). Every answer is checked: a refused free lock, a non-zero alpha1 Unlock status
or a wrong answer raises.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable
from contextlib import ExitStack, closing
from functools import partial
from typing import Any

import _servers
from _bench import Bench, StoreKind, alock_cycle, close_loop
from _harness import (
    CycleVariant,
    Section,
    compare,
    fmt_num,
    run_interleaved,
    timed,
    timed_async,
)
from _servers import Service, ServiceError, call_json

from prioritylock import LockBuilder
from prioritylock.stores import open_store

STORE = "locks"  # the store's name in the service (Dapr's storeName)
EXPIRY_S = 60  # expiryInSeconds of every TryLock (each is unlocked at once)


Cycle = Callable[[], None]  # one checked round trip; a wrong answer raises ServiceError


def _alpha1(how: str, try_lock: Callable[[], object], unlock: Callable[[], object]) -> Cycle:
    """A TryLock + Unlock cycle; a refused free lock or a non-zero Unlock status raises."""

    def cycle() -> None:
        if (success := try_lock()) is not True:
            raise ServiceError(f"{how}: TryLock of a free lock answered success={success!r}")
        if (status := unlock()) != 0:
            raise ServiceError(f"{how}: Unlock by the holder answered status={status!r}")

    return cycle


def _http(service: Service, resource: str, stack: ExitStack) -> Cycle:
    conn = stack.enter_context(closing(service.connection()))
    lock = {"resourceId": resource, "lockOwner": "bench-http", "expiryInSeconds": EXPIRY_S}
    unlock = {"resourceId": resource, "lockOwner": "bench-http"}
    return _alpha1(
        "HTTP",
        lambda: call_json(conn, "POST", f"/v1.0-alpha1/lock/{STORE}", lock).get("success"),
        lambda: call_json(conn, "POST", f"/v1.0-alpha1/unlock/{STORE}", unlock).get("status"),
    )


def _grpc(service: Service, resource: str, stack: ExitStack) -> Cycle:
    import grpc
    from dapr.proto.runtime.v1 import dapr_pb2_grpc, lock_pb2

    channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}"))
    stub = dapr_pb2_grpc.DaprStub(channel)  # type: ignore[no-untyped-call]
    who = {"store_name": STORE, "resource_id": resource, "lock_owner": "bench-grpc"}
    lock = lock_pb2.TryLockRequest(**who, expiry_in_seconds=EXPIRY_S)
    unlock = lock_pb2.UnlockRequest(**who)
    return _alpha1(
        "gRPC",
        lambda: stub.TryLockAlpha1(lock, timeout=10).success,
        lambda: stub.UnlockAlpha1(unlock, timeout=10).status,
    )


def _sdk(service: Service, resource: str, stack: ExitStack) -> Cycle:
    from dapr.clients import DaprClient

    # The SDK finds its sidecar as every Dapr app does: from the environment.
    env = {"DAPR_RUNTIME_HOST": "127.0.0.1", "DAPR_HEALTH_TIMEOUT": "10"}
    env |= {"DAPR_HTTP_PORT": str(service.http_port), "DAPR_GRPC_PORT": str(service.grpc_port)}
    with _servers.environment(env):
        client = stack.enter_context(DaprClient())
    return _alpha1(
        "Dapr SDK",
        lambda: client.try_lock(STORE, resource, "bench-sdk", EXPIRY_S).success,
        lambda: client.unlock(STORE, resource, "bench-sdk").status.value,
    )


def _full_http(service: Service, resource: str, stack: ExitStack) -> Cycle:
    conn = stack.enter_context(closing(service.connection()))
    path = f"/v1.0-alpha2/lock/{STORE}/{resource}"

    def cycle() -> None:
        held = call_json(conn, "POST", path, {})
        call_json(conn, "DELETE", path, {"lockID": held["lockID"]}, expect=204)

    return cycle


def _lock_service(service: Service, stack: ExitStack) -> Any:
    """A ``prioritylock.v1.LockService`` stub on a new channel."""
    import grpc

    from prioritylock.server._proto import lock_pb2_grpc

    channel = stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}"))
    return lock_pb2_grpc.LockServiceStub(channel)  # type: ignore[no-untyped-call]


def _full_grpc(service: Service, resource: str, stack: ExitStack) -> Cycle:
    from prioritylock.server._proto import lock_pb2

    stub = _lock_service(service, stack)
    ask = lock_pb2.LockRequest(store_name=STORE, resource_id=resource)

    def cycle() -> None:  # a wrong answer is an error status: it raises
        held = stub.Acquire(ask, timeout=10)
        unlock = {"store_name": STORE, "resource_id": resource, "lock_id": held.lock_id}
        stub.Unlock(lock_pb2.UnlockRequest(**unlock), timeout=10)

    return cycle


def _grpc_stream(service: Service, resource: str, stack: ExitStack) -> Cycle:
    from prioritylock.server._proto import lock_pb2

    stub = _lock_service(service, stack)
    ask = lock_pb2.LockRequest(store_name=STORE, resource_id=resource)

    def cycle() -> None:
        call = stub.Lock(ask, timeout=10)
        kinds = (m.WhichOneof("lock_server_stream") for m in call)
        first = next((kind for kind in kinds if kind != "ping"), "the end of the call")
        call.cancel()  # the release
        if first != "lock_acquired":
            raise ServiceError(f"gRPC Lock stream: {first} before lock_acquired")

    return cycle


CLIENTS = [
    ("http", "alpha1 HTTP, one keep-alive connection", _http),
    ("grpc", "alpha1 gRPC, Dapr's stubs on one channel", _grpc),
    ("sdk", "alpha1 via the Dapr Python SDK (gRPC)", _sdk),
    ("http-full", "full API over HTTP: POST + DELETE", _full_http),
    ("grpc-full", "full API over gRPC: Acquire + Unlock", _full_grpc),
    ("grpc-stream", "full API over gRPC: Lock stream, acquired -> cancelled", _grpc_stream),
]


def _variants(
    b: Bench,
    kind: StoreKind,
    loop: asyncio.AbstractEventLoop,
    stack: ExitStack,
) -> list[CycleVariant]:
    target = b.sizes.cloud_iterations if kind.emulator is not None else b.sizes.cycles_slow
    service = stack.enter_context(Service({STORE: b.url(kind)}))
    variants: list[CycleVariant] = []
    for name, text, client in CLIENTS:
        run = timed(client(service, f"r-{name}", stack))
        label = f"{kind.label}, service: {text}"
        variants.append(CycleVariant(f"{kind.name}/{name}", label, target, run, server=service.pid))
    store = open_store(b.url(kind))

    async def build(builder: LockBuilder) -> Any:
        return builder.build_async()

    same = loop.run_until_complete(build(b.builder(store, b.path("serve-same"), "bench")))
    fresh = b.builder(store, b.path("serve-fresh"), "bench").build_async
    for name, text, run in [
        ("fresh", "fresh each cycle", timed_async(loop, alock_cycle, fresh)),
        ("same", "same object", timed_async(loop, partial(alock_cycle, same))),
    ]:
        label = f"{kind.label}, in process: AsyncLock, {text}"
        variants.append(CycleVariant(f"{kind.name}/in-process-{name}", label, target, run))
    return variants


def section_serve(b: Bench) -> Section:
    # The memory store (the service's lives in the service process) and the emulated ones.
    kinds = [k for k in b.store_kinds if k.name == "memory" or k.emulator is not None]
    if not kinds:
        raise ServiceError("no store to serve: pick memory or a cloud store")
    loop = asyncio.new_event_loop()
    try:
        with ExitStack() as stack, warnings.catch_warnings():
            # The SDK warns on every lock call that the API is alpha; the benchmark knows.
            warnings.filterwarnings("ignore", message="The Distributed Lock API is an Alpha")
            variants = [v for k in kinds for v in _variants(b, k, loop, stack)]
            run_interleaved(variants, b.sizes)
    finally:
        close_loop(loop)
    against = {v.key: f"{v.key.split('/', 1)[0]}/in-process-fresh" for v in variants}
    title = "prioritylock serve: lock + unlock, one client at a time (µs per round trip)"
    note = (
        "vs in-process: the median over the in-process AsyncLock cycle with a new lock object "
        "(what the service does per acquisition); cycles/s: 1 / the mean cycle; service CPU: the "
        "service process's per cycle (from /proc; warm-up left out)."
    )
    section = compare("serve", title, variants, against, "in-process", b.sizes, [note])
    section.headers[-1:-1] = ["cycles/s", "service CPU µs"]
    for line, row, v in zip(section.table, section.rows, variants, strict=True):
        served = 1e6 * v.server_cpu_s / len(v.samples) if v.server else None
        row |= {"service_cpu_us_per_cycle": served, "cycles_per_s": round(1e6 / row["mean"], 1)}
        line[-1:-1] = [f"{row['cycles_per_s']:,.0f}", "" if served is None else fmt_num(served)]
    return section
