""":class:`Client`: the blocking client. A held lock's stream is read by a thread of its own,
which tells the callbacks; everything else it shares with the async client (:mod:`._base`)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, TypeVar

import grpc

from prioritylock.client._base import (
    Callbacks,
    CleanupRequested,
    ClientBase,
    Event,
    Held,
    Holding,
    Lost,
    RequestWithdrawn,
    error_from,
)
from prioritylock.v1 import lock_pb2, lock_pb2_grpc

__all__ = ["Client"]

_T = TypeVar("_T")


class Client(ClientBase):
    """A client of ``prioritylock serve``'s gRPC lock API (``prioritylock.v1.LockService``).

    ``target`` is the service's ``HOST:PORT`` (its ``--grpc-port``); ``token`` its
    ``DAPR_API_TOKEN``, if it has one; ``operator_token`` its ``PRIORITYLOCK_OPERATOR_TOKEN``,
    for :meth:`force_unlock` and :meth:`override`; ``credentials``
    (``grpc.ssl_channel_credentials(...)``) for a service started with ``--tls-cert``. One
    channel carries every call and held lock; close the client (or use it as a context manager)
    when done: that releases every lock still held through it.

    Every method raises the library's errors: :class:`~prioritylock.LockTimeout`,
    :class:`~prioritylock.PreemptionTimeout`, :class:`~prioritylock.LockLost`,
    :class:`~prioritylock.NotLockOwner`, :class:`~prioritylock.ConfigError` (a bad argument, an
    unknown store), :class:`~prioritylock.StoreAccessError` / ``StoreUnavailable`` /
    ``StoreError`` (the service's store failed; the message says the fix), and
    :class:`~prioritylock.ServiceError` for the rest (a wrong token, the service unreachable).
    """

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        operator_token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        super().__init__(target, token=token, operator_token=operator_token)
        if credentials is None:
            self._channel = grpc.insecure_channel(target, options=self._options)
        else:
            self._channel = grpc.secure_channel(target, credentials, options=self._options)
        self._stub = lock_pb2_grpc.LockServiceStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        """Close the channel: every lock still held through it is released by the service."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: Callable[..., _T], request: Any, *, operator: bool = False) -> _T:
        try:
            return method(request, metadata=self._metadata(operator=operator))
        except grpc.RpcError as exc:
            raise error_from(exc) from None

    def lock(
        self,
        store: str,
        resource: str,
        *,
        owner: str | None = None,
        priority: int = 0,
        timeout: float | None = None,
        ttl: float | None = None,
        cleanup_timeout: float | None = None,
        waiting_timeout: float | None = None,
        forceful: bool = False,
        message: str = "",
        on_cleanup_requested: Callable[[CleanupRequested], object] | None = None,
        on_request_withdrawn: Callable[[RequestWithdrawn], object] | None = None,
        on_lost: Callable[[Lost], object] | None = None,
    ) -> HeldLock:
        """Take the lock of ``resource`` in the service's store ``store`` and hold it for the
        ``with`` block, through a stream: the service renews it, and the block's end (or the
        client's, or the connection's) releases it or hands it over.

        ``timeout``: seconds to wait for the lock (None: until acquired; 0: fail at once if it
        is held). ``priority`` above the holder's asks the holder to hand over (it has its
        ``cleanup_timeout`` to do so; this request waits ``waiting_timeout`` at most, and then
        takes the lock if ``forceful``). ``ttl``: the lease's time to live, renewed by the
        service. ``owner`` and ``message`` are shown in the lease.

        The callbacks are called on the stream's thread as events arrive: a cleanup request
        (leave the block before its deadline to hand over), its withdrawal, and the loss of the
        lock (the block's end then raises :class:`~prioritylock.LockLost`). Keep them short
        (set an event, say): the block's end waits for the one running. A callback that raises
        is logged.

        :raises LockTimeout: not acquired within ``timeout``.
        :raises PreemptionTimeout: a non-forceful request whose wait for the holder ran out.
        :raises LockLost: on leaving the block, if the lock was lost while it ran.
        """
        request = self._lock_request(
            store,
            resource,
            owner=owner,
            priority=priority,
            timeout=timeout,
            ttl=ttl,
            cleanup_timeout=cleanup_timeout,
            waiting_timeout=waiting_timeout,
            forceful=forceful,
            message=message,
        )
        callbacks = Callbacks(on_cleanup_requested, on_request_withdrawn, on_lost)
        return HeldLock(self, store, resource, request, callbacks)

    def acquire(
        self,
        store: str,
        resource: str,
        *,
        owner: str | None = None,
        priority: int = 0,
        timeout: float | None = None,
        ttl: float | None = None,
        cleanup_timeout: float | None = None,
        waiting_timeout: float | None = None,
        forceful: bool = False,
        message: str = "",
    ) -> Held:
        """Take the lock and keep it until :meth:`unlock` (the service renews it). Such a holder
        hears of no preemption request: only a forceful requestor or an operator takes it.
        The arguments are :meth:`lock`'s.

        :raises LockTimeout: not acquired within ``timeout``.
        """
        request = self._lock_request(
            store,
            resource,
            owner=owner,
            priority=priority,
            timeout=timeout,
            ttl=ttl,
            cleanup_timeout=cleanup_timeout,
            waiting_timeout=waiting_timeout,
            forceful=forceful,
            message=message,
        )
        got = self._call(self._stub.Acquire, request)
        return Held(store, resource, got.lock_id, got.fence)

    def renew(self, store: str, resource: str, lock_id: str) -> int:
        """Renew now, as proof the lock is still held; the fence.

        :raises LockLost: the lock was lost. :raises NotLockOwner: a wrong lock id.
        """
        request = lock_pb2.RenewRequest(store_name=store, resource_id=resource, lock_id=lock_id)
        return int(self._call(self._stub.Renew, request).fence)

    def unlock(self, store: str, resource: str, lock_id: str) -> None:
        """Release the lock (or hand it over to a pending higher priority).

        :raises LockLost: the lock was lost. :raises NotLockOwner: a wrong lock id.
        """
        request = lock_pb2.UnlockRequest(store_name=store, resource_id=resource, lock_id=lock_id)
        self._call(self._stub.Unlock, request)

    def force_unlock(
        self, store: str, resource: str, *, message: str = "", by: str = "operator"
    ) -> bool:
        """The operators' force unlock (needs ``operator_token``); whether a holder was forced
        out."""
        request = lock_pb2.ForceUnlockRequest(
            store_name=store, resource_id=resource, message=message, by=by
        )
        return bool(self._call(self._stub.ForceUnlock, request, operator=True).forced)

    def override(
        self,
        store: str,
        resource: str,
        *,
        message: str,
        owner: str | None = None,
        ttl: float | None = None,
    ) -> Held:
        """The operators' emergency override (needs ``operator_token``): take the lock at once,
        whoever holds it, until :meth:`unlock`. ``message`` says why; it is kept in the lease."""
        request = self._override_request(store, resource, message, owner, ttl)
        got = self._call(self._stub.Override, request, operator=True)
        return Held(store, resource, got.lock_id, got.fence)

    def info(self, store: str, resource: str) -> lock_pb2.LockInfo:
        """The lease of ``resource``, as ``prioritylock info`` shows it."""
        request = lock_pb2.InfoRequest(store_name=store, resource_id=resource)
        found: lock_pb2.LockInfo = self._call(self._stub.Info, request)
        return found

    def list(self, store: str, prefix: str = "", limit: int = 0) -> list[lock_pb2.LockInfo]:
        """The leases of resources starting with ``prefix`` (at most ``limit``, 0: 1000)."""
        request = lock_pb2.ListRequest(store_name=store, prefix=prefix, limit=limit)
        return list(self._call(self._stub.List, request).locks)


class HeldLock(Holding):
    """``with client.lock(...) as held``: the stream that holds the lock (see
    :meth:`Client.lock`); entering waits for the lock and gives its :class:`Held`. A thread reads
    the stream and tells the callbacks."""

    def __init__(self, client: Client, *args: Any) -> None:
        super().__init__(*args)
        self._client = client
        self._call: Any = None
        self._reader: threading.Thread | None = None

    def __enter__(self) -> Held:
        client = self._client
        self._call = call = client._stub.Lock(self.request, metadata=client._metadata())
        try:
            while (held := self.before(_next(call))) is None:
                pass
        except BaseException:
            call.cancel()
            raise
        self._reader = threading.Thread(
            target=self._read, name=f"prioritylock-client-{self.resource}", daemon=True
        )
        self._reader.start()
        return held

    def _read(self) -> None:
        """Tell each event as it arrives, until the stream ends."""
        for event in itertools.chain(self.early(), self._events()):
            self.tell(event)

    def _events(self) -> Iterator[Event]:
        try:
            for message in self._call:
                if (event := self.event(message)) is not None:
                    yield event
        except grpc.RpcError as exc:
            if (event := self.ended(exc)) is not None:
                yield event

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._reader is not None
        self._call.cancel()  # the end of the call releases the lock, or hands it over
        self._reader.join()
        self.leaving(exc)


def _next(call: Iterator[lock_pb2.LockServerStream]) -> lock_pb2.LockServerStream | None:
    """The next message of a call, None at its end.

    :raises PriorityLockError: the call failed (the service refused the lock, or is gone).
    """
    try:
        return next(call)
    except StopIteration:
        return None
    except grpc.RpcError as exc:
        raise error_from(exc) from None
