"""DEBUG logging of store requests: one line per request, with its outcome, never a secret.

Lines go to the ``prioritylock.stores`` logger: the store (its ``repr``: directory, bucket or
container, and prefix), the operation, the key and what came of it (a version, "absent", "not
modified", "condition failed", or the error's type). Server messages, endpoints' queries and
credentials never appear; with DEBUG off, a request pays one ``isEnabledFor`` check.
"""

from __future__ import annotations

import functools
import logging
import socket
from collections.abc import Callable
from typing import Any, TypeVar

from prioritylock._errors import ConditionFailed, PriorityLockError
from prioritylock.stores._base import NOT_MODIFIED, Versioned

__all__ = ["describe_error", "describe_result", "log", "logged", "unlogged", "why_not_sent"]

log = logging.getLogger("prioritylock.stores")

_F = TypeVar("_F", bound=Callable[..., Any])


def logged(op: str) -> Callable[[_F], _F]:
    """Log each call of a store method ``(self, key, ...)`` and its outcome at DEBUG."""

    def decorate(method: _F) -> _F:
        @functools.wraps(method)
        def call(self: object, *args: Any, **kwargs: Any) -> Any:
            if not log.isEnabledFor(logging.DEBUG):
                return method(self, *args, **kwargs)
            key = args[0] if args else kwargs.get("key", kwargs.get("prefix"))
            try:
                result = method(self, *args, **kwargs)
            except PriorityLockError as error:
                log.debug("%r %s %r: %s", self, op, key, describe_error(error))
                raise
            log.debug("%r %s %r: %s", self, op, key, describe_result(result))
            return result

        call.__unlogged__ = method  # type: ignore[attr-defined]  # (see ``unlogged``)
        return call  # type: ignore[return-value]

    return decorate


def unlogged(method: object) -> Callable[..., Any] | None:
    """The store method ``method`` (a class's function) without its DEBUG logging
    (:func:`logged`), for a caller that checks ``log.isEnabledFor(logging.DEBUG)`` itself and
    calls it straight when logging is off (a frame the less per request); None if it logs
    nothing."""
    raw: Callable[..., Any] | None = getattr(method, "__unlogged__", None)
    return raw


def describe_error(error: PriorityLockError) -> str:
    """What a failed request came to: a failed condition says how; others, their type."""
    if isinstance(error, ConditionFailed):
        return str(error)
    unknown = ", outcome unknown" if getattr(error, "outcome_unknown", False) else ""
    return f"{type(error).__name__}{unknown}"


def describe_result(result: object) -> str:
    """What a request returned, without the data."""
    if result is None:
        return "absent or done"
    if result is NOT_MODIFIED:
        return "not modified"
    if isinstance(result, Versioned):
        return f"version {result.version} ({len(result.data)} bytes)"
    if isinstance(result, list):
        return f"{len(result)} keys"
    return f"version {result}"


def why_not_sent(exc: BaseException) -> str:
    """What kept a request from reaching the store, in a few fixed words (never the SDK's
    message, which may hold an endpoint or a query): found in the exception's chain, else in
    its text."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        error = todo.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, ConnectionRefusedError):
            return "connection refused"
        if isinstance(error, socket.gaierror):
            return "host name not found"
        if isinstance(error, TimeoutError):
            return "connection timed out"
        todo += [e for e in (error.__cause__, error.__context__) if e is not None]
        todo += [e for e in error.args if isinstance(e, BaseException)]
        # botocore keeps the cause in kwargs["error"], urllib3 in .reason
        kwargs = getattr(error, "kwargs", None)
        if isinstance(kwargs, dict) and isinstance(kwargs.get("error"), BaseException):
            todo.append(kwargs["error"])
        if isinstance(getattr(error, "reason", None), BaseException):
            todo.append(error.reason)  # type: ignore[attr-defined]
    text = f"{type(exc).__name__} {exc}".lower()
    if "refused" in text:
        return "connection refused"
    if "timeout" in text or "timed out" in text:
        return "connection timed out"
    if "name resolution" in text or "nodename" in text or "dns" in text:
        return "host name not found"
    return "could not connect"
