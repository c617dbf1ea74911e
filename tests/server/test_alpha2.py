"""The full lock API (``/v1.0-alpha2``) against a running service: plain locks, streams,
preemption, operators, shutdown and bad input, on the memory store and on S3 (moto)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import itertools
import json
import socket
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.server.helpers import LockStream, Service
from tests.server.test_metrics import parse, value

pytestmark = pytest.mark.timeout(90)

OPERATOR = "op-" + uuid.uuid4().hex
BASE = "/v1.0-alpha2/lock/locks"


def _start(stores: dict[str, str], env: dict[str, str], **kwargs: Any) -> Service:
    return Service(
        stores,
        env={**env, "PRIORITYLOCK_OPERATOR_TOKEN": OPERATOR},
        args=["--ping-interval", "0.3"],
        **kwargs,
    )


@pytest.fixture
def svc(served: tuple[dict[str, str], dict[str, str]]) -> Iterator[Service]:
    running = _start(*served)
    try:
        yield running
    finally:
        running.close()


class Streams:
    """Every stream a test opens, closed at its end whatever happens."""

    def __init__(self) -> None:
        self.opened: list[LockStream] = []

    def open(self, *args: Any, **kwargs: Any) -> LockStream:
        stream = LockStream(*args, **kwargs)
        self.opened.append(stream)
        return stream


@pytest.fixture
def streams() -> Iterator[Streams]:
    made = Streams()
    try:
        yield made
    finally:
        for stream in made.opened:
            stream.close()
            stream.response.close()


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        yield executor


def lock(svc: Service, resource: str, **body: Any) -> tuple[int, Any]:
    return svc.request("POST", f"{BASE}/{resource}", body, timeout=30)


def info(svc: Service, resource: str) -> dict[str, Any]:
    status, body = svc.request("GET", f"{BASE}/{resource}")
    assert status == 200, body
    return dict(body)


def unlock(svc: Service, resource: str, lock_id: str) -> tuple[int, Any]:
    return svc.request("DELETE", f"{BASE}/{resource}", {"lockID": lock_id})


# -- plain locks ---------------------------------------------------------------------------------


def test_lock_refuse_info_unlock(svc: Service) -> None:
    status, first = lock(svc, "job", owner="w1", ttl="10s")
    assert status == 200 and first["fence"] >= 1 and len(first["lockID"]) >= 32
    status, body = lock(svc, "job", owner="w2", immediate=True)
    assert (status, body["errorCode"]) == (409, "ERR_RESOURCE_LOCKED")
    seen = info(svc, "job")
    assert seen["owner"] == "w1" and seen["held"] and seen["lease_timeout"] == 10.0
    assert seen["resourceId"] == "job" and seen["path"] == "app1/job"
    assert "lockID" not in seen and first["lockID"] not in str(seen)
    assert unlock(svc, "job", "not-" + first["lockID"])[0] == 404
    assert unlock(svc, "other", first["lockID"])[0] == 404  # a lock id is for its resource
    assert unlock(svc, "job", first["lockID"]) == (204, None)
    status, body = unlock(svc, "job", first["lockID"])
    assert (status, body["errorCode"]) == (404, "ERR_LOCK_NOT_FOUND")
    status, second = lock(svc, "job", owner="w2", immediate=True)
    assert status == 200 and second["fence"] > first["fence"]
    assert second["lockID"] != first["lockID"]


def test_renew_and_list(svc: Service) -> None:
    _, held = lock(svc, "a1", ttl=5)
    lock(svc, "a2")
    lock(svc, "b1")
    status, body = svc.request("POST", f"{BASE}/a1/renew", {"lockID": held["lockID"]})
    assert (status, body) == (200, held)
    status, body = svc.request("POST", f"{BASE}/a1/renew", {"lockID": held["lockID"], "ttl": "9s"})
    assert (status, body["errorCode"]) == (400, "ERR_MALFORMED_REQUEST")
    status, body = svc.request("POST", f"{BASE}/a1/renew", {"lockID": "nope"})
    assert status == 404
    status, body = svc.request("GET", f"{BASE}?prefix=a")
    assert status == 200
    assert sorted(row["resourceId"] for row in body["locks"]) == ["a1", "a2"]
    assert all(row["state"] == "held" for row in body["locks"])


def test_service_renews_plain_locks(svc: Service) -> None:
    """A plain lock outlives its ttl: the service renews it until it is unlocked."""
    _, held = lock(svc, "long", ttl="1s")
    first = info(svc, "long")["renewed_at"]
    deadline = time.monotonic() + 10
    while info(svc, "long")["renewed_at"] == first:
        assert time.monotonic() < deadline, "never renewed"
        time.sleep(0.1)
    time.sleep(1.5)  # longer than the ttl: it must still be ours
    status, body = lock(svc, "long", immediate=True)
    assert status == 409, body
    assert svc.request("POST", f"{BASE}/long/renew", {"lockID": held["lockID"]})[0] == 200


def test_blocking_lock_waits_for_the_holder(
    svc: Service, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    _, first = lock(svc, "q", owner="w1")
    waiting = pool.submit(lock, svc, "q", owner="w2")
    time.sleep(0.3)  # a same-priority waiter writes nothing to wait on; it acquires either way
    assert not waiting.done()
    assert unlock(svc, "q", first["lockID"])[0] == 204
    status, second = waiting.result(timeout=10)
    assert status == 200 and second["fence"] == first["fence"] + 1
    assert info(svc, "q")["owner"] == "w2"
    status, body = lock(svc, "q", owner="w3", timeout="300ms")
    assert (status, body["errorCode"]) == (409, "ERR_RESOURCE_LOCKED")
    assert "timeout" in body["message"]


def test_a_waiter_whose_client_left_takes_nothing(svc: Service) -> None:
    """A blocking request whose client hangs up is withdrawn: it must not take (and keep
    renewing) a lock that nobody will ever unlock."""
    _, first = lock(svc, "gone", owner="w1")
    conn = http.client.HTTPConnection("127.0.0.1", svc.http_port, timeout=10)
    conn.request("POST", f"{BASE}/gone", body=json.dumps({"owner": "w2"}))
    time.sleep(0.3)  # the request reaches its wait (nothing observable to wait on)
    assert conn.sock is not None
    conn.sock.shutdown(socket.SHUT_RDWR)
    conn.close()
    time.sleep(0.3)  # the service notices the hang-up (nothing observable either)
    assert unlock(svc, "gone", first["lockID"])[0] == 204
    status, body = lock(svc, "gone", owner="w3", timeout="5s")
    assert status == 200, body
    assert info(svc, "gone")["owner"] == "w3"


# -- streams -------------------------------------------------------------------------------------


def test_stream_acquire_refuse_and_disconnect(
    streams: Streams, svc: Service, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    stream = streams.open(svc, "locks", "s", {"owner": "streamer"})
    assert stream.status == 200
    assert stream.response.getheader("Content-Type", "").startswith("application/x-ndjson")
    got = stream.event()
    assert got is not None and got["type"] == "lock-acquired" and got["fence"] >= 1
    assert stream.event(pings=True) == {"type": "ping"}  # pings while idle
    refused = streams.open(svc, "locks", "s", {"immediate": True})
    assert refused.status == 409  # refused before any stream
    refused.close()
    waiting = pool.submit(lock, svc, "s", owner="next")
    time.sleep(0.3)  # let the waiter reach its wait (it would only acquire later otherwise)
    started = time.monotonic()
    stream.close()  # the client goes: the lock is released
    status, body = waiting.result(timeout=10)
    assert status == 200 and body["fence"] == got["fence"] + 1
    assert time.monotonic() - started < 2.0  # woken by the release, not by a lease running out
    assert info(svc, "s")["owner"] == "next"


def test_stream_asked_by_query(svc: Service) -> None:
    """``?stream=true`` asks for a stream as the Accept header does (for clients that can't set
    headers)."""
    conn = http.client.HTTPConnection("127.0.0.1", svc.http_port, timeout=10)
    try:
        conn.request("POST", f"{BASE}/query?stream=true", body=b"{}")
        response = conn.getresponse()
        assert response.getheader("Content-Type", "").startswith("application/x-ndjson")
        assert json.loads(response.readline())["type"] == "lock-acquired"
    finally:
        conn.close()


def test_blocking_stream_pings_then_acquires(streams: Streams, svc: Service) -> None:
    _, first = lock(svc, "w", owner="w1")
    stream = streams.open(svc, "locks", "w", {"owner": "w2"})
    assert stream.status == 200
    assert stream.event(pings=True) == {"type": "ping"}  # waiting, and saying so
    assert unlock(svc, "w", first["lockID"])[0] == 204
    got = stream.event()
    assert got is not None and got["type"] == "lock-acquired"
    assert got["fence"] == first["fence"] + 1
    stream.close()


def test_preemption_then_handover_on_close(
    streams: Streams, svc: Service, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    stream = streams.open(svc, "locks", "p", {"owner": "low", "cleanupTimeout": "20s", "ttl": "3s"})
    acquired = stream.event()
    assert acquired is not None and acquired["type"] == "lock-acquired"
    high = pool.submit(lock, svc, "p", owner="high", priority=7, waitingTimeout="25s")
    asked = stream.event()
    assert asked is not None and asked["type"] == "cleanup-requested"
    assert asked["requestor"]["owner"] == "high" and asked["requestor"]["priority"] == 7
    assert asked["secondsLeft"] > 1 and asked["deadline"].endswith("Z")
    assert not high.done()  # it waits for our cleanup
    stream.close()  # cleaned up: closing hands over
    status, body = high.result(timeout=10)
    assert status == 200 and body["fence"] == acquired["fence"] + 1
    seen = info(svc, "p")
    assert (seen["owner"], seen["last_event"]) == ("high", "handover")


def test_forceful_takeover_tells_the_stream(streams: Streams, svc: Service) -> None:
    stream = streams.open(svc, "locks", "f", {"owner": "stubborn", "cleanupTimeout": "1s"})
    acquired = stream.event()
    assert acquired is not None
    status, body = lock(svc, "f", owner="boss", priority=9, forceful=True, waitingTimeout="1s")
    assert status == 200 and body["fence"] > acquired["fence"]
    events = []
    while (event := stream.event()) is not None:
        events.append(event)
    assert events[0]["type"] == "cleanup-requested"
    assert events[-1] == {"type": "lost", "reason": "preempted"}  # and the stream ends
    assert info(svc, "f")["last_event"] == "forceful_takeover"
    stream.close()


# -- many clients ---------------------------------------------------------------------------------

CLIENTS = 24
ROUNDS = 3


async def _stream_turn(session: aiohttp.ClientSession, url: str, owner: str) -> tuple[Any, ...]:
    async with session.post(
        url, json={"owner": owner}, headers={"Accept": "application/x-ndjson"}
    ) as response:
        assert response.status == 200
        while True:
            line = await response.content.readline()
            event = json.loads(line)
            if event["type"] == "lock-acquired":
                break
            assert event["type"] == "ping", event
        start = time.monotonic()
        await asyncio.sleep(0.005)
        end = time.monotonic()
    return start, end, event["fence"], owner  # leaving the block closes the stream


async def _plain_turn(session: aiohttp.ClientSession, url: str, owner: str) -> tuple[Any, ...]:
    async with session.post(url, json={"owner": owner}) as response:
        assert response.status == 200, await response.text()
        held = await response.json()
    start = time.monotonic()
    await asyncio.sleep(0.005)
    end = time.monotonic()
    async with session.delete(url, json={"lockID": held["lockID"]}) as response:
        assert response.status == 204, await response.text()
    return start, end, held["fence"], owner


async def _contend(service: Service) -> list[tuple[Any, ...]]:
    url = f"{service.base}{BASE}/hot"
    turns: list[tuple[Any, ...]] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def client(n: int) -> None:
            turn = _stream_turn if n % 2 else _plain_turn
            for round_ in range(ROUNDS):
                turns.append(await turn(session, url, f"c{n}-{round_}"))

        await asyncio.gather(*(client(n) for n in range(CLIENTS)))
    return turns


@pytest.mark.timeout(120)
def test_many_clients_one_holder_at_a_time(svc: Service) -> None:
    """Streams and plain locks mixed on one resource: never two holders, every fence once."""
    turns = sorted(asyncio.run(_contend(svc)), key=lambda turn: turn[2])
    assert len(turns) == CLIENTS * ROUNDS
    fences = [turn[2] for turn in turns]
    assert fences == list(range(fences[0], fences[0] + len(turns))), "each change of holder +1"
    for before, after in itertools.pairwise(turns):
        # The next holder heard of its lock only after the previous one let go.
        assert after[0] >= before[1], (before, after)


# -- operators -----------------------------------------------------------------------------------


def test_override_and_force_unlock_need_the_operator_token(streams: Streams, svc: Service) -> None:
    stream = streams.open(svc, "locks", "o", {"owner": "worker", "ttl": "3s"})
    acquired = stream.event()
    assert acquired is not None
    status, body = lock(svc, "o", owner="ops", priority=2147483647, message="incident 7")
    assert (status, body["errorCode"]) == (403, "ERR_FORBIDDEN")
    status, body = svc.request(
        "POST",
        f"{BASE}/o",
        {"owner": "ops", "priority": 2147483647, "message": "incident 7"},
        headers={"prioritylock-operator-token": "wrong"},
    )
    assert status == 403
    status, body = svc.request(
        "POST",
        f"{BASE}/o",
        {"owner": "ops", "priority": 2147483647, "message": "incident 7"},
        headers={"prioritylock-operator-token": OPERATOR},
    )
    assert status == 200 and body["fence"] > acquired["fence"]
    assert stream.event() == {"type": "lost", "reason": "overridden"}
    seen = info(svc, "o")
    assert (seen["last_event"], seen["last_event_message"]) == ("override", "incident 7")

    status, body = svc.request("DELETE", f"{BASE}/o", {"force": True})
    assert status == 403
    status, body = svc.request(
        "DELETE",
        f"{BASE}/o",
        {"force": True, "message": "stuck", "by": "alice"},
        headers={"prioritylock-operator-token": OPERATOR},
    )
    assert (status, body) == (200, {"forced": True})
    seen = info(svc, "o")
    assert (seen["held"], seen["last_event"], seen["last_event_by"]) == (
        False,
        "force_unlock",
        "alice",
    )
    status, body = unlock(svc, "o", "any")
    assert status == 404


def test_plain_holder_learns_of_a_force_unlock(svc: Service) -> None:
    _, held = lock(svc, "g", owner="w1")
    status, _ = svc.request(
        "DELETE", f"{BASE}/g", {"force": True}, headers={"prioritylock-operator-token": OPERATOR}
    )
    assert status == 200
    deadline = time.monotonic() + 15
    while True:  # the service notices at its next renewal
        status, body = svc.request("POST", f"{BASE}/g/renew", {"lockID": held["lockID"]})
        if status == 404:
            assert "lost (forced)" in body["message"], body
            break
        assert status == 200 and time.monotonic() < deadline
        time.sleep(0.2)


# -- metrics -------------------------------------------------------------------------------------


def _alpha2(svc: Service, name: str, **labels: str) -> float:
    request = urllib.request.Request(svc.base + "/metrics")
    with urllib.request.urlopen(request, timeout=10) as response:
        samples = parse(response.read().decode())
    return value(samples, name, store="locks", api="alpha2", **labels)


def test_metrics_of_the_full_api(
    streams: Streams, svc: Service, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    _, plain = lock(svc, "m1")
    assert lock(svc, "m1", immediate=True)[0] == 409
    assert _alpha2(svc, "prioritylock_locks_held") == 1
    assert unlock(svc, "m1", plain["lockID"])[0] == 204
    # a stream that cooperates: asked, closes, hands over (a release, not a loss)
    stream = streams.open(svc, "locks", "m2", {"cleanupTimeout": "20s", "ttl": "3s"})
    assert (stream.event() or {}).get("type") == "lock-acquired"
    high = pool.submit(lock, svc, "m2", owner="high", priority=3, waitingTimeout="25s")
    assert (stream.event() or {}).get("type") == "cleanup-requested"
    stream.close()
    _, taker = high.result(timeout=10)
    # a stream that does not: taken forcefully, a loss
    stubborn = streams.open(svc, "locks", "m3", {"cleanupTimeout": "1s"})
    assert (stubborn.event() or {}).get("type") == "lock-acquired"
    status, _ = lock(svc, "m3", priority=9, forceful=True, waitingTimeout="1s")
    assert status == 200
    while (event := stubborn.event()) is not None and event["type"] != "lost":
        pass
    assert _alpha2(svc, "prioritylock_acquires_total", outcome="acquired") == 5
    assert _alpha2(svc, "prioritylock_acquires_total", outcome="refused") == 1
    assert _alpha2(svc, "prioritylock_preemptions_total") == 2
    assert _alpha2(svc, "prioritylock_losses_total", reason="preempted") == 1
    assert _alpha2(svc, "prioritylock_releases_total") == 2  # m1, and m2 handed over
    assert _alpha2(svc, "prioritylock_locks_held") == 2  # m2 by high, m3 by the forceful one
    assert unlock(svc, "m2", taker["lockID"])[0] == 204
    assert _alpha2(svc, "prioritylock_locks_held") == 1


# -- shutdown ------------------------------------------------------------------------------------


def test_sigterm_releases_stream_locks_only(streams: Streams, tmp_path: Path) -> None:
    stores = {"locks": (tmp_path / "store").as_uri()}
    first = _start(stores, {})
    try:
        stream = streams.open(first, "locks", "streamed", {"owner": "s"})
        assert (stream.event() or {}).get("type") == "lock-acquired"
        assert lock(first, "plain", owner="p", ttl="30s")[0] == 200
        assert first.lock("locks", "dapr", "d", 30) is True
        code, _, err = first.stop()
        assert code == 0, err
        assert stream.event() == {"type": "lost", "reason": "service-stopping"}
        assert stream.event() is None
    finally:
        first.close()
    second = _start(stores, {})
    try:
        status, body = lock(second, "streamed", immediate=True)
        assert status == 200, body  # released at shutdown
        assert lock(second, "plain", immediate=True)[0] == 409  # runs out its ttl
        assert second.lock("locks", "dapr", "other", 30) is False  # alpha1: the same
        assert info(second, "streamed")["last_event"] == "acquired"
    finally:
        second.close()


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "ERR_MALFORMED_REQUEST"),
        (b"[1, 2]", 400, "ERR_MALFORMED_REQUEST"),
        ({"ttl": "30x"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"ttl": "-5s"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"ttl": "0.5s"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"ttl": "48h"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"waitingTimeout": True}, 400, "ERR_MALFORMED_REQUEST"),
        ({"priority": "high"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"priority": -1}, 400, "ERR_MALFORMED_REQUEST"),
        ({"immediate": "yes"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"owner": "x" * 300}, 400, "ERR_MALFORMED_REQUEST"),
        (b"{" + b" " * 70_000 + b"}", 413, "ERR_REQUEST_TOO_LARGE"),
    ],
)
def test_bad_lock_requests(bad_svc: Service, body: Any, status: int, code: str) -> None:
    got, answer = bad_svc.request("POST", f"{BASE}/r", body)
    assert (got, answer["errorCode"]) == (status, code), answer
    # ... and the service keeps serving
    assert bad_svc.request("GET", "/v1.0/healthz")[0] == 204
    status_ok, held = lock(bad_svc, "fine", immediate=True)
    assert status_ok == 200
    assert unlock(bad_svc, "fine", held["lockID"])[0] == 204


@pytest.fixture(scope="module")
def bad_svc() -> Iterator[Service]:
    """One memory-store service for every bad request (they must not disturb it)."""
    running = _start({"locks": "memory://bad"}, {})
    try:
        yield running
    finally:
        running.close()


def test_unknown_store_token_and_durations() -> None:
    running = Service({"locks": "memory://t"}, token="app-token", args=["--ping-interval", "1"])
    try:
        status, body = running.request("POST", "/v1.0-alpha2/lock/nope/r", {})
        assert (status, body["errorCode"]) == (400, "ERR_LOCK_STORE_NOT_FOUND")
        status, body = running.request("POST", f"{BASE}/r", {}, token="wrong")
        assert status == 401
        status, body = running.request("GET", f"{BASE}/r", token="wrong")
        assert status == 401
        status, body = running.request("POST", f"{BASE}/r", {"ttl": "1m30s"})
        assert status == 200
        assert info(running, "r")["lease_timeout"] == 90.0
        status, body = running.request("POST", f"{BASE}/r2", {"ttl": 2.5})
        assert status == 200 and info(running, "r2")["lease_timeout"] == 2.5
    finally:
        running.close()
