"""What both gRPC services share: request parsing that turns malformed bytes into one quiet
INVALID_ARGUMENT (never grpc's UNKNOWN with a traceback), the token checks, and errors with
``google.rpc`` details (an ``ErrorInfo`` whose reason is the HTTP API's error code).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable, Mapping
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

    def parse(data: bytes) -> Any:
        try:
            return message_type.FromString(data)
        except Exception:  # DecodeError, and whatever else the runtime makes of garbage
            return Malformed(message_type.DESCRIPTOR.full_name, len(data))

    return parse


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
