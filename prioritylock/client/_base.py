"""What :class:`~prioritylock.client.Client` and :class:`~prioritylock.client.AsyncClient`
share: everything but I/O. The requests they send, the metadata that carries the tokens, the
stream's messages turned into events and the held lock's state, and gRPC statuses turned into
the library's errors. The two clients differ only in how a call is made and awaited.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs
import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from prioritylock._errors import (
    ConfigError,
    CorruptLease,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    PriorityLockError,
    ServiceError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.v1 import lock_pb2

__all__ = [
    "ClientBase",
    "CleanupRequested",
    "Event",
    "Held",
    "Holding",
    "Lost",
    "RequestWithdrawn",
    "Requestor",
    "error_from",
]

log = logging.getLogger("prioritylock.client")

TOKEN_METADATA = "dapr-api-token"  # noqa: S105 (a metadata key, not a secret)
OPERATOR_METADATA = "prioritylock-operator-token"
#: Keepalive pings on an idle channel find a dead service (the service allows one per 10 s).
_CHANNEL_OPTIONS = (
    ("grpc.keepalive_time_ms", 30_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
)


@attrs.frozen
class Requestor:
    """Who asks for the lock: their owner name, priority, message, and whether they will take
    it when their wait runs out (``forceful``)."""

    owner: str
    priority: int
    message: str
    forceful: bool


@attrs.frozen
class CleanupRequested:
    """A higher priority asks for the lock: clean up and leave the ``with`` block before
    ``deadline`` (seconds since the epoch; ``time_left`` seconds when the service sent it) to
    hand it over. Staying in the block past the deadline keeps the lock unless the requestor is
    forceful."""

    deadline: float
    time_left: float
    requestor: Requestor


@attrs.frozen
class RequestWithdrawn:
    """The requestor of an earlier :class:`CleanupRequested` gave up: keep the lock."""

    requestor: Requestor


@attrs.frozen
class Lost:
    """The lock was taken away (``reason``: preempted, overridden, forced, expired,
    service-stopping, disconnected, ...); no event follows."""

    reason: str


Event: TypeAlias = CleanupRequested | RequestWithdrawn | Lost


@attrs.define
class Held:
    """A lock held through a stream, as ``with client.lock(...) as held`` gives it.

    ``fence`` is the fencing token (it grows with every change of holder: pass it to what the
    lock protects); ``lock_id`` the capability :meth:`Client.renew` and :meth:`Client.unlock`
    take (the stream's end releases the lock: you need neither). ``cleanup`` is the latest
    cleanup request still standing (None when there is none, or it was withdrawn); ``lost`` the
    reason the lock was lost, or None while it is held.
    """

    store: str
    resource: str
    lock_id: str
    fence: int
    cleanup: CleanupRequested | None = None
    lost: str | None = None

    def check(self) -> None:
        """:raises LockLost: the lock was lost (``reason`` says why)."""
        if self.lost is not None:
            raise _lost(self.store, self.resource, self.lost)

    def _apply(self, event: Event) -> None:
        match event:
            case CleanupRequested():
                self.cleanup = event
            case RequestWithdrawn():
                self.cleanup = None
            case Lost(reason=reason):
                self.lost = reason


@attrs.frozen
class Callbacks:
    """What the caller of ``lock()`` is told, as each event arrives (None: not told)."""

    on_cleanup_requested: Callable[[CleanupRequested], object] | None = None
    on_request_withdrawn: Callable[[RequestWithdrawn], object] | None = None
    on_lost: Callable[[Lost], object] | None = None

    def of(self, event: Event) -> Callable[[Any], object] | None:
        match event:
            case CleanupRequested():
                return self.on_cleanup_requested
            case RequestWithdrawn():
                return self.on_request_withdrawn
            case Lost():
                return self.on_lost


def _requestor(message: lock_pb2.Requestor) -> Requestor:
    return Requestor(message.owner, message.priority, message.message, message.forceful)


def decode(message: lock_pb2.LockServerStream) -> lock_pb2.LockAcquired | Event | None:
    """One message of a ``Lock`` stream: the acquisition, an event, or None (a ping)."""
    kind = message.WhichOneof("lock_server_stream")
    if kind == "lock_acquired":
        return message.lock_acquired
    if kind == "cleanup_requested":
        asked = message.cleanup_requested
        return CleanupRequested(
            deadline=asked.deadline.ToNanoseconds() / 1e9,
            time_left=asked.time_left.ToNanoseconds() / 1e9,
            requestor=_requestor(asked.requestor),
        )
    if kind == "request_withdrawn":
        return RequestWithdrawn(_requestor(message.request_withdrawn.requestor))
    if kind == "lost":
        return Lost(message.lost.reason or "lost")
    return None  # a ping, or a message this client does not know yet


def _duration(seconds: float | None, name: str) -> duration_pb2.Duration | None:
    if seconds is None:
        return None
    if seconds < 0:
        raise ConfigError(f"{name}: must be at least 0, got {seconds!r}", option=name)
    span = duration_pb2.Duration()
    span.FromNanoseconds(round(seconds * 1e9))
    return span


# The service's words for the refusals one status code covers (server/_alpha2.py).
_PREEMPTION_RAN_OUT = "the holder did not hand over in time"
_LOST = re.compile(r"the lock was lost \(([^)]*)\)")
_STORE_ERRORS: Mapping[str, type[StoreError]] = {
    cls.__name__: cls for cls in (StoreError, StoreUnavailable, StoreAccessError)
}


def _lost(store: str, resource: str, reason: str) -> LockLost:
    return LockLost(f"lock {resource} in store {store} was lost ({reason})", reason=reason)


def _error_info(error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """The ``google.rpc.ErrorInfo`` detail of a failed call, if it carries one."""
    trailing = getattr(error, "trailing_metadata", None)
    for key, value in (trailing() if callable(trailing) else None) or ():
        if key != "grpc-status-details-bin":
            continue
        status = status_pb2.Status.FromString(value)
        for detail in status.details:
            info = error_details_pb2.ErrorInfo()
            if detail.Unpack(info):
                return info
    return None


def error_from(error: grpc.RpcError) -> PriorityLockError:
    """The library's error for a failed call: what the service refused, or why it failed."""
    code: grpc.StatusCode = error.code()
    message = str(error.details() or code.name)
    info = _error_info(error)
    reason = info.reason if info is not None else ""
    if reason == "ERR_RESOURCE_LOCKED":
        if _PREEMPTION_RAN_OUT in message:
            return PreemptionTimeout(message)
        return LockTimeout(message)
    if reason == "ERR_LOCK_NOT_FOUND":
        lost = _LOST.search(message)
        return LockLost(message, reason=lost.group(1)) if lost else NotLockOwner(message)
    if reason in ("ERR_MALFORMED_REQUEST", "ERR_LOCK_STORE_NOT_FOUND"):
        return ConfigError(message)
    if info is not None and "error" in info.metadata:
        name = info.metadata["error"]
        if name == "CorruptLease":
            return CorruptLease("", message)
        if name in _STORE_ERRORS:
            return _STORE_ERRORS[name](message)
    return ServiceError(message, code=code.name, reason=reason)


class ClientBase:
    """The target, the tokens, and the requests: what both clients hold and build."""

    def __init__(
        self, target: str, *, token: str | None = None, operator_token: str | None = None
    ) -> None:
        if not isinstance(target, str) or not target or "://" in target:
            raise ConfigError(
                f"target: expected 'HOST:PORT' (the service's --grpc-port), got {target!r}",
                option="target",
            )
        self.target = target
        self._token = token
        self._operator_token = operator_token
        self._options = _CHANNEL_OPTIONS

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target!r})"

    def _metadata(self, *, operator: bool = False) -> tuple[tuple[str, str], ...]:
        sent = []
        if self._token:
            sent.append((TOKEN_METADATA, self._token))
        if operator:
            if not self._operator_token:
                raise ConfigError(
                    "operator_token: force_unlock and override need the service's operator "
                    "token (PRIORITYLOCK_OPERATOR_TOKEN): give Client(..., operator_token=...)",
                    option="operator_token",
                )
            sent.append((OPERATOR_METADATA, self._operator_token))
        return tuple(sent)

    @staticmethod
    def _lock_request(
        store: str,
        resource: str,
        *,
        owner: str | None,
        priority: int,
        timeout: float | None,
        ttl: float | None,
        cleanup_timeout: float | None,
        waiting_timeout: float | None,
        forceful: bool,
        message: str,
    ) -> lock_pb2.LockRequest:
        """``timeout``: None waits until acquired, 0 fails at once if the lock is held.

        :raises ConfigError: a negative duration.
        """
        request = lock_pb2.LockRequest(
            store_name=store,
            resource_id=resource,
            owner=owner or "",
            message=message,
            priority=priority,
            forceful=forceful,
            immediate=timeout == 0,
            ttl=_duration(ttl, "ttl"),
            cleanup_timeout=_duration(cleanup_timeout, "cleanup_timeout"),
            waiting_timeout=_duration(waiting_timeout, "waiting_timeout"),
        )
        if timeout:
            request.timeout.CopyFrom(_duration(timeout, "timeout"))
        return request

    @staticmethod
    def _override_request(
        store: str, resource: str, message: str, owner: str | None, ttl: float | None
    ) -> lock_pb2.OverrideRequest:
        if not message:
            raise ConfigError("message: an override must say why (it is kept in the lease)")
        return lock_pb2.OverrideRequest(
            store_name=store,
            resource_id=resource,
            message=message,
            owner=owner or "",
            ttl=_duration(ttl, "ttl"),
        )


