"""Both drivers behind one face, so the same lock tests run on ``Lock`` and on ``AsyncLock``.

``SyncFace`` drives an :class:`~prioritylock.AsyncLock` from plain test code: each call runs as a
coroutine on one event loop in a background thread (the loop every async lock of the test
session lives on), and returns or raises what the coroutine did. Signals and listeners are given
the face as their lock, so tests that check ``sender is lock`` hold for both drivers.

With a manual ``Heartbeat`` (``threaded=False``, stepped by the test with ``run_due``), async locks
get a manual :class:`~prioritylock.AsyncScheduler` on the same clock, stepped by the same
``run_due`` call; what the locks spawn (listener calls, cleanups) is then run to completion before
``run_due`` returns, as the sync heartbeat runs them inline.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

from prioritylock import AsyncLock, AsyncScheduler, Heartbeat, LockBuilder, LockInfo
from prioritylock import _alock as alock_module

T = TypeVar("T")

#: How long one call may take before the test fails (the suites' own timeouts are longer).
CALL_TIMEOUT = 90.0


class _LoopThread:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="test-asyncio-loop", daemon=True
                )
                thread.start()
                self._loop = loop
            return self._loop

    def on_loop(self) -> bool:
        """Whether the caller runs on the loop's own thread (a fake clock's tick hook, say)."""
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)


LOOP = _LoopThread()

_manual: dict[int, AsyncScheduler] = {}


def _manual_scheduler(hb: Heartbeat) -> AsyncScheduler:
    """The manual async scheduler stepped together with the manual heartbeat ``hb``."""
    scheduler = _manual.get(id(hb))
    if scheduler is not None:
        return scheduler
    scheduler = AsyncScheduler(hb.clock, manual=True)
    _manual[id(hb)] = scheduler
    sync_run_due = hb.run_due

    async def step() -> float | None:
        nxt = await scheduler.run_due()
        await _drain()
        return nxt

    def run_due() -> float | None:
        first = sync_run_due()
        if LOOP.on_loop():
            # Time moved inside an async lock's own call (a fake clock's sleep): the loop can't
            # wait for itself, so the due tasks run as soon as that call yields.
            task = LOOP.loop.create_task(scheduler.run_due())
            alock_module._background.add(task)  # type: ignore[arg-type]
            task.add_done_callback(alock_module._background.discard)
            return first
        second = LOOP.run(step())
        due = [t for t in (first, second) if t is not None]
        return min(due) if due else None

    hb.run_due = run_due  # type: ignore[method-assign]
    original_close = hb.close

    def close() -> None:
        _manual.pop(id(hb), None)
        original_close()

    hb.close = close  # type: ignore[method-assign]
    return scheduler


async def _drain() -> None:
    """Let what the locks spawned (listener calls, cleanups) run to completion."""
    for _ in range(100):
        pending = [t for t in alock_module._background if not t.done()]
        await asyncio.sleep(0)
        if not pending:
            return
        await asyncio.wait(pending, timeout=CALL_TIMEOUT)


class SyncFace:
    """An :class:`AsyncLock` with the synchronous :class:`~prioritylock.Lock` API."""

    def __init__(self, builder: LockBuilder) -> None:
        hb = builder._opts.get("heartbeat")
        scheduler = None
        if isinstance(hb, Heartbeat) and not hb.threaded:
            scheduler = _manual_scheduler(hb)
        self.manual = scheduler is not None

        async def build() -> AsyncLock:
            return builder.build_async(scheduler=scheduler)

        self.inner: AsyncLock = LOOP.run(build())
        self.inner._sender = self

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        async def run() -> T:
            try:
                return await coro
            finally:
                if self.manual:
                    await _drain()

        return LOOP.run(run())

    def _call(self, fn: Any) -> Any:
        if LOOP.on_loop():
            return fn()

        async def call() -> Any:
            return fn()

        return LOOP.run(call())

    @property
    def _st(self) -> Any:  # the flows' state, for tests that look inside (as on Lock)
        return self.inner._st

    @property
    def config(self) -> Any:
        return self.inner.config

    @property
    def key(self) -> str:
        return self.inner.key

    def try_lock(self) -> bool:
        return self._run(self.inner.try_lock())

    def lock(self, timeout: float | None = None) -> None:
        self._run(self.inner.lock(timeout))

    def renew(self) -> None:
        self._run(self.inner.renew())

    def unlock(self) -> None:
        self._run(self.inner.unlock())

    def info(self) -> LockInfo | None:
        return self._run(self.inner.info())

    def force_unlock(self, message: str, **kwargs: Any) -> LockInfo | None:
        return self._run(self.inner.force_unlock(message, **kwargs))

    def close(self) -> None:
        self._run(self.inner.aclose())

    def is_current_owner(self) -> bool:
        return bool(self._call(self.inner.is_current_owner))

    @property
    def fencing_token(self) -> int:
        return int(self._call(lambda: self.inner.fencing_token))

    @property
    def lock_id(self) -> str:
        return str(self._call(lambda: self.inner.lock_id))

    def __enter__(self) -> SyncFace:
        self.lock()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._run(self.inner.__aexit__(exc_type, exc, tb))

    def __repr__(self) -> str:
        return f"SyncFace({self.inner!r})"
