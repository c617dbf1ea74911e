"""``serve``: a lock + unlock round trip through ``prioritylock serve`` against the same cycle in
process with ``AsyncLock`` (a new lock object each cycle, as the service builds one, and the same).

Per picked store (memory and the emulated ones), one service and one client at a time, each on its
own resource: Dapr's alpha1 API over HTTP (one kept-alive connection), gRPC (``dapr``'s stubs) and
the Dapr SDK (what an existing Dapr app pays); the full API over HTTP, gRPC unary and a gRPC
``Lock`` stream (from the call to ``lock_acquired``, then cancelled: the release). The service's
CPU per cycle is read from ``/proc``. A refused free lock or any wrong answer raises.
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
from _harness import CycleVariant, Section, compare, fmt_num, run_interleaved, timed, timed_async
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
    unlock = {"resourceId": resource, "lockOwner": "bench-http"}
    lock, path = unlock | {"expiryInSeconds": EXPIRY_S}, f"/v1.0-alpha1/%s/{STORE}"
    return _alpha1(
        "HTTP",
        lambda: call_json(conn, "POST", path % "lock", lock).get("success"),
        lambda: call_json(conn, "POST", path % "unlock", unlock).get("status"),
    )


def _channel(service: Service, stack: ExitStack) -> Any:
    import grpc

    return stack.enter_context(grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}"))


def _grpc(service: Service, resource: str, stack: ExitStack) -> Cycle:
    from dapr.proto.runtime.v1 import dapr_pb2_grpc, lock_pb2

    stub = dapr_pb2_grpc.DaprStub(_channel(service, stack))  # type: ignore[no-untyped-call]
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


def _lock_service(service: Service, resource: str, stack: ExitStack) -> tuple[Any, Any]:
    """A ``prioritylock.v1.LockService`` stub on a new channel, and a request for ``resource``."""
    from prioritylock.server._proto import lock_pb2, lock_pb2_grpc

    stub = lock_pb2_grpc.LockServiceStub(_channel(service, stack))  # type: ignore[no-untyped-call]
    return stub, lock_pb2.LockRequest(store_name=STORE, resource_id=resource)


def _full_grpc(service: Service, resource: str, stack: ExitStack) -> Cycle:
    from prioritylock.server._proto import lock_pb2

    stub, ask = _lock_service(service, resource, stack)

    def cycle() -> None:  # a wrong answer is an error status: it raises
        held = stub.Acquire(ask, timeout=10)
        unlock = {"store_name": STORE, "resource_id": resource, "lock_id": held.lock_id}
        stub.Unlock(lock_pb2.UnlockRequest(**unlock), timeout=10)

    return cycle


def _grpc_stream(service: Service, resource: str, stack: ExitStack) -> Cycle:
    stub, ask = _lock_service(service, resource, stack)

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
    b: Bench, kind: StoreKind, loop: asyncio.AbstractEventLoop, stack: ExitStack
) -> list[CycleVariant]:
    target = b.sizes.cloud_iterations if kind.emulator is not None else b.sizes.cycles_slow
    service = stack.enter_context(Service({STORE: b.url(kind)}))
    variants: list[CycleVariant] = []
    for name, text, client in CLIENTS:
        run, label = timed(client(service, f"r-{name}", stack)), f"{kind.label}, service: {text}"
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
    note = "vs in-process: the median over the in-process AsyncLock cycle with a new lock object "
    note += "(what the service does per acquisition); cycles/s: 1 / the mean cycle; service CPU: "
    note += "the service process's per cycle (from /proc; warm-up left out)."
    section = compare("serve", title, variants, against, "in-process", b.sizes, [note])
    section.headers[-1:-1] = ["cycles/s", "service CPU µs"]
    for line, row, v in zip(section.table, section.rows, variants, strict=True):
        served = 1e6 * v.server_cpu_s / len(v.samples) if v.server else None
        row |= {"service_cpu_us_per_cycle": served, "cycles_per_s": round(1e6 / row["mean"], 1)}
        line[-1:-1] = [f"{row['cycles_per_s']:,.0f}", "" if served is None else fmt_num(served)]
    return section
