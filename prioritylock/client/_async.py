""":class:`AsyncClient`: the asyncio client (grpc.aio). A held lock's stream is read by a task,
which tells the callbacks and feeds :meth:`AsyncHeld.events`; everything else it shares with the
blocking client (:mod:`._base`)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Any, TypeVar

import attrs
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
    log,
)
from prioritylock.v1 import lock_pb2, lock_pb2_grpc

__all__ = ["AsyncClient", "AsyncHeld"]

_T = TypeVar("_T")


@attrs.define
class AsyncHeld(Held):
    """A lock held through a stream by :meth:`AsyncClient.lock`: a :class:`Held` whose events
    can also be awaited, with :meth:`events`."""

    _queue: asyncio.Queue[Event | None] = attrs.field(factory=asyncio.Queue, repr=False)

    async def events(self) -> AsyncIterator[Event]:
        """The stream's events as they arrive (cleanup requested, request withdrawn, lost);
        the iteration ends after :class:`Lost`, or when the block ends the stream."""
        while True:
            event = await self._queue.get()
            if event is None:
                return
            yield event
            if isinstance(event, Lost):
                return


class AsyncClient(ClientBase):
    """:class:`~prioritylock.client.Client`, awaited: the same arguments, methods and errors;
    ``async with client.lock(...) as held`` holds a lock, and ``held.events()`` is an async
    iterator of its events. Callbacks may be plain functions or coroutine functions (awaited
    on the stream's task, one event at a time). Its channel is opened in the event loop of its
    first call: use it in that loop only."""

    def __init__(
        self,
        target: str,
        *,
        token: str | None = None,
        operator_token: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        super().__init__(target, token=token, operator_token=operator_token)
        self._credentials = credentials
        self._channel: Any = None
        self._lock_stub: Any = None

    @property
    def _stub(self) -> Any:
        """The stub, on a channel opened in the running event loop at the first call."""
        if self._channel is None:
            if self._credentials is None:
                self._channel = grpc.aio.insecure_channel(self.target, options=self._options)
            else:
                self._channel = grpc.aio.secure_channel(
                    self.target, self._credentials, options=self._options
                )
            self._lock_stub = lock_pb2_grpc.LockServiceStub(self._channel)  # type: ignore[no-untyped-call]
        return self._lock_stub

    async def close(self) -> None:
        """Close the channel: every lock still held through it is released by the service."""
        if self._channel is not None:
            await self._channel.close()
            self._channel = None

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _call(
        self, method: Callable[..., Awaitable[_T]], request: Any, *, operator: bool = False
    ) -> _T:
        try:
            return await method(request, metadata=self._metadata(operator=operator))
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
    ) -> AsyncHeldLock:
        """:meth:`Client.lock <prioritylock.client.Client.lock>`, for ``async with``.

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
        return AsyncHeldLock(self, store, resource, request, callbacks)

    async def acquire(
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
        """:meth:`Client.acquire <prioritylock.client.Client.acquire>`, awaited."""
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
        got = await self._call(self._stub.Acquire, request)
        return Held(store, resource, got.lock_id, got.fence)

    async def renew(self, store: str, resource: str, lock_id: str) -> int:
        """:meth:`Client.renew <prioritylock.client.Client.renew>`, awaited."""
        request = lock_pb2.RenewRequest(store_name=store, resource_id=resource, lock_id=lock_id)
        return int((await self._call(self._stub.Renew, request)).fence)

    async def unlock(self, store: str, resource: str, lock_id: str) -> None:
        """:meth:`Client.unlock <prioritylock.client.Client.unlock>`, awaited."""
        request = lock_pb2.UnlockRequest(store_name=store, resource_id=resource, lock_id=lock_id)
        await self._call(self._stub.Unlock, request)

    async def force_unlock(
        self, store: str, resource: str, *, message: str = "", by: str = "operator"
    ) -> bool:
        """:meth:`Client.force_unlock <prioritylock.client.Client.force_unlock>`, awaited."""
        request = lock_pb2.ForceUnlockRequest(
            store_name=store, resource_id=resource, message=message, by=by
        )
        return bool((await self._call(self._stub.ForceUnlock, request, operator=True)).forced)

    async def override(
        self,
        store: str,
        resource: str,
        *,
        message: str,
        owner: str | None = None,
        ttl: float | None = None,
    ) -> Held:
        """:meth:`Client.override <prioritylock.client.Client.override>`, awaited."""
        request = self._override_request(store, resource, message, owner, ttl)
        got = await self._call(self._stub.Override, request, operator=True)
        return Held(store, resource, got.lock_id, got.fence)

    async def info(self, store: str, resource: str) -> lock_pb2.LockInfo:
        """:meth:`Client.info <prioritylock.client.Client.info>`, awaited."""
        request = lock_pb2.InfoRequest(store_name=store, resource_id=resource)
        found: lock_pb2.LockInfo = await self._call(self._stub.Info, request)
        return found

    async def list(self, store: str, prefix: str = "", limit: int = 0) -> list[lock_pb2.LockInfo]:
        """:meth:`Client.list <prioritylock.client.Client.list>`, awaited."""
        request = lock_pb2.ListRequest(store_name=store, prefix=prefix, limit=limit)
        return list((await self._call(self._stub.List, request)).locks)


class AsyncHeldLock(Holding):
    """``async with client.lock(...) as held``: the stream that holds the lock; entering waits
    for the lock and gives its :class:`AsyncHeld`. A task reads the stream, tells the callbacks
    and feeds ``held.events()``."""

    def __init__(self, client: AsyncClient, *args: Any) -> None:
        super().__init__(*args)
        self._client = client
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._closing = False

    def _make_held(self, acquired: lock_pb2.LockAcquired) -> AsyncHeld:
        return AsyncHeld(self.store, self.resource, acquired.lock_id, acquired.fence)

    async def __aenter__(self) -> AsyncHeld:
        client = self._client
        self._call = call = client._stub.Lock(self.request, metadata=client._metadata())
        try:
            while (held := self.before(await _read(call))) is None:
                pass
        except BaseException:
            call.cancel()
            raise
        self._reader = asyncio.create_task(self._read())
        assert isinstance(held, AsyncHeld)
        return held

    async def _read(self) -> None:
        """Tell each event as it arrives, until the stream ends."""
        held = self.held
        assert isinstance(held, AsyncHeld)
        try:
            for first in self.early():
                await self._tell(held, first)
            while True:
                try:
                    message = await _read(self._call, raw=True)
                except asyncio.CancelledError:
                    if self._closing:  # grpc.aio's answer to our own cancel of the call
                        return
                    raise
                except grpc.RpcError as exc:
                    if (ended := self.ended(exc)) is not None:
                        await self._tell(held, ended)
                    return
                if message is None:
                    return
                if (event := self.event(message)) is not None:
                    await self._tell(held, event)
        finally:
            held._queue.put_nowait(None)

    async def _tell(self, held: AsyncHeld, event: Event) -> None:
        pending = self.tell(event)
        held._queue.put_nowait(event)
        if inspect.isawaitable(pending):
            try:
                await pending
            except Exception:
                log.exception("prioritylock.client: the callback for %r raised", event)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._reader is not None
        self._closing = True
        self._call.cancel()  # the end of the call releases the lock, or hands it over
        await self._reader
        self.leaving(exc)


async def _read(call: Any, *, raw: bool = False) -> lock_pb2.LockServerStream | None:
    """The next message of a call, None at its end.

    :raises PriorityLockError: the call failed (``raw``: :class:`grpc.RpcError` as it is).
    """
    try:
        message = await call.read()
    except grpc.RpcError as exc:
        if raw:
            raise
        raise error_from(exc) from None
    return None if message is grpc.aio.EOF else message
