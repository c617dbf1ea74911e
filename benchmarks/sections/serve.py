"""``serve``: a TryLock + Unlock round trip through ``prioritylock serve``, against the same cycle
made in process with ``AsyncLock`` (a new lock object each cycle, as the service builds one per
TryLock, and the same object).

Per picked store (memory and the cloud ones), one service (``_service.py``) and one client at a
time, each on its own resource, the same every cycle: HTTP (``/v1.0-alpha1/lock`` and
``/unlock`` on one kept-alive connection), gRPC (the ``dapr`` package's stubs on one channel)
and the Dapr SDK (``DaprClient``: what an existing Dapr app pays). Variants are interleaved; the
service's CPU per cycle comes from ``/proc`` (warm-up excluded). Every answer is checked: a
TryLock must succeed and an Unlock answer status 0, or the section raises.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from typing import Any

import _servers
from _bench import Bench, Sizes, StoreKind, alock_cycle, close_loop
from _harness import (
    Cycles,
    CycleVariant,
    Section,
    compare,
    fmt_num,
    run_interleaved,
    timed,
    timed_async,
)
from _service import Service, ServiceError, post_json

from prioritylock import LockBuilder
from prioritylock.stores import open_store

STORE = "locks"  # the store's name in the service (Dapr's storeName)
EXPIRY_S = 60  # expiryInSeconds of every TryLock (each is unlocked at once)
SDK_WARNING = "The Distributed Lock API is an Alpha"


def _check_lock(success: object, how: str) -> None:
    if success is not True:
        raise ServiceError(f"{how}: TryLock of a free lock answered success={success!r}")


def _check_unlock(status: object, how: str) -> None:
    if status != 0:
        raise ServiceError(f"{how}: Unlock by the holder answered status={status!r}")


def _http_cycles(service: Service, resource: str, stack: ExitStack) -> Cycles:
    conn = service.connection()
    stack.callback(conn.close)
    lock_body = {"resourceId": resource, "lockOwner": "bench-http", "expiryInSeconds": EXPIRY_S}
    unlock_body = {"resourceId": resource, "lockOwner": "bench-http"}
    lock_path, unlock_path = f"/v1.0-alpha1/lock/{STORE}", f"/v1.0-alpha1/unlock/{STORE}"

    def cycle() -> None:
        _check_lock(post_json(conn, lock_path, lock_body).get("success"), "HTTP")
        _check_unlock(post_json(conn, unlock_path, unlock_body).get("status"), "HTTP")

    return timed(cycle)


def _grpc_cycles(service: Service, resource: str, stack: ExitStack) -> Cycles:
    import grpc
    from dapr.proto.runtime.v1 import dapr_pb2_grpc, lock_pb2

    channel = stack.enter_context(grpc.insecure_channel(service.grpc_target))
    stub = dapr_pb2_grpc.DaprStub(channel)  # type: ignore[no-untyped-call]
    lock_req = lock_pb2.TryLockRequest(
        store_name=STORE, resource_id=resource, lock_owner="bench-grpc", expiry_in_seconds=EXPIRY_S
    )
    unlock_req = lock_pb2.UnlockRequest(
        store_name=STORE, resource_id=resource, lock_owner="bench-grpc"
    )

    def cycle() -> None:
        _check_lock(stub.TryLockAlpha1(lock_req, timeout=10).success, "gRPC")
        _check_unlock(stub.UnlockAlpha1(unlock_req, timeout=10).status, "gRPC")

    return timed(cycle)


def _sdk_cycles(service: Service, resource: str, stack: ExitStack) -> Cycles:
    from dapr.clients import DaprClient

    # The SDK finds its sidecar as every Dapr app does: from the environment.
    with _servers.environment(
        {
            "DAPR_RUNTIME_HOST": "127.0.0.1",
            "DAPR_HTTP_PORT": str(service.http_port),
            "DAPR_GRPC_PORT": str(service.grpc_port),
            "DAPR_HEALTH_TIMEOUT": "10",
        }
    ):
        client = DaprClient()
    stack.callback(client.close)

    def cycle() -> None:
        _check_lock(client.try_lock(STORE, resource, "bench-sdk", EXPIRY_S).success, "Dapr SDK")
        _check_unlock(client.unlock(STORE, resource, "bench-sdk").status.value, "Dapr SDK")

    return timed(cycle)


class _ServiceCpu:
    """Wraps a variant's cycles to add up the service's CPU over its timed chunks (the first
    call, the warm-up, is left out)."""

    def __init__(self, service: Service) -> None:
        self.service, self.cpu_s, self.cycles = service, 0.0, -1

    def wrap(self, run: Cycles) -> Cycles:
        def wrapped(k: int) -> list[int]:
            before = self.service.cpu_s()
            out = run(k)
            if self.cycles >= 0:
                self.cpu_s += self.service.cpu_s() - before
            self.cycles += 1 if self.cycles < 0 else k
            return out

        return wrapped


@contextmanager
def _quiet_sdk() -> Iterator[None]:
    """The SDK warns on every lock call that the API is alpha; the benchmark knows."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=SDK_WARNING)
        yield


