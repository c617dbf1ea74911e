"""The HTTP front end (aiohttp): Dapr's alpha1 lock routes and its health checks.

Errors are answered as Dapr answers them: a status and ``{"errorCode", "message"}``; an unknown
route too (404 ERR_NOT_FOUND, 405 ERR_METHOD_NOT_ALLOWED). A store
failure is a 500 with ERR_TRY_LOCK / ERR_UNLOCK whose message names the error's class and the
store's own message, which says the fix (:func:`~._health.store_failure`); no credential reaches a
client or the log.

``GET /metrics`` answers Prometheus text; with an API token it also accepts the token as
``Authorization: Bearer``, the way Prometheus sends it.
"""

from __future__ import annotations

import hmac
import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from prioritylock._errors import PriorityLockError
from prioritylock.server._alpha1 import MAX_EXPIRY, Alpha1Locks, BadRequest, StoreNotFound
from prioritylock.server._health import store_failure
from prioritylock.server._metrics import CONTENT_TYPE, Metrics

__all__ = ["TOKEN_HEADER", "error", "failed", "json_body", "make_app"]

log = logging.getLogger("prioritylock.server")

TOKEN_HEADER = "dapr-api-token"  # noqa: S105 (a header name, not a secret)

_DIGITS = re.compile(r"-?[0-9]+")

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error(status: int, code: str, message: str) -> web.Response:
    return web.json_response({"errorCode": code, "message": message}, status=status)


def make_app(
    locks: Alpha1Locks,
    *,
    ready: Callable[[], bool],
    api_token: str | None,
    max_body: int,
    metrics: Metrics | None = None,
    outbound: Callable[[], bool] | None = None,
) -> web.Application:
    """The aiohttp application serving ``locks``, and ``metrics`` (by default the locks').

    ``GET /v1.0/healthz`` answers 204 once ``ready()``; ``GET /v1.0/healthz/outbound`` once
    ``outbound()`` too (by default ``ready()``): the stores answer.
    """

    @web.middleware
    async def guard(request: web.Request, handler: _Handler) -> web.StreamResponse:
        if api_token is not None and not request.path.startswith("/v1.0/healthz"):
            given = request.headers.get(TOKEN_HEADER, "")
            if not given and request.path == "/metrics":
                given = _bearer(request)
            if not hmac.compare_digest(given.encode(), api_token.encode()):
                return error(401, "ERR_UNAUTHORIZED", "missing or invalid dapr-api-token")
        length = request.content_length
        if length is not None and length > max_body:
            return error(413, "ERR_REQUEST_TOO_LARGE", _too_large(max_body))
        try:
            return await handler(request)
        except web.HTTPNotFound:
            return error(404, "ERR_NOT_FOUND", f"no route {request.method} {request.path!r}")
        except web.HTTPMethodNotAllowed as exc:
            allowed = ", ".join(sorted(exc.allowed_methods))
            answer = error(
                405,
                "ERR_METHOD_NOT_ALLOWED",
                f"{request.method} is not allowed on {request.path!r} (allowed: {allowed})",
            )
            answer.headers["Allow"] = allowed
            return answer

    async def healthz(request: web.Request) -> web.Response:
        if not ready():
            return error(500, "ERR_HEALTH_NOT_READY", "stores are not open yet")
        return web.Response(status=204)

    async def outbound_healthz(request: web.Request) -> web.Response:
        if outbound is not None and ready() and not outbound():
            return error(
                500,
                "ERR_OUTBOUND_HEALTH_NOT_READY",
                "a lock store has not answered yet (the service's log says why)",
            )
        return await healthz(request)

    async def try_lock(request: web.Request) -> web.Response:
        store = request.match_info["store"]
        body = await json_body(request, max_body)
        if isinstance(body, web.Response):
            return body
        try:
            expiry = _int(body.get("expiryInSeconds", 0), store)
            got = await locks.try_lock(
                store, _text(body, "resourceId"), _text(body, "lockOwner"), expiry
            )
        except BadRequest as exc:
            return error(400, "ERR_MALFORMED_REQUEST", str(exc))
        except StoreNotFound as exc:
            return error(400, "ERR_LOCK_STORE_NOT_FOUND", str(exc))
        except PriorityLockError as exc:
            return failed("ERR_TRY_LOCK", "failed to try acquiring lock", store, exc)
        return web.json_response({"success": got})

    async def unlock(request: web.Request) -> web.Response:
        store = request.match_info["store"]
        body = await json_body(request, max_body)
        if isinstance(body, web.Response):
            return body
        try:
            status = await locks.unlock(store, _text(body, "resourceId"), _text(body, "lockOwner"))
        except BadRequest as exc:
            return error(400, "ERR_MALFORMED_REQUEST", str(exc))
        except StoreNotFound as exc:
            return error(400, "ERR_LOCK_STORE_NOT_FOUND", str(exc))
        except PriorityLockError as exc:
            return failed("ERR_UNLOCK", "failed to release lock", store, exc)
        return web.json_response({"status": status})

    async def scrape(request: web.Request) -> web.Response:
        text = (metrics or locks.metrics).render()
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application(middlewares=[guard], client_max_size=max_body)
    app.router.add_get("/v1.0/healthz", healthz)
    app.router.add_get("/v1.0/healthz/outbound", outbound_healthz)
    app.router.add_post("/v1.0-alpha1/lock/{store}", try_lock)
    app.router.add_post("/v1.0-alpha1/unlock/{store}", unlock)
    app.router.add_get("/metrics", scrape)
    return app


def _too_large(max_body: int) -> str:
    # No option raises it: a valid request, even with the longest message, is far smaller.
    return f"request body over {max_body} bytes (the service's fixed limit)"


def _bearer(request: web.Request) -> str:
    """The token of an ``Authorization: Bearer TOKEN`` header, or ""."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def failed(code: str, what: str, store: str, exc: PriorityLockError) -> web.Response:
    message = store_failure(what, store, exc)
    log.error("prioritylock serve: %s", message)
    return error(500, code, message)


async def json_body(
    request: web.Request, max_body: int, *, empty: bool = False
) -> dict[str, Any] | web.Response:
    """The JSON object of the request (``empty``: {} for an empty body), or the error response
    to send instead."""
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return error(413, "ERR_REQUEST_TOO_LARGE", _too_large(max_body))
    if empty and not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return error(400, "ERR_MALFORMED_REQUEST", "failed deserializing HTTP body: not JSON")
    if not isinstance(body, dict):
        return error(400, "ERR_MALFORMED_REQUEST", "failed deserializing HTTP body: not an object")
    return body


def _text(body: dict[str, Any], name: str) -> str:
    value = body.get(name, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f"failed deserializing HTTP body: {name} is not a string")
    return value


def _int(value: object, store: str) -> int:
    """expiryInSeconds as Dapr's sidecar reads it (protobuf's JSON mapping of an int32): a
    whole number, or its decimal digits in a string (``"30"``; not ``" 30"`` nor ``"3_0"``)."""
    if isinstance(value, str):
        if not _DIGITS.fullmatch(value):
            raise BadRequest("failed deserializing HTTP body: expiryInSeconds")
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) > MAX_EXPIRY:
        raise BadRequest("failed deserializing HTTP body: expiryInSeconds is not an int32")
    return value
