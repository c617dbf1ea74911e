"""``prioritylock.v1.LockService`` (proto/prioritylock/v1/lock.proto): the full lock API over
gRPC, on :class:`~prioritylock.server._alpha2.Alpha2Locks` as the HTTP routes are.

:class:`LockService` is the generated servicer's implementation, registered by the generated
``add_LockServiceServicer_to_server``; :class:`~._grpc_base.QuietParsing` (an interceptor) hands
its methods bytes that don't parse as :class:`~._grpc_base.Malformed`, so that they answer one
quiet INVALID_ARGUMENT. Requests become :class:`~._alpha2.Options` and lock records become
``LockInfo`` messages through ``google.protobuf.json_format`` (the proto's JSON names are the HTTP
API's).

A ``Lock`` call is a :class:`~prioritylock.server._alpha2.Holding`: its events (:mod:`._events`)
become ``LockServerStream`` messages (:func:`message`), and the end of the call (the client
cancels, the connection drops, the deadline passes) releases the lock or hands it over. Errors
are statuses with an ``ErrorInfo`` whose reason is the HTTP API's error code; a store failure's
also carries the error's class (metadata ``error``), and its message says the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
from google.protobuf import duration_pb2, json_format, timestamp_pb2

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
from prioritylock.server._events import (
    CleanupRequested,
    Event,
    LockAcquired,
    Lost,
    Ping,
    Requestor,
    RequestWithdrawn,
    unrendered,
)
from prioritylock.server._grpc_base import (
    OPERATOR_METADATA,
    Context,
    abort,
    check_token,
    has_token,
    reject_malformed,
)
from prioritylock.server._health import store_failure
from prioritylock.server._metrics import API_GRPC
from prioritylock.server._names import BadRequest, StoreNotFound
from prioritylock.server._proto import lock_pb2, lock_pb2_grpc

__all__ = ["SERVICE", "LockService", "add_lock_service", "info_message", "message"]

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


def add_lock_service(
    server: grpc.aio.Server,
    locks: Alpha2Locks,
    *,
    api_token: str | None,
    operator_token: str | None,
    ping_interval: float,
) -> None:
    """Serve ``prioritylock.v1.LockService`` over ``locks`` on ``server`` (which must have been
    made with :class:`~._grpc_base.QuietParsing` for :data:`SERVICE`)."""
    servicer = LockService(
        locks, api_token=api_token, operator_token=operator_token, ping_interval=ping_interval
    )
    lock_pb2_grpc.add_LockServiceServicer_to_server(servicer, server)  # type: ignore[no-untyped-call]


class LockService(lock_pb2_grpc.LockServiceServicer):
    """The methods of ``prioritylock.v1.LockService``: each checks the request and the tokens,
    asks ``locks``, and maps our errors to statuses."""

    def __init__(
        self,
        locks: Alpha2Locks,
        *,
        api_token: str | None,
        operator_token: str | None,
        ping_interval: float,
    ) -> None:
        self._locks = locks
        self._api_token = api_token
        self._operator_token = operator_token
        self._pinger = Pinger(ping_interval)

    def _is_operator(self, context: Context) -> bool:
        return has_token(context, OPERATOR_METADATA, self._operator_token)

    async def _answer(
        self, context: Context, request: Any, method: str, call: Callable[[], Awaitable[_T]]
    ) -> _T:
        """Check the request, run ``call``, and map its errors to statuses."""
        await reject_malformed(context, request, method)
        await check_token(context, self._api_token)
        try:
            return await call()
        except (BadRequest, StoreNotFound, Forbidden, LockNotFound, ResourceLocked) as exc:
            await _fail(context, exc)
        except PriorityLockError as exc:
            what, code = _FAILURES[method]
            await _store_failed(context, exc, what, code, request.store_name)

    async def Lock(self, request: Any, context: Context) -> None:  # noqa: N802 (the proto's name)
        await reject_malformed(context, request, "Lock")
        await check_token(context, self._api_token)
        store = request.store_name
        try:
            holding = Holding(
                self._locks,
                store,
                request.resource_id,
                _options(request),
                operator=self._is_operator(context),
                pinger=self._pinger,
                api=API_GRPC,
            )
        except BadRequest as exc:
            await _fail(context, exc)
        try:
            await holding.started()
            async for event in holding.events():
                await context.write(message(event))
        except (BadRequest, StoreNotFound, Forbidden, ResourceLocked) as exc:
            await _fail(context, exc)
        except PriorityLockError as exc:
            await _store_failed(context, exc, *_FAILURES["Lock"], store)
        finally:
            await holding.close()

    async def _lock(
        self, request: Any, context: Context, options: Options
    ) -> lock_pb2.LockAcquired:
        held = await self._locks.lock(
            request.store_name,
            request.resource_id,
            options,
            operator=self._is_operator(context),
            api=API_GRPC,
        )
        return lock_pb2.LockAcquired(lock_id=held.lock_id, fence=held.fence)

    async def Acquire(self, request: Any, context: Context) -> lock_pb2.LockAcquired:  # noqa: N802
        return await self._answer(
            context, request, "Acquire", lambda: self._lock(request, context, _options(request))
        )

    async def Override(self, request: Any, context: Context) -> lock_pb2.LockAcquired:  # noqa: N802
        def options() -> Options:
            return Options.parse({**_fields(request), "priority": OVERRIDE_PRIORITY})

        return await self._answer(
            context, request, "Override", lambda: self._lock(request, context, options())
        )

    async def Renew(self, request: Any, context: Context) -> lock_pb2.LockAcquired:  # noqa: N802
        async def run() -> lock_pb2.LockAcquired:
            held = await self._locks.renew(
                request.store_name, request.resource_id, _lock_id(request)
            )
            return lock_pb2.LockAcquired(lock_id=held.lock_id, fence=held.fence)

        return await self._answer(context, request, "Renew", run)

    async def Unlock(self, request: Any, context: Context) -> lock_pb2.UnlockResponse:  # noqa: N802
        async def run() -> lock_pb2.UnlockResponse:
            await self._locks.unlock(request.store_name, request.resource_id, _lock_id(request))
            return lock_pb2.UnlockResponse()

        return await self._answer(context, request, "Unlock", run)

    async def ForceUnlock(  # noqa: N802
        self, request: Any, context: Context
    ) -> lock_pb2.ForceUnlockResponse:
        async def run() -> lock_pb2.ForceUnlockResponse:
            if not self._is_operator(context):
                raise Forbidden("a force unlock needs the operator token")
            before = await self._locks.force_unlock(
                request.store_name,
                request.resource_id,
                request.message or "force unlock through prioritylock serve",
                by=request.by or "operator",
            )
            return lock_pb2.ForceUnlockResponse(forced=before is not None and before.held)

        return await self._answer(context, request, "ForceUnlock", run)

    async def Info(self, request: Any, context: Context) -> lock_pb2.LockInfo:  # noqa: N802
        async def run() -> lock_pb2.LockInfo:
            return info_message(await self._locks.info(request.store_name, request.resource_id))

        return await self._answer(context, request, "Info", run)

    async def List(self, request: Any, context: Context) -> lock_pb2.ListResponse:  # noqa: N802
        async def run() -> lock_pb2.ListResponse:
            limit = request.limit or MAX_LIST
            if not 1 <= limit <= MAX_LIST:
                raise BadRequest(f"limit: must be in 1..{MAX_LIST} (0: {MAX_LIST})")
            rows = await self._locks.list(request.store_name, request.prefix, limit)
            return lock_pb2.ListResponse(locks=[info_message(row) for row in rows])

        return await self._answer(context, request, "List", run)


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


def _fields(request: Any) -> dict[str, Any]:
    """A request's fields by their JSON names (the HTTP API's: ``cleanupTimeout``), durations
    as ``"1.500s"``; fields left at their default are absent, as in an HTTP body."""
    fields: dict[str, Any] = json_format.MessageToDict(request)
    return fields


def _options(request: Any) -> Options:
    """The request's options, checked as the HTTP API checks its JSON body.

    :raises BadRequest: a field out of range.
    """
    return Options.parse(_fields(request))


def _lock_id(request: Any) -> str:
    if not request.lock_id:
        raise BadRequest("lock_id: expected the lock_id that Lock or Acquire answered")
    return str(request.lock_id)


def message(event: Event) -> lock_pb2.LockServerStream:  # noqa: RET503 (NoReturn)
    """``event`` as the ``Lock`` stream's message."""
    match event:
        case Ping():
            return lock_pb2.LockServerStream(ping=lock_pb2.LockPing())
        case LockAcquired(lock_id, fence):
            acquired = lock_pb2.LockAcquired(lock_id=lock_id, fence=fence)
            return lock_pb2.LockServerStream(lock_acquired=acquired)
        case CleanupRequested(deadline, seconds_left, requestor):
            asked = lock_pb2.CleanupRequested(
                requestor=_requestor(requestor),
                deadline=_stamp(int(deadline * 1000) / 1000),  # ms, as over HTTP
                time_left=_span(seconds_left),
            )
            return lock_pb2.LockServerStream(cleanup_requested=asked)
        case RequestWithdrawn(requestor):
            withdrawn = lock_pb2.RequestWithdrawn(requestor=_requestor(requestor))
            return lock_pb2.LockServerStream(request_withdrawn=withdrawn)
        case Lost(reason):
            return lock_pb2.LockServerStream(lost=lock_pb2.LockLost(reason=reason))
        case _:
            unrendered(event)


