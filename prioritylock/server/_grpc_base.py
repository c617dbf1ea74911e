"""What both gRPC services share: request parsing that turns malformed bytes into one quiet
INVALID_ARGUMENT (never grpc's UNKNOWN with a traceback), the token checks, and errors with
``google.rpc`` details (an ``ErrorInfo`` whose reason is the HTTP API's error code).

A service registered by hand uses :func:`parser` as its deserializer; one registered through its
generated ``add_*Servicer_to_server`` gets the same from :class:`QuietParsing`, an interceptor.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn, TypeAlias

import attrs
import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

__all__ = [
    "DOMAIN",
    "OPERATOR_METADATA",
    "TOKEN_METADATA",
    "Context",
    "Malformed",
    "QuietParsing",
    "abort",
    "check_token",
    "has_token",
    "parser",
]

log = logging.getLogger("prioritylock.server")

#: The ``domain`` of every ``ErrorInfo`` this service sends.
DOMAIN = "prioritylock.dev"
TOKEN_METADATA = "dapr-api-token"  # noqa: S105 (a metadata key, not a secret)
OPERATOR_METADATA = "prioritylock-operator-token"

#: A call's context on the server (grpc has no type hints here: Any).
Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"


@attrs.frozen
class Malformed:
    """What the parser makes of bytes that are not the expected message."""

    message_type: str
    size: int


def parser(message_type: Any) -> Callable[[bytes], Any]:
    """A request deserializer that answers :class:`Malformed` instead of raising (grpc would
    log the exception with its traceback and answer UNKNOWN)."""

    return _quiet(message_type.FromString, message_type.DESCRIPTOR.full_name)


def _quiet(deserialize: Callable[[bytes], Any], name: str) -> Callable[[bytes], Any]:
    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception:  # DecodeError, and whatever else the runtime makes of garbage
            return Malformed(name, len(data))

    return parse


class QuietParsing(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Gives the methods of the ``services`` (service descriptors) what :func:`parser` gives:
    a request that doesn't parse arrives as :class:`Malformed` (pass it to
    :func:`reject_malformed`). Other services' handlers are left as they are."""

    def __init__(self, services: Any) -> None:
        self._inputs = {
            f"/{service.full_name}/{method.name}": method.input_type.full_name
            for service in services
            for method in service.methods
        }
        self._handlers: dict[str, Any] = {}  # method -> (its handler, that handler made quiet)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        name = self._inputs.get(details.method)
        if handler is None or name is None or handler.request_deserializer is None:
            return handler
        known = self._handlers.get(details.method)
        if known is None or known[0] is not handler:
            parse = _quiet(handler.request_deserializer, name)
            quiet = handler._replace(request_deserializer=parse)
            self._handlers[details.method] = known = (handler, quiet)
        return known[1]


async def abort(
    context: Context,
    code: grpc.StatusCode,
    reason: str,
    message: str,
    metadata: Mapping[str, str] | None = None,
) -> NoReturn:
    """End the call with ``code``, ``message`` and an ``ErrorInfo`` detail (``reason``)."""
    info = error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata or {})
    detail = any_pb2.Any()
    detail.Pack(info)
    status = rpc_status.to_status(
        status_pb2.Status(code=code.value[0], message=message, details=[detail])
    )
    await context.abort(status.code, status.details, status.trailing_metadata)
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


async def reject_malformed(context: Context, request: object, method: str) -> None:
    """INVALID_ARGUMENT, and one line at INFO, for a request that did not parse."""
    if isinstance(request, Malformed):
        log.info(
            "prioritylock serve: gRPC %s: %d bytes that are not a %s, from %s",
            method,
            request.size,
            request.message_type,
            context.peer(),
        )
        await abort(
            context,
            grpc.StatusCode.INVALID_ARGUMENT,
            "ERR_MALFORMED_REQUEST",
            f"failed deserializing the request: not a {request.message_type}",
        )


def has_token(context: Context, key: str, token: str | None) -> bool:
    """Whether the call's metadata ``key`` is ``token`` (False when no token is configured)."""
    if token is None:
        return False
    given = dict(context.invocation_metadata() or ()).get(key, "")
    return isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())


async def check_token(context: Context, api_token: str | None) -> None:
    """UNAUTHENTICATED unless the call carries the API token (when one is configured)."""
    if api_token is not None and not has_token(context, TOKEN_METADATA, api_token):
        await abort(
            context,
            grpc.StatusCode.UNAUTHENTICATED,
            "ERR_UNAUTHORIZED",
            f"missing or invalid {TOKEN_METADATA}",
        )
