"""The sidecar's edges: shutdown leaves no task unretrieved, a stream kept past its cleanup
window is not an error, and unknown routes answer JSON like the rest of the API."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import uuid
import weakref
from typing import Any

import pytest

from prioritylock.server._alpha2 import Alpha2Locks, Options, Stream
from prioritylock.server._names import Names
from prioritylock.stores import open_store
from tests.server.helpers import LockStream, Service

pytestmark = pytest.mark.timeout(60)


def test_a_release_nobody_waits_for_leaves_no_unretrieved_exception() -> None:
    """The stream handler waiting on a release is cancelled (its client went, then the service
    stopped) while the release is on its way, and the release finds the lock taken over: its
    LockNotFound must not end as "Task exception was never retrieved"."""
    reported: list[dict[str, Any]] = []

    async def scenario() -> weakref.ref[asyncio.Future[None]]:
        asyncio.get_running_loop().set_exception_handler(lambda _, ctx: reported.append(ctx))
        locks = Alpha2Locks(Names({"s": open_store(f"memory://{uuid.uuid4().hex}")}, "app"))
        try:
            held = await locks.lock("s", "r", Options(owner="stubborn"), stream=Stream())
            await locks.force_unlock("s", "r", "taken away", by="operator")
            ender = asyncio.create_task(locks.end(held))
            await asyncio.sleep(0)  # end() now waits on the release it started
            ender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ender
            assert held.ending is not None
            release = weakref.ref(held.ending)
            while not held.ending.done():
                await asyncio.sleep(0.01)
            await held.lock.aclose()
            return release
        finally:
            locks.close()

    release = asyncio.run(scenario())
    gc.collect()
    assert release() is None
    assert not [ctx for ctx in reported if "never retrieved" in str(ctx.get("message"))]
