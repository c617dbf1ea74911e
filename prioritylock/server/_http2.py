"""The HTTP routes of the full lock API, ``/v1.0-alpha2/lock/...`` (see :mod:`._alpha2`).

Errors are answered as Dapr answers them: a status and ``{"errorCode", "message"}``. The routes
need the API token when one is configured (the middleware of :mod:`._http`); force unlocks and
the emergency override also need the operator token, in the ``prioritylock-operator-token``
header.

A stream is ``application/x-ndjson``: one JSON object per line. A blocking stream answers 200 at
once and pings while it waits, so that the client knows the service is alive and a dead client is
noticed; the outcome of the wait is then an event (``lock-acquired`` or ``error``). The stream's
end, however it ends (the client closes it, the connection drops, the lock is lost, the service
stops), releases the lock or hands it over.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
from aiohttp import web

from prioritylock._errors import PriorityLockError
from prioritylock.server._alpha2 import (
    MAX_LIST,
    Alpha2Locks,
    Forbidden,
    Held,
    Holding,
    LockNotFound,
    Options,
    Pinger,
    ResourceLocked,
    end_quietly,
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
from prioritylock.server._health import store_failure
from prioritylock.server._http import error, failed, json_body
from prioritylock.server._names import BadRequest, StoreNotFound

__all__ = ["NDJSON", "OPERATOR_HEADER", "UnlockRequest", "add_alpha2_routes", "ndjson"]

log = logging.getLogger("prioritylock.server")

OPERATOR_HEADER = "prioritylock-operator-token"
NDJSON = "application/x-ndjson"

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_alpha2_routes(
    app: web.Application,
    locks: Alpha2Locks,
    *,
    operator_token: str | None,
    ping_interval: float,
    max_body: int,
) -> None:
    """Route ``/v1.0-alpha2/lock/...`` of ``app`` to ``locks``."""
    routes = _Routes(locks, operator_token, Pinger(ping_interval), max_body)
    base = "/v1.0-alpha2/lock/{store}"
    app.router.add_get(base, _answers(routes.listing, "failed to list locks", "ERR_LOCK_LIST"))
    app.router.add_post(
        base + "/{resource}", _answers(routes.lock, "failed to acquire lock", "ERR_LOCK")
    )
    app.router.add_delete(
        base + "/{resource}", _answers(routes.unlock, "failed to release lock", "ERR_UNLOCK")
    )
    app.router.add_get(
        base + "/{resource}", _answers(routes.info, "failed to read lock", "ERR_LOCK_INFO")
    )
    app.router.add_post(
        base + "/{resource}/renew", _answers(routes.renew, "failed to renew lock", "ERR_RENEW")
    )


def _answers(handler: _Handler, what: str, code: str) -> _Handler:
    """``handler`` with the error mapping shared by every route."""

    async def run(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request)
        except (BadRequest, StoreNotFound, Forbidden, LockNotFound, ResourceLocked) as exc:
            return _refusal(exc)
        except PriorityLockError as exc:
            return failed(code, what, request.match_info["store"], exc)

    return run


def _refusal(
    exc: BadRequest | StoreNotFound | Forbidden | LockNotFound | ResourceLocked,
) -> web.Response:
    """The answer to a request refused (not a store failure): its status and errorCode."""
    if isinstance(exc, BadRequest):
        return error(400, "ERR_MALFORMED_REQUEST", str(exc))
    if isinstance(exc, StoreNotFound):
        return error(400, "ERR_LOCK_STORE_NOT_FOUND", str(exc))
    if isinstance(exc, Forbidden):
        return error(403, "ERR_FORBIDDEN", str(exc))
    if isinstance(exc, LockNotFound):
        return error(404, "ERR_LOCK_NOT_FOUND", str(exc))
    return error(409, "ERR_RESOURCE_LOCKED", str(exc))


@attrs.frozen
class UnlockRequest:
    """What a ``DELETE .../{resourceId}`` body asks: a release by lockID, or (``force``) the
    operators' force unlock with its message and author."""

    lock_id: str | None
    force: bool = False
    message: str = ""
    by: str = ""

    @classmethod
    def parse(cls, body: dict[str, Any], *, operator: bool) -> UnlockRequest:
        """:raises BadRequest: a field of the wrong type, or both or neither of lockID and force.
        :raises Forbidden: ``force`` without the operator token."""
        force = body.get("force", False)
        if not isinstance(force, bool):
            raise BadRequest(f"force: expected true or false, got {force!r}")
        if force:
            if "lockID" in body:
                raise BadRequest("give either lockID or force, not both")
            if not operator:
                raise Forbidden("a force unlock needs the operator token")
            message = body.get("message") or "force unlock through prioritylock serve"
            by = body.get("by") or "operator"
            if not isinstance(message, str) or not isinstance(by, str):
                raise BadRequest("message and by must be strings")
            return cls(None, force=True, message=message, by=by)
        return cls(_lock_id(body))


