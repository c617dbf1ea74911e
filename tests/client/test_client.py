"""prioritylock.client against a real ``prioritylock serve`` (one per module, on a memory store):
a lock held through a stream, its events as callbacks and as an async iterator, the unary calls,
and every refusal as the library's error. The blocking and the asyncio client run the same
scenarios where the scenario is the same."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from prioritylock import (
    ConfigError,
    LockLost,
    LockTimeout,
    NotLockOwner,
    PreemptionTimeout,
    ServiceError,
)
from prioritylock.client import (
    AsyncClient,
    CleanupRequested,
    Client,
    Event,
    Lost,
    RequestWithdrawn,
)
from tools.emulators import free_port
from tools.service import Service

pytestmark = pytest.mark.timeout(60)

TOKEN = "client-test-token"
OPERATOR = "client-test-operator"
WAIT = 10.0

_T = TypeVar("_T")


@pytest.fixture(scope="module")
def service() -> Iterator[Service]:
    running = Service(
        {"locks": f"memory://{uuid.uuid4().hex}"},
        token=TOKEN,
        env={"PRIORITYLOCK_OPERATOR_TOKEN": OPERATOR},
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(service: Service) -> Iterator[Client]:
    with Client(f"127.0.0.1:{service.grpc_port}", token=TOKEN, operator_token=OPERATOR) as made:
        yield made


def _resource() -> str:
    return f"r-{uuid.uuid4().hex[:8]}"


def _run(service: Service, body: Callable[[AsyncClient], Awaitable[_T]]) -> _T:
    async def main() -> _T:
        target = f"127.0.0.1:{service.grpc_port}"
        async with AsyncClient(target, token=TOKEN, operator_token=OPERATOR) as client:
            return await asyncio.wait_for(body(client), 30)

    return asyncio.run(main())


def test_a_held_lock_excludes_and_its_end_releases(client: Client) -> None:
    resource = _resource()
    with client.lock("locks", resource, owner="first") as held:
        assert held.lock_id and held.fence >= 1
        assert client.info("locks", resource).owner == "first"
        with pytest.raises(LockTimeout), client.lock("locks", resource, timeout=0):
            pass
        with pytest.raises(LockTimeout), client.lock("locks", resource, timeout=0.3):
            pass
    # The block's end released it: the next holder gets it, one fence on.
    with client.lock("locks", resource, owner="second", timeout=WAIT) as after:
        assert after.fence == held.fence + 1
        assert after.lost is None


def test_a_higher_priority_asks_and_the_holder_hands_over(client: Client) -> None:
    resource = _resource()
    asked: list[CleanupRequested] = []
    told = threading.Event()
    got: list[int] = []

    def on_cleanup(event: CleanupRequested) -> None:
        asked.append(event)
        told.set()

    def urgent() -> None:
        with client.lock(
            "locks", resource, owner="urgent", priority=5, waiting_timeout=WAIT, timeout=WAIT
        ) as taken:
            got.append(taken.fence)

    with client.lock(
        "locks", resource, owner="batch", cleanup_timeout=WAIT, on_cleanup_requested=on_cleanup
    ) as held:
        rival = threading.Thread(target=urgent)
        rival.start()
        assert told.wait(WAIT), "the holder was not asked to hand over"
        assert held.cleanup is asked[0]
        assert (asked[0].requestor.owner, asked[0].requestor.priority) == ("urgent", 5)
        assert 0 < asked[0].time_left <= WAIT
    rival.join(WAIT)
    assert got == [held.fence + 1]


def test_an_override_takes_the_lock_and_the_block_end_says_lost(client: Client) -> None:
    resource = _resource()
    lost: list[Lost] = []
    told = threading.Event()

    def on_lost(event: Lost) -> None:
        lost.append(event)
        told.set()

    holding = client.lock("locks", resource, on_lost=on_lost)
    held = holding.__enter__()
    taken = client.override("locks", resource, message="INC-1: stop it", owner="oncall")
    assert told.wait(WAIT), "the holder was not told"
    assert taken.fence == held.fence + 1
    with pytest.raises(LockLost):
        held.check()
    with pytest.raises(LockLost) as caught:
        holding.__exit__(None, None, None)  # leaving the with block
    assert caught.value.reason == lost[0].reason == "overridden"
    client.unlock("locks", resource, taken.lock_id)


def test_unary_calls_and_their_refusals(client: Client, service: Service) -> None:
    resource = _resource()
    held = client.acquire("locks", resource, owner="job", message="nightly")
    assert client.renew("locks", resource, held.lock_id) == held.fence
    info = client.info("locks", resource)
    assert (info.state, info.owner, info.message, info.fence) == (
        "held", "job", "nightly", held.fence,
    )  # fmt: skip
    assert [row.resource_id for row in client.list("locks", prefix=resource)] == [resource]
    with pytest.raises(LockTimeout):
        client.acquire("locks", resource, timeout=0)
    with pytest.raises(NotLockOwner) as wrong:
        client.unlock("locks", resource, "not-the-lock-id")
    assert not isinstance(wrong.value, LockLost)
    client.unlock("locks", resource, held.lock_id)
    assert client.info("locks", resource).held is False
    assert client.force_unlock("locks", resource) is False  # nothing held
    with pytest.raises(ConfigError, match="lock store nowhere not found"):
        client.acquire("nowhere", resource)
    with pytest.raises(ConfigError, match="ttl"):
        client.acquire("locks", resource, ttl=0.001)
    target = f"127.0.0.1:{service.grpc_port}"
    with Client(target) as anonymous, pytest.raises(ServiceError) as refused:
        anonymous.info("locks", resource)
    assert (refused.value.code, refused.value.reason) == ("UNAUTHENTICATED", "ERR_UNAUTHORIZED")
    with (
        Client(target, token=TOKEN) as plain,
        pytest.raises(ConfigError, match="operator_token"),
    ):
        plain.force_unlock("locks", resource)
    with (
        Client(target, token=TOKEN, operator_token="wrong") as impostor,
        pytest.raises(ServiceError) as forbidden,
    ):
        impostor.force_unlock("locks", resource)
    assert forbidden.value.code == "PERMISSION_DENIED"


def test_async_events_cleanup_then_withdrawn(service: Service) -> None:
    """The holder hears a request and its withdrawal through ``events()``; the requestor's wait
    runs out (PreemptionTimeout), and the holder keeps the lock."""
    resource = _resource()

    async def scenario(client: AsyncClient) -> tuple[list[Event], BaseException | None]:
        seen: list[Event] = []
        async with client.lock("locks", resource, owner="batch", cleanup_timeout=4) as held:

            async def urgent() -> None:
                async with client.lock(
                    "locks", resource, owner="urgent", priority=3, waiting_timeout=1.5
                ):
                    pass

            rival = asyncio.create_task(urgent())
            async for event in held.events():
                seen.append(event)
                if isinstance(event, RequestWithdrawn):
                    break
            failure = (await asyncio.gather(rival, return_exceptions=True))[0]
            assert held.cleanup is None and held.lost is None
            assert await client.renew("locks", resource, held.lock_id) == held.fence
        return seen, failure

    seen, failure = _run(service, scenario)
    assert [type(event) for event in seen] == [CleanupRequested, RequestWithdrawn]
    assert isinstance(failure, PreemptionTimeout)


def test_async_lock_timeout_lost_and_callbacks(service: Service) -> None:
    resource = _resource()

    async def scenario(client: AsyncClient) -> dict[str, Any]:
        told: list[Lost] = []

        async def on_lost(event: Lost) -> None:
            told.append(event)

        outcome: dict[str, Any] = {}
        try:
            async with client.lock("locks", resource, on_lost=on_lost) as held:
                with pytest.raises(LockTimeout):
                    async with client.lock("locks", resource, timeout=0):
                        pass
                await client.force_unlock("locks", resource, message="stuck", by="ops")
                outcome["events"] = [event async for event in held.events()]
        except LockLost as exc:
            outcome["raised"] = exc.reason
        outcome["told"] = told
        return outcome

    outcome = _run(service, scenario)
    assert outcome["events"] == [Lost("forced")]
    assert outcome["told"] == [Lost("forced")]
    assert outcome["raised"] == "forced"


def test_the_example_runs(service: Service) -> None:
    """examples/grpc_client.py, as a user runs it beside a service (with warnings as errors)."""
    script = Path(__file__).resolve().parents[2] / "examples" / "grpc_client.py"
    target = f"127.0.0.1:{service.grpc_port}"
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script), "locks"],
        env={**os.environ, "PRIORITYLOCK_GRPC": target, "DAPR_API_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == f"service: gRPC {target}, lock store 'locks'"
    fence = int(lines[1].rsplit(" ", 1)[1])
    assert lines[1:] == [
        f"batch holds the lock, fence {fence}",
        "other: lock(timeout=0) -> LockTimeout while batch holds it",
        "batch: asked to hand over by 'urgent' (priority 5)",
        "batch: rolled back its work, handing over",
        f"urgent holds the lock, fence {fence + 1}",
    ]


def test_a_service_that_does_not_answer_is_a_service_error() -> None:
    target = f"127.0.0.1:{free_port()}"  # nothing listens there
    with Client(target) as client, pytest.raises(ServiceError) as caught:
        client.info("locks", "r")
    assert caught.value.code == "UNAVAILABLE"
    made = AsyncClient(target)  # outside any event loop: its channel opens at the first call

    async def main() -> None:
        async with made:
            with pytest.raises(ServiceError) as refused:
                async with made.lock("locks", "r"):
                    pass
            assert refused.value.code == "UNAVAILABLE"

    asyncio.run(main())