class Holding:
    """A ``Lock`` stream's life without its I/O: what each message means, the held lock's
    state, and who is told. The clients' context managers read the messages and feed them in."""

    def __init__(
        self, store: str, resource: str, request: lock_pb2.LockRequest, callbacks: Callbacks
    ) -> None:
        self.store = store
        self.resource = resource
        self.request = request
        self.callbacks = callbacks
        self.held: Held | None = None
        self._early: list[Event] = []

    def _make_held(self, acquired: lock_pb2.LockAcquired) -> Held:
        return Held(self.store, self.resource, acquired.lock_id, acquired.fence)

    def before(self, message: lock_pb2.LockServerStream | None) -> Held | None:
        """A message before the acquisition (None: the call ended): the held lock once it says
        so, else None (keep reading). An event that came first is kept, to be told after it.

        :raises ServiceError: the call ended without the lock.
        """
        if message is None:
            raise ServiceError(
                f"the service ended the lock call on {self.resource} in store {self.store} "
                "before the lock was acquired",
                code="UNAVAILABLE",
            )
        decoded = decode(message)
        if isinstance(decoded, lock_pb2.LockAcquired):
            self.held = self._make_held(decoded)
        elif decoded is not None:
            self._early.append(decoded)
        return self.held

    def early(self) -> list[Event]:
        """The events that came before the acquisition (once)."""
        early, self._early = self._early, []
        return early

    @staticmethod
    def event(message: lock_pb2.LockServerStream) -> Event | None:
        """A message while held: its event, or None (a ping)."""
        decoded = decode(message)
        return None if isinstance(decoded, lock_pb2.LockAcquired) else decoded

    @staticmethod
    def ended(error: grpc.RpcError) -> Event | None:
        """The call failed while held: our own cancel (None), or the connection to the service
        is gone, and so is the lock (the service ends it)."""
        if error.code() == grpc.StatusCode.CANCELLED:
            return None
        return Lost("disconnected")

    def tell(self, event: Event) -> object:
        """Record ``event`` on the held lock and call its callback (what it returned)."""
        assert self.held is not None
        self.held._apply(event)
        return _tell(self.callbacks, event)

    def leaving(self, exc: BaseException | None) -> None:
        """Leaving the ``with`` block: a lock lost while the block ran raises
        :class:`LockLost` unless the block raised something itself."""
        assert self.held is not None
        if exc is None:
            self.held.check()


def _tell(callbacks: Callbacks, event: Event) -> object:
    """Call the callback of ``event``; what it returned (a coroutine, for the async client).
    A callback that raises is logged, and the stream goes on."""
    callback = callbacks.of(event)
    if callback is None:
        return None
    try:
        return callback(event)
    except Exception:
        log.exception("prioritylock.client: the callback for %r raised", event)
        return None