def _lock_id(body: dict[str, Any]) -> str:
    lock_id = body.get("lockID")
    if not isinstance(lock_id, str) or not lock_id:
        raise BadRequest("lockID: expected the lockID that lock answered")
    return lock_id


def _same_ttl(body: dict[str, Any], held: Held) -> None:
    """:raises BadRequest: a renew that asks for another ttl than the lock was taken with."""
    if "ttl" in body:
        ttl = Options.parse({"ttl": body["ttl"]}).ttl
        if ttl != held.lock.config.lease_timeout:
            raise BadRequest(
                f"ttl: a held lock keeps the ttl it was taken with "
                f"({held.lock.config.lease_timeout:g} s); the service renews it"
            )


def _list_limit(text: str) -> int:
    try:
        limit = int(text)
    except ValueError:
        raise BadRequest("limit: expected a whole number") from None
    if not 1 <= limit <= MAX_LIST:
        raise BadRequest(f"limit: must be in 1..{MAX_LIST}")
    return limit


class _Routes:
    """The handlers: each reads its request, asks ``locks``, and answers."""

    def __init__(
        self, locks: Alpha2Locks, operator_token: str | None, pinger: Pinger, max_body: int
    ) -> None:
        self._locks = locks
        self._operator_token = operator_token
        self._pinger = pinger
        self._max_body = max_body

    def _is_operator(self, request: web.Request) -> bool:
        given = request.headers.get(OPERATOR_HEADER)
        if self._operator_token is None or given is None:
            return False
        return hmac.compare_digest(given.encode(), self._operator_token.encode())

    async def lock(self, request: web.Request) -> web.StreamResponse:
        store, resource = request.match_info["store"], request.match_info["resource"]
        body = await json_body(request, self._max_body, empty=True)
        if isinstance(body, web.Response):
            return body
        options = Options.parse(body)
        operator = self._is_operator(request)
        if _wants_stream(request):
            return await _stream(
                request, self._locks, options, operator=operator, pinger=self._pinger
            )
        held = await self._locks.lock(store, resource, options, operator=operator)
        response = web.json_response({"lockID": held.lock_id, "fence": held.fence})
        try:
            await response.prepare(request)
            await response.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            # The client went between the acquire and its answer: nobody knows this lockID,
            # and the service would renew it forever. Let it go.
            await end_quietly(self._locks, held)
            raise
        return response

    async def unlock(self, request: web.Request) -> web.StreamResponse:
        store, resource = request.match_info["store"], request.match_info["resource"]
        body = await json_body(request, self._max_body, empty=True)
        if isinstance(body, web.Response):
            return body
        asked = UnlockRequest.parse(body, operator=self._is_operator(request))
        if asked.lock_id is None:
            before = await self._locks.force_unlock(store, resource, asked.message, by=asked.by)
            return web.json_response({"forced": before is not None and before.held})
        await self._locks.unlock(store, resource, asked.lock_id)
        return web.Response(status=204)

    async def renew(self, request: web.Request) -> web.StreamResponse:
        store, resource = request.match_info["store"], request.match_info["resource"]
        body = await json_body(request, self._max_body, empty=True)
        if isinstance(body, web.Response):
            return body
        held = await self._locks.renew(store, resource, _lock_id(body))
        _same_ttl(body, held)
        return web.json_response({"lockID": held.lock_id, "fence": held.fence})

    async def info(self, request: web.Request) -> web.StreamResponse:
        store, resource = request.match_info["store"], request.match_info["resource"]
        return web.json_response(await self._locks.info(store, resource))

    async def listing(self, request: web.Request) -> web.StreamResponse:
        store = request.match_info["store"]
        prefix = request.query.get("prefix", "")
        limit = _list_limit(request.query.get("limit", str(MAX_LIST)))
        return web.json_response({"locks": await self._locks.list(store, prefix, limit)})


