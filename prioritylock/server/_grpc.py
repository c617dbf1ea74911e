"""The gRPC front end (grpc.aio), on one port:

- ``dapr.proto.runtime.v1.Dapr`` with TryLockAlpha1 and UnlockAlpha1, on the messages the
  ``dapr`` package generates from Dapr's own protos (so the field numbers are Dapr's). Every
  other method of that service answers UNIMPLEMENTED.
- ``prioritylock.v1.LockService``, the full lock API (:mod:`._grpc_lock`).
- ``grpc.health.v1.Health`` and server reflection (v1 and v1alpha), so that ``grpcurl`` works
  without the proto at hand.

Bounds on a hostile client: a request message is at most ``max_body`` bytes (larger ones are
refused with RESOURCE_EXHAUSTED before they are parsed); one connection may open up to
:data:`MAX_STREAMS` concurrent calls; keepalive pings find dead peers, whose calls then end
(releasing their locks). Bytes that don't parse as the request get INVALID_ARGUMENT and one
line at INFO.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs
import grpc
from dapr.proto.runtime.v1 import lock_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from prioritylock._errors import PriorityLockError
from prioritylock.server._alpha1 import Alpha1Locks, BadRequest, StoreNotFound
from prioritylock.server._alpha2 import Alpha2Locks
from prioritylock.server._grpc_base import (
    Context,
    QuietParsing,
    abort,
    check_token,
    parser,
    reject_malformed,
)
from prioritylock.server._grpc_lock import SERVICE as LOCK_SERVICE
from prioritylock.server._grpc_lock import add_lock_service
from prioritylock.server._health import store_failure
from prioritylock.server._proto import lock_pb2 as lock_service_pb2

__all__ = ["MAX_STREAMS", "SERVICE", "GrpcServer", "make_server"]

log = logging.getLogger("prioritylock.server")

SERVICE = "dapr.proto.runtime.v1.Dapr"
#: Concurrent calls (held ``Lock`` streams included) one HTTP/2 connection may open.
MAX_STREAMS = 100_000
#: Seconds between keepalive pings to an idle connection, and to wait for their answer.
KEEPALIVE = 30.0
KEEPALIVE_TIMEOUT = 10.0


@attrs.define
class GrpcServer:
    """The grpc.aio server and its health service (SERVING while it runs and its stores
    answer)."""

    server: grpc.aio.Server
    health: Any

    async def start(self, *, serving: bool = True) -> None:
        """Start serving; the health service says NOT_SERVING until ``set_serving(True)``
        unless ``serving``."""
        await self.server.start()
        await self.set_serving(serving)

    async def set_serving(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse
        for name in ("", SERVICE, LOCK_SERVICE):
            await self.health.set(name, status.SERVING if serving else status.NOT_SERVING)

    async def stop(self, grace: float | None) -> None:
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)


def make_server(
    locks: Alpha1Locks,
    *,
    host: str,
    port: int,
    api_token: str | None,
    max_body: int,
    streams: Alpha2Locks | None = None,
    operator_token: str | None = None,
    ping_interval: float = 5.0,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[GrpcServer, int]:
    """A server (not started) serving ``locks`` (alpha1) and ``streams`` (LockService), and
    the port it is bound to (over TLS with ``credentials``).

    :raises RuntimeError: the port could not be bound.
    """

    async def fail(context: Context, what: str, store: str, exc: Exception) -> None:
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        if isinstance(exc, BadRequest):
            await abort(context, invalid, "ERR_MALFORMED_REQUEST", str(exc))
        if isinstance(exc, StoreNotFound):
            await abort(context, invalid, "ERR_LOCK_STORE_NOT_FOUND", str(exc))
        assert isinstance(exc, PriorityLockError)
        message = store_failure(what, store, exc)
        log.error("prioritylock serve: %s", message)
        await context.abort(grpc.StatusCode.INTERNAL, message)

    async def try_lock(request: Any, context: Context) -> lock_pb2.TryLockResponse:
        await reject_malformed(context, request, "TryLockAlpha1")
        await check_token(context, api_token)
        try:
            got = await locks.try_lock(
                request.store_name,
                request.resource_id,
                request.lock_owner,
                request.expiry_in_seconds,
            )
        except (BadRequest, StoreNotFound, PriorityLockError) as exc:
            await fail(context, "failed to try acquiring lock", request.store_name, exc)
            raise  # abort raised already; for the type checker
        return lock_pb2.TryLockResponse(success=got)

    async def unlock(request: Any, context: Context) -> lock_pb2.UnlockResponse:
        await reject_malformed(context, request, "UnlockAlpha1")
        await check_token(context, api_token)
        try:
            status = await locks.unlock(request.store_name, request.resource_id, request.lock_owner)
        except (BadRequest, StoreNotFound, PriorityLockError) as exc:
            await fail(context, "failed to release lock", request.store_name, exc)
            raise
        return lock_pb2.UnlockResponse(status=status)  # type: ignore[arg-type]

    handlers = {
        "TryLockAlpha1": grpc.unary_unary_rpc_method_handler(
            try_lock,
            request_deserializer=parser(lock_pb2.TryLockRequest),
            response_serializer=lock_pb2.TryLockResponse.SerializeToString,
        ),
        "UnlockAlpha1": grpc.unary_unary_rpc_method_handler(
            unlock,
            request_deserializer=parser(lock_pb2.UnlockRequest),
            response_serializer=lock_pb2.UnlockResponse.SerializeToString,
        ),
    }
    server = grpc.aio.server(
        interceptors=[QuietParsing([lock_service_pb2.DESCRIPTOR.services_by_name["LockService"]])],
        options=[
            ("grpc.max_receive_message_length", max_body),
            ("grpc.max_concurrent_streams", MAX_STREAMS),
            # A burst of new calls waits for the event loop to take them up; grpc's defaults
            # cancel those that waited over a second once 1,000 are pending (3,000 at once).
            ("grpc.server.max_pending_requests", MAX_STREAMS),
            ("grpc.server.max_pending_requests_hard_limit", MAX_STREAMS),
            ("grpc.keepalive_time_ms", int(KEEPALIVE * 1000)),
            ("grpc.keepalive_timeout_ms", int(KEEPALIVE_TIMEOUT * 1000)),
            # Clients may keepalive-ping every 10 s, even with no call open.
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.so_reuseport", 0),
        ],
    )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, handlers)])
    names = [SERVICE, health.SERVICE_NAME, reflection.SERVICE_NAME]
    if streams is not None:
        add_lock_service(
            server,
            streams,
            api_token=api_token,
            operator_token=operator_token,
            ping_interval=ping_interval,
        )
        names.append(LOCK_SERVICE)
    checks = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(checks, server)
    reflection.enable_server_reflection(names, server)
    address = f"{host}:{port}"
    if credentials is not None:
        bound = server.add_secure_port(address, credentials)
    else:
        bound = server.add_insecure_port(address)
    return GrpcServer(server, checks), bound