def _store_variants(
    b: Bench,
    kind: StoreKind,
    loop: asyncio.AbstractEventLoop,
    stack: ExitStack,
    service_cpu: dict[str, _ServiceCpu],
) -> list[CycleVariant]:
    s = b.sizes
    target = s.cloud_iterations if kind.emulator is not None else s.cycles_slow
    service = stack.enter_context(Service({STORE: b.url(kind)}, b.root / "serve-logs"))
    clients = [
        ("http", "HTTP, one keep-alive connection", _http_cycles(service, "r-http", stack)),
        ("grpc", "gRPC, Dapr's stubs on one channel", _grpc_cycles(service, "r-grpc", stack)),
        ("sdk", "Dapr Python SDK (DaprClient, gRPC)", _sdk_cycles(service, "r-sdk", stack)),
    ]
    variants: list[CycleVariant] = []
    for name, text, run in clients:
        meter = service_cpu[f"{kind.name}/{name}"] = _ServiceCpu(service)
        label = f"{kind.label}, service: {text}"
        variants.append(CycleVariant(f"{kind.name}/{name}", label, target, meter.wrap(run)))
    store = open_store(b.url(kind))

    async def build(builder: LockBuilder) -> Any:
        return builder.build_async()

    same = loop.run_until_complete(build(b.builder(store, b.path("serve-same"), "bench")))
    fresh = b.builder(store, b.path("serve-fresh"), "bench").build_async
    in_process = [
        ("fresh", "fresh each cycle", timed_async(loop, alock_cycle, fresh)),
        ("same", "same object", timed_async(loop, partial(alock_cycle, same))),
    ]
    for name, text, run in in_process:
        label = f"{kind.label}, in process: AsyncLock, {text}"
        variants.append(CycleVariant(f"{kind.name}/in-process-{name}", label, target, run))
    return variants


def _serve_kinds(b: Bench) -> list[StoreKind]:
    """The memory store and the picked cloud stores whose emulator runs (the service's own
    memory store lives in the service process)."""
    return [k for k in b.store_kinds if k.name == "memory" or k.emulator is not None]


def section_serve(b: Bench) -> Section:
    loop = asyncio.new_event_loop()
    service_cpu: dict[str, _ServiceCpu] = {}
    variants: list[CycleVariant] = []
    try:
        with ExitStack() as stack, _quiet_sdk():
            for kind in _serve_kinds(b):
                variants += _store_variants(b, kind, loop, stack, service_cpu)
            if not variants:
                raise ServiceError("no store to serve: pick memory or a cloud store")
            run_interleaved(variants, b.sizes)
    finally:
        close_loop(loop)
    return _render(variants, service_cpu, b.sizes)


def _render(
    variants: list[CycleVariant], service_cpu: dict[str, _ServiceCpu], sizes: Sizes
) -> Section:
    against = {v.key: f"{v.key.split('/', 1)[0]}/in-process-fresh" for v in variants}
    title = "prioritylock serve: TryLock + Unlock, one client at a time (µs per round trip)"
    note = (
        "vs in-process: the median over the in-process AsyncLock cycle with a new lock object "
        "(what the service does per TryLock); cycles/s: 1 / the mean cycle; service CPU: the "
        "service process's per cycle (from /proc)."
    )
    section = compare("serve", title, variants, against, "in-process", sizes, [note])
    section.headers[-1:-1] = ["cycles/s", "service CPU µs"]
    for line, row in zip(section.table, section.rows, strict=True):
        meter = service_cpu.get(row["variant"])
        served = 1e6 * meter.cpu_s / meter.cycles if meter and meter.cycles > 0 else None
        row["service_cpu_us_per_cycle"] = served
        row["cycles_per_s"] = round(1e6 / row["mean"], 1)
        line[-1:-1] = [f"{row['cycles_per_s']:,.0f}", "" if served is None else fmt_num(served)]
    return section
