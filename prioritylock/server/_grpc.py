"""The gRPC front end (grpc.aio): ``dapr.proto.runtime.v1.Dapr`` with TryLockAlpha1 and
UnlockAlpha1, on the messages the ``dapr`` package generates from Dapr's own protos (so the
field numbers are Dapr's). Every other method of the service answers UNIMPLEMENTED.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import grpc
from dapr.proto.runtime.v1 import lock_pb2

from prioritylock._errors import PriorityLockError
from prioritylock.server._alpha1 import Alpha1Locks, BadRequest, StoreNotFound

__all__ = ["SERVICE", "make_server"]

log = logging.getLogger("prioritylock.server")

SERVICE = "dapr.proto.runtime.v1.Dapr"
_TOKEN = "dapr-api-token"  # noqa: S105 (a header name, not a secret)


def make_server(
    locks: Alpha1Locks,
    *,
    host: str,
    port: int,
    api_token: str | None,
    max_body: int,
    credentials: grpc.ServerCredentials | None = None,
) -> tuple[grpc.aio.Server, int]:
    """A grpc.aio server (not started) serving ``locks``, and the port it is bound to (over
    TLS with ``credentials``).

    :raises RuntimeError: the port could not be bound.
    """

    async def check(context: grpc.aio.ServicerContext[Any, Any]) -> None:
        if api_token is None:
            return
        given = dict(context.invocation_metadata() or ()).get(_TOKEN, "")
        if not isinstance(given, str) or not hmac.compare_digest(
            given.encode(), api_token.encode()
        ):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or invalid api token")

    async def fail(
        context: grpc.aio.ServicerContext[Any, Any], what: str, store: str, exc: Exception
    ) -> None:
        if isinstance(exc, BadRequest | StoreNotFound):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        log.error("prioritylock serve: %s in lock store %s: %s", what, store, exc)
        await context.abort(
            grpc.StatusCode.INTERNAL, f"{what}: {type(exc).__name__} in lock store {store}"
        )

    async def try_lock(
        request: lock_pb2.TryLockRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> lock_pb2.TryLockResponse:
        await check(context)
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

    async def unlock(
        request: lock_pb2.UnlockRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> lock_pb2.UnlockResponse:
        await check(context)
        try:
            status = await locks.unlock(request.store_name, request.resource_id, request.lock_owner)
        except (BadRequest, StoreNotFound, PriorityLockError) as exc:
            await fail(context, "failed to release lock", request.store_name, exc)
            raise
        return lock_pb2.UnlockResponse(status=status)  # type: ignore[arg-type]

    handlers = {
        "TryLockAlpha1": grpc.unary_unary_rpc_method_handler(
            try_lock,
            request_deserializer=lock_pb2.TryLockRequest.FromString,
            response_serializer=lock_pb2.TryLockResponse.SerializeToString,
        ),
        "UnlockAlpha1": grpc.unary_unary_rpc_method_handler(
            unlock,
            request_deserializer=lock_pb2.UnlockRequest.FromString,
            response_serializer=lock_pb2.UnlockResponse.SerializeToString,
        ),
    }
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", max_body),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
    address = f"{host}:{port}"
    if credentials is not None:
        return server, server.add_secure_port(address, credentials)
    return server, server.add_insecure_port(address)
