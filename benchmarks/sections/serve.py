"""``serve``: a TryLock + Unlock round trip through ``prioritylock serve``, against the same cycle
made in process with ``AsyncLock``.

Per picked store, one service (``python -m prioritylock serve``, a subprocess on free ports of
127.0.0.1, its store a fresh namespace of that kind), and one client at a time, sequentially, each
on a resource of its own that it locks and unlocks again and again (the same resource every
cycle, so the lease document exists and each cycle is one conditional replace per call):

- HTTP: ``POST /v1.0-alpha1/lock/locks`` then ``/unlock/locks`` on one kept-alive HTTP/1.1
  connection (``http.client``), JSON bodies as Dapr's HTTP API has them;
- gRPC: ``TryLockAlpha1`` then ``UnlockAlpha1`` on one channel (``grpcio``, sync) with the stubs
  and messages of the ``dapr`` package, which is what the service speaks;
- the Dapr SDK: ``DaprClient().try_lock()`` then ``.unlock()`` (gRPC underneath, plus the SDK's
  own checks, warning and retry wrapper): what an existing Dapr app pays;
- in process, for reference: ``await try_lock()`` + ``await unlock()`` on one event loop, with a
  fresh ``AsyncLock`` each cycle (what the service does for each TryLock: it builds a lock object
  per acquisition) and with the same object.

Variants are interleaved in rounds. Besides the client's wall time per cycle, the section records
this process's CPU per cycle and the service's (from ``/proc/PID/stat``, warm-up excluded).
Every answer is checked: a TryLock must succeed (``success`` true) and an Unlock must answer
status 0, or the section raises and the run fails.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from functools import partial
from typing import Any

import _servers
from _bench import Bench, StoreKind, alock_cycle
from _harness import (
    Cycles,
    CycleVariant,
    Json,
    Section,
    fmt_num,
    run_interleaved,
    summarize,
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
        self.service = service
        self.cpu_s = 0.0
        self.cycles = 0
        self._warm = False

    def wrap(self, run: Cycles) -> Cycles:
        def wrapped(k: int) -> list[int]:
            before = self.service.cpu_s()
            out = run(k)
            if self._warm:
                self.cpu_s += self.service.cpu_s() - before
                self.cycles += k
            self._warm = True
            return out

        return wrapped

    @property
    def us_per_cycle(self) -> float | None:
        return 1e6 * self.cpu_s / self.cycles if self.cycles else None


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
    label = kind.label
    clients: list[tuple[str, str, Cycles]] = [
        ("http", "HTTP, one keep-alive connection", _http_cycles(service, "r-http", stack)),
        ("grpc", "gRPC, Dapr's stubs on one channel", _grpc_cycles(service, "r-grpc", stack)),
        ("sdk", "Dapr Python SDK (DaprClient, gRPC)", _sdk_cycles(service, "r-sdk", stack)),
    ]
    variants: list[CycleVariant] = []
    for name, client_label, run in clients:
        meter = service_cpu[f"{kind.name}/{name}"] = _ServiceCpu(service)
        variants.append(
            CycleVariant(
                f"{kind.name}/{name}",
                f"{label}, service: {client_label}",
                target,
                meter.wrap(run),
            )
        )
    store = open_store(b.url(kind))

    async def build(builder: LockBuilder) -> Any:
        return builder.build_async()

    same = loop.run_until_complete(build(b.builder(store, b.path("serve-same"), "bench")))
    variants.append(
        CycleVariant(
            f"{kind.name}/in-process-fresh",
            f"{label}, in process: AsyncLock, fresh each cycle",
            target,
            timed_async(
                loop, alock_cycle, b.builder(store, b.path("serve-fresh"), "bench").build_async
            ),
        )
    )
    variants.append(
        CycleVariant(
            f"{kind.name}/in-process-same",
            f"{label}, in process: AsyncLock, same object",
            target,
            timed_async(loop, partial(alock_cycle, same)),
        )
    )
    return variants


def _serve_kinds(b: Bench) -> list[StoreKind]:
    """The memory store and the picked cloud stores whose emulator runs (the service's own
    memory store lives in the service process)."""
    return [k for k in b.store_kinds if k.name == "memory" or k.emulator is not None]


def _close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Stop what the AsyncLocks left running on ``loop`` (the scheduler's task), then close it."""

    async def cancel_all() -> None:
        pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    loop.run_until_complete(cancel_all())
    loop.run_until_complete(loop.shutdown_default_executor())
    loop.close()


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
        _close_loop(loop)
    return _render(variants, service_cpu)


def _render(variants: list[CycleVariant], service_cpu: dict[str, _ServiceCpu]) -> Section:
    medians = {v.key: summarize(v.samples, 1e3).median for v in variants}
    table: list[list[str]] = []
    rows: list[Json] = []
    for v in variants:
        summary = summarize(v.samples, 1e3)
        store = v.key.split("/", 1)[0]
        ref = medians[f"{store}/in-process-fresh"]
        ops = 1e6 / summary.mean
        meter = service_cpu.get(v.key)
        served = None if meter is None else meter.us_per_cycle
        table.append(
            [
                v.label,
                fmt_num(summary.median),
                fmt_num(summary.p99),
                f"{ops:,.0f}",
                f"{summary.median / ref:.1f}x",
                fmt_num(v.cpu_us),
                "" if served is None else fmt_num(served),
                str(summary.n),
            ]
        )
        rows.append(
            {
                "variant": v.key,
                "label": v.label,
                "unit": "us",
                "cycles_per_s": round(ops, 1),
                "vs_in_process_fresh": round(summary.median / ref, 3),
                "client_cpu_us_per_cycle": round(v.cpu_us, 2),
                "service_cpu_us_per_cycle": None if served is None else round(served, 2),
                **asdict(summary),
            }
        )
    return Section(
        name="serve",
        title="prioritylock serve: TryLock + Unlock, one client at a time (µs per round trip)",
        headers=[
            "variant",
            "median",
            "p99",
            "cycles/s",
            "vs in-process",
            "client CPU µs",
            "service CPU µs",
            "n",
        ],
        table=table,
        rows=rows,
        notes=[
            "One cycle: TryLock (a free lock: must answer success) + Unlock (must answer 0), "
            "sequential, each client on its own resource, the same one every cycle.",
            "cycles/s: 1 / the mean cycle; vs in-process: the median over the in-process "
            "AsyncLock cycle with a fresh lock object (what the service does per TryLock).",
            "client CPU: this process's CPU per cycle (all threads); service CPU: the service "
            "process's (from /proc), timed chunks only.",
        ],
    )