def _wants_stream(request: web.Request) -> bool:
    if request.query.get("stream", "").lower() in ("1", "true"):
        return True
    accepts = request.headers.getall("Accept", [])
    return any(kind.split(";")[0].strip() == NDJSON for text in accepts for kind in text.split(","))


async def _stream(
    request: web.Request,
    locks: Alpha2Locks,
    options: Options,
    *,
    operator: bool,
    pinger: Pinger,
) -> web.StreamResponse:
    """Hold the lock for as long as the stream lasts, telling the client what happens."""
    store, resource = request.match_info["store"], request.match_info["resource"]
    holding = Holding(locks, store, resource, options, operator=operator, pinger=pinger)
    try:
        await holding.started()  # an immediate request's refusal is a plain 409, before any stream
        response = web.StreamResponse(
            status=200, headers={"Content-Type": NDJSON, "Cache-Control": "no-store"}
        )
        await response.prepare(request)

        async def send(line: dict[str, Any]) -> None:
            await response.write(json.dumps(line, separators=(",", ":")).encode() + b"\n")

        try:
            async for event in holding.events():
                await send(ndjson(event))
        except (BadRequest, Forbidden, ResourceLocked) as exc:
            await send({"type": "error", "error": _code(exc), "message": str(exc)})
            return response
        except PriorityLockError as exc:
            message = store_failure("failed to acquire lock", store, exc)
            log.error("prioritylock serve: %s", message)
            await send({"type": "error", "error": "ERR_LOCK", "message": message})
            return response
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
        return response
    except ConnectionError:
        return web.Response(status=499)  # the client went away; nothing to answer
    finally:
        await holding.close()


def _code(exc: Exception) -> str:
    if isinstance(exc, BadRequest):
        return "ERR_MALFORMED_REQUEST"
    if isinstance(exc, Forbidden):
        return "ERR_FORBIDDEN"
    return "ERR_RESOURCE_LOCKED"


def ndjson(event: Event) -> dict[str, Any]:  # noqa: RET503 (unrendered: NoReturn)
    """``event`` as its NDJSON line's object (``type`` says which)."""
    match event:
        case Ping():
            return {"type": "ping"}
        case LockAcquired(lock_id, fence):
            return {"type": "lock-acquired", "lockID": lock_id, "fence": fence}
        case CleanupRequested(deadline, seconds_left, requestor):
            return {
                "type": "cleanup-requested",
                "deadline": _iso(deadline),
                "secondsLeft": seconds_left,
                "requestor": _requestor(requestor),
            }
        case RequestWithdrawn(requestor):
            return {"type": "request-withdrawn", "requestor": _requestor(requestor)}
        case Lost(reason):
            return {"type": "lost", "reason": reason}
        case _:
            unrendered(event)


def _requestor(requestor: Requestor) -> dict[str, Any]:
    return {
        "owner": requestor.owner,
        "priority": requestor.priority,
        "message": requestor.message,
        "forceful": requestor.forceful,
    }


def _iso(wall: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall)) + f".{int(wall % 1 * 1000):03d}Z"