def _requestor(requestor: Requestor) -> lock_pb2.Requestor:
    return lock_pb2.Requestor(
        owner=requestor.owner or "",
        priority=requestor.priority or 0,
        message=requestor.message or "",
        forceful=requestor.forceful,
    )


def _stamp(seconds: float) -> timestamp_pb2.Timestamp:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(round(seconds * 1e9))
    return stamp


def _span(seconds: float) -> duration_pb2.Duration:
    span = duration_pb2.Duration()
    span.FromNanoseconds(round(seconds * 1e9))
    return span


#: The fields of a lock record that are times (Unix times: Timestamps) and spans (Durations).
_STAMPS = ("acquired_at", "renewed_at", "expires_at", "last_event_at")
_SPANS = ("lease_timeout", "cleanup_timeout")


def info_message(row: dict[str, Any]) -> lock_pb2.LockInfo:
    """A lease's record (:meth:`Alpha2Locks.info`, a row of :meth:`Alpha2Locks.list`): its
    fields by name (unset where the record has None), ``requestor`` from its ``requestor_*``
    fields, and the whole record in ``record``."""
    fields = {
        **row,
        **{name: _stamp(row[name]).ToJsonString() for name in _STAMPS if row.get(name) is not None},
        **{name: _span(row[name]).ToJsonString() for name in _SPANS if row.get(name) is not None},
        "record": row,
    }
    if row.get("requestor_owner") is not None:
        fields["requestor"] = {
            "owner": row["requestor_owner"],
            "priority": row.get("requestor_priority"),
            "message": row.get("requestor_message"),
            "forceful": row.get("requestor_forceful"),
        }
    fields["waiters"] = [
        {**w, "since": _stamp(w["since"]).ToJsonString()} for w in row.get("waiters", ())
    ]
    info: lock_pb2.LockInfo = json_format.ParseDict(
        fields, lock_pb2.LockInfo(), ignore_unknown_fields=True
    )
    return info
