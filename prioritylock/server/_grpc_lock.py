"""``prioritylock.v1.LockService`` (proto/prioritylock/v1/lock.proto): the full lock API over
gRPC, on :class:`~prioritylock.server._alpha2.Alpha2Locks` as the HTTP routes are.

A ``Lock`` call is a :class:`~prioritylock.server._alpha2.Holding`: its events become
``LockServerStream`` messages, and the end of the call (the client cancels, the connection
drops, the deadline passes) releases the lock or hands it over. Errors are statuses with an
``ErrorInfo`` whose reason is the HTTP API's error code; a store failure's also carries the
error's class (metadata ``error``), and its message says the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from prioritylock._errors import PriorityLockError, StoreUnavailable
from prioritylock._lease import OVERRIDE_PRIORITY
from prioritylock.server._alpha2 import (
    MAX_LIST,
    Alpha2Locks,
    Forbidden,
    Holding,
    LockNotFound,
    Options,
    Pinger,
    ResourceLocked,
)
from prioritylock.server._grpc_base import (
    OPERATOR_METADATA,
    Context,
    abort,
    check_token,
    has_token,
    parser,
    reject_malformed,
)
from prioritylock.server._health import store_failure
from prioritylock.server._metrics import API_GRPC
from prioritylock.server._names import BadRequest, StoreNotFound
from prioritylock.server._proto import lock_pb2

__all__ = ["SERVICE", "lock_service_handler"]

log = logging.getLogger("prioritylock.server")

SERVICE = "prioritylock.v1.LockService"

_T = TypeVar("_T")

#: Our errors, as statuses: (error, code, the HTTP API's error code).
_STATUSES: tuple[tuple[type[Exception], grpc.StatusCode, str], ...] = (
    (BadRequest, grpc.StatusCode.INVALID_ARGUMENT, "ERR_MALFORMED_REQUEST"),
    (StoreNotFound, grpc.StatusCode.INVALID_ARGUMENT, "ERR_LOCK_STORE_NOT_FOUND"),
    (Forbidden, grpc.StatusCode.PERMISSION_DENIED, "ERR_FORBIDDEN"),
    (LockNotFound, grpc.StatusCode.NOT_FOUND, "ERR_LOCK_NOT_FOUND"),
    (ResourceLocked, grpc.StatusCode.ABORTED, "ERR_RESOURCE_LOCKED"),
)


#: What a store failure in each method is called, and its error code (as over HTTP).
_FAILURES = {
    "Lock": ("failed to acquire lock", "ERR_LOCK"),
    "Acquire": ("failed to acquire lock", "ERR_LOCK"),
    "Override": ("failed to acquire lock", "ERR_LOCK"),
    "Renew": ("failed to renew lock", "ERR_RENEW"),
    "Unlock": ("failed to release lock", "ERR_UNLOCK"),
    "ForceUnlock": ("failed to release lock", "ERR_UNLOCK"),
    "Info": ("failed to read lock", "ERR_LOCK_INFO"),
    "List": ("failed to list locks", "ERR_LOCK_LIST"),
}


def lock_service_handler(
    locks: Alpha2Locks,
    *,
    api_token: str | None,
    operator_token: str | None,
    ping_interval: float,
) -> grpc.GenericRpcHandler:
    """The handler of ``prioritylock.v1.LockService`` over ``locks``."""
    pinger = Pinger(ping_interval)

    def is_operator(context: Context) -> bool:
        return has_token(context, OPERATOR_METADATA, operator_token)

    async def answer(
        context: Context, request: Any, method: str, call: Callable[[], Awaitable[_T]]
    ) -> _T:
        """Check the request, run ``call``, and map its errors to statuses."""
        await reject_malformed(context, request, method)
        await check_token(context, api_token)
        try:
            return await call()
        except (BadRequest, StoreNotFound, Forbidden, LockNotFound, ResourceLocked) as exc:
            await _fail(context, exc)
        except PriorityLockError as exc:
            what, code = _FAILURES[method]
            await _store_failed(context, exc, what, code, request.store_name)

    async def lock(request: Any, context: Context) -> None:
        await reject_malformed(context, request, "Lock")
        await check_token(context, api_token)
        store, resource = request.store_name, request.resource_id
        try:
            holding = Holding(
                locks,
                store,
                resource,
                _options(request),
                operator=is_operator(context),
                pinger=pinger,
                api=API_GRPC,
            )
        except BadRequest as exc:
            await _fail(context, exc)
        try:
            await holding.started()
            async for event in holding.events():
                await context.write(_event(event))
        except (BadRequest, StoreNotFound, Forbidden, ResourceLocked) as exc:
            await _fail(context, exc)
        except PriorityLockError as exc:
            await _store_failed(context, exc, *_FAILURES["Lock"], store)
        finally:
            await holding.close()

    async def acquire(request: Any, context: Context) -> lock_pb2.LockAcquired:
        async def run() -> lock_pb2.LockAcquired:
            held = await locks.lock(
                request.store_name,
                request.resource_id,
                _options(request),
                operator=is_operator(context),
                api=API_GRPC,
            )
            return lock_pb2.LockAcquired(lock_id=held.lock_id, fence=held.fence)

        return await answer(context, request, "Acquire", run)

    async def override(request: Any, context: Context) -> lock_pb2.LockAcquired:
        async def run() -> lock_pb2.LockAcquired:
            body: dict[str, Any] = {"priority": OVERRIDE_PRIORITY}
            if request.HasField("ttl"):
                body["ttl"] = _seconds(request.ttl)
            if request.owner:
                body["owner"] = request.owner
            if request.message:
                body["message"] = request.message
            held = await locks.lock(
                request.store_name,
                request.resource_id,
                Options.parse(body),
                operator=is_operator(context),
                api=API_GRPC,
            )
            return lock_pb2.LockAcquired(lock_id=held.lock_id, fence=held.fence)

        return await answer(context, request, "Override", run)

    async def renew(request: Any, context: Context) -> lock_pb2.LockAcquired:
        async def run() -> lock_pb2.LockAcquired:
            held = await locks.renew(request.store_name, request.resource_id, _lock_id(request))
            return lock_pb2.LockAcquired(lock_id=held.lock_id, fence=held.fence)

        return await answer(context, request, "Renew", run)

    async def unlock(request: Any, context: Context) -> lock_pb2.UnlockResponse:
        async def run() -> lock_pb2.UnlockResponse:
            await locks.unlock(request.store_name, request.resource_id, _lock_id(request))
            return lock_pb2.UnlockResponse()

        return await answer(context, request, "Unlock", run)

    async def force_unlock(request: Any, context: Context) -> lock_pb2.ForceUnlockResponse:
        async def run() -> lock_pb2.ForceUnlockResponse:
            if not is_operator(context):
                raise Forbidden("a force unlock needs the operator token")
            before = await locks.force_unlock(
                request.store_name,
                request.resource_id,
                request.message or "force unlock through prioritylock serve",
                by=request.by or "operator",
            )
            return lock_pb2.ForceUnlockResponse(forced=before is not None and before.held)

        return await answer(context, request, "ForceUnlock", run)

    async def info(request: Any, context: Context) -> lock_pb2.LockInfo:
        async def run() -> lock_pb2.LockInfo:
            return info_message(await locks.info(request.store_name, request.resource_id))

        return await answer(context, request, "Info", run)

    async def listing(request: Any, context: Context) -> lock_pb2.ListResponse:
        async def run() -> lock_pb2.ListResponse:
            limit = request.limit or MAX_LIST
            if not 1 <= limit <= MAX_LIST:
                raise BadRequest(f"limit: must be in 1..{MAX_LIST} (0: {MAX_LIST})")
            rows = await locks.list(request.store_name, request.prefix, limit)
            return lock_pb2.ListResponse(locks=[info_message(row) for row in rows])

        return await answer(context, request, "List", run)

    def unary(
        behaviour: Callable[[Any, Context], Awaitable[Any]], request_type: Any, response_type: Any
    ) -> grpc.RpcMethodHandler:
        return grpc.unary_unary_rpc_method_handler(
            behaviour,
            request_deserializer=parser(request_type),
            response_serializer=response_type.SerializeToString,
        )

    handlers = {
        "Lock": grpc.unary_stream_rpc_method_handler(
            lock,
            request_deserializer=parser(lock_pb2.LockRequest),
            response_serializer=lock_pb2.LockServerStream.SerializeToString,
        ),
        "Acquire": unary(acquire, lock_pb2.LockRequest, lock_pb2.LockAcquired),
        "Renew": unary(renew, lock_pb2.RenewRequest, lock_pb2.LockAcquired),
        "Unlock": unary(unlock, lock_pb2.UnlockRequest, lock_pb2.UnlockResponse),
        "ForceUnlock": unary(
            force_unlock, lock_pb2.ForceUnlockRequest, lock_pb2.ForceUnlockResponse
        ),
        "Info": unary(info, lock_pb2.InfoRequest, lock_pb2.LockInfo),
        "List": unary(listing, lock_pb2.ListRequest, lock_pb2.ListResponse),
        "Override": unary(override, lock_pb2.OverrideRequest, lock_pb2.LockAcquired),
    }
    return grpc.method_handlers_generic_handler(SERVICE, handlers)


async def _fail(context: Context, exc: Exception) -> NoReturn:
    for kind, code, reason in _STATUSES:
        if isinstance(exc, kind):
            await abort(context, code, reason, str(exc))
    raise exc


async def _store_failed(
    context: Context, exc: PriorityLockError, what: str, code: str, store: str
) -> NoReturn:
    message = store_failure(what, store, exc)
    log.error("prioritylock serve: %s", message)
    status = (
        grpc.StatusCode.UNAVAILABLE
        if isinstance(exc, StoreUnavailable)
        else grpc.StatusCode.INTERNAL
    )
    await abort(context, status, code, message, {"error": type(exc).__name__})


def _seconds(duration: duration_pb2.Duration) -> float:
    return int(duration.seconds) + int(duration.nanos) / 1e9


def _options(request: Any) -> Options:
    """The request's options, checked as the HTTP API checks its JSON body.

    :raises BadRequest: a field out of range.
    """
    body: dict[str, Any] = {
        "immediate": request.immediate,
        "priority": request.priority,
        "forceful": request.forceful,
    }
    for field, name in (
        ("ttl", "ttl"),
        ("cleanup_timeout", "cleanupTimeout"),
        ("waiting_timeout", "waitingTimeout"),
        ("timeout", "timeout"),
    ):
        if request.HasField(field):
            body[name] = _seconds(getattr(request, field))
    if request.owner:
        body["owner"] = request.owner
    if request.message:
        body["message"] = request.message
    return Options.parse(body)


def _lock_id(request: Any) -> str:
    if not request.lock_id:
        raise BadRequest("lock_id: expected the lock_id that Lock or Acquire answered")
    return str(request.lock_id)


def _event(event: dict[str, Any]) -> lock_pb2.LockServerStream:
    kind = event["type"]
    if kind == "ping":
        return lock_pb2.LockServerStream(ping=lock_pb2.LockPing())
    if kind == "lock-acquired":
        acquired = lock_pb2.LockAcquired(lock_id=event["lockID"], fence=event["fence"])
        return lock_pb2.LockServerStream(lock_acquired=acquired)
    if kind == "cleanup-requested":
        asked = lock_pb2.CleanupRequested(requestor=_requestor(event["requestor"]))
        asked.deadline.FromJsonString(event["deadline"])
        asked.time_left.FromNanoseconds(round(event["secondsLeft"] * 1e9))
        return lock_pb2.LockServerStream(cleanup_requested=asked)
    if kind == "request-withdrawn":
        withdrawn = lock_pb2.RequestWithdrawn(requestor=_requestor(event["requestor"]))
        return lock_pb2.LockServerStream(request_withdrawn=withdrawn)
    if kind == "lost":
        return lock_pb2.LockServerStream(lost=lock_pb2.LockLost(reason=event["reason"]))
    raise AssertionError(f"no message for the event {kind!r}")


def _requestor(fields: dict[str, Any]) -> lock_pb2.Requestor:
    return lock_pb2.Requestor(
        owner=fields.get("owner") or "",
        priority=fields.get("priority") or 0,
        message=fields.get("message") or "",
        forceful=bool(fields.get("forceful")),
    )


def _stamp(seconds: float | None) -> timestamp_pb2.Timestamp | None:
    if seconds is None:
        return None
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(round(seconds * 1e9))
    return stamp


def _span(seconds: float | None) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    span = duration_pb2.Duration()
    span.FromNanoseconds(round(seconds * 1e9))
    return span


def info_message(row: dict[str, Any]) -> lock_pb2.LockInfo:
    """A lease's record (:meth:`Alpha2Locks.info`, a row of :meth:`Alpha2Locks.list`)."""
    message = lock_pb2.LockInfo(
        resource_id=row["resourceId"],
        key=row.get("key") or "",
        path=row.get("path") or "",
        state=row.get("state") or "",
        held=bool(row.get("held")),
        fence=row.get("fence") or 0,
        owner=row.get("owner") or "",
        message=row.get("message") or "",
        priority=row.get("priority") or 0,
        forceful=bool(row.get("forceful")),
        lease_timeout=_span(row.get("lease_timeout")),
        cleanup_timeout=_span(row.get("cleanup_timeout")),
        acquired_at=_stamp(row.get("acquired_at")),
        renewed_at=_stamp(row.get("renewed_at")),
        expires_at=_stamp(row.get("expires_at")),
        last_event=row.get("last_event") or "",
        last_event_by=row.get("last_event_by") or "",
        last_event_message=row.get("last_event_message") or "",
        last_event_at=_stamp(row.get("last_event_at")),
        problem=row.get("problem") or "",
    )
    if row.get("requestor_owner") is not None:
        message.requestor.CopyFrom(
            lock_pb2.Requestor(
                owner=row["requestor_owner"],
                priority=row.get("requestor_priority") or 0,
                message=row.get("requestor_message") or "",
                forceful=bool(row.get("requestor_forceful")),
            )
        )
    message.record.update(row)
    return message
