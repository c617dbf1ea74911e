"""The full lock API against a running service, over both transports (HTTP ``/v1.0-alpha2``
with NDJSON streams, and gRPC ``prioritylock.v1.LockService``) through one client adapter
(tests/server/clients.py): plain locks, streams, preemption, operators, shutdown and bad input,
on the memory store, a local directory and S3 (moto). Tests of what only one transport has
(JSON bodies, ``?stream=true``) run on that one."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import itertools
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from tests._servers.s3 import S3Server
from tests.server.clients import TRANSPORTS, Client, Stream, open_client
from tests.server.conftest import ON_SERVERS, SharedServices, served_kind
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


#: (store, transport): every transport on memory and S3, gRPC also on a local directory (HTTP
#: runs on one in test_sigterm_releases_stream_locks_only).
WHERE = [
    ("memory", "http"),
    ("memory", "grpc"),
    ("local", "grpc"),
    ("s3-moto", "http"),
    ("s3-moto", "grpc"),
]


@pytest.fixture(scope="module", params=WHERE, ids=["-".join(where) for where in WHERE])
def served_where(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Service, str]]:
    """One service per (store, transport) for the module: each test's client puts its own
    prefix on the resource ids it uses (starting a service per test took most of the time)."""
    store, transport = request.param
    env: dict[str, str] = {}
    if store == "memory":
        url = f"memory://{uuid.uuid4().hex}"
    elif store == "local":
        url = (tmp_path_factory.mktemp("store") / "store").as_uri()
    else:
        server: S3Server = request.getfixturevalue("moto_server")
        bucket: str = request.getfixturevalue("s3_bucket_for_server")
        url = (
            f"s3://{bucket}/locks-{uuid.uuid4().hex[:8]}?endpoint={server.endpoint_url}"
            "&region=us-east-1&addressing=path"
        )
        env = {
            "AWS_ACCESS_KEY_ID": server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": server.secret_access_key,
        }
    running = _start({"locks": url}, env)
    try:
        yield running, transport
    finally:
        running.close()


@pytest.fixture
def http_svc(
    request: pytest.FixtureRequest,
    served: tuple[dict[str, str], dict[str, str]],
    shared_services: SharedServices,
) -> Service:
    """For what only HTTP has: on memory and S3 (moto), shared by the module's tests on that
    store."""
    return shared_services.get(served_kind(request), lambda: _start(*served))


@pytest.fixture
def api(served_where: tuple[Service, str]) -> Iterator[Client]:
    running, transport = served_where
    with open_client(transport, running, prefix=f"t{uuid.uuid4().hex[:8]}-") as client:
        yield client


class Streams:
    """Every stream a test opens, closed at its end whatever happens."""

    def __init__(self) -> None:
        self.opened: list[Stream] = []

    def open(
        self, api: Client, resource: str, body: dict[str, Any] | None = None, **kw: Any
    ) -> Stream:
        stream = api.stream(resource, body, **kw)
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


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(4) as executor:
        yield executor


def lock(api: Client, resource: str, **body: Any) -> tuple[int, Any]:
    return api.lock(resource, **body)


def info(api: Client, resource: str) -> dict[str, Any]:
    status, body = api.info(resource)
    assert status == 200, body
    return dict(body)


def unlock(api: Client, resource: str, lock_id: str) -> tuple[int, Any]:
    return api.unlock(resource, lock_id)


# -- plain locks ---------------------------------------------------------------------------------


def test_lock_refuse_info_unlock(api: Client) -> None:
    status, first = lock(api, "job", owner="w1", ttl="10s")
    assert status == 200 and first["fence"] >= 1 and len(first["lockID"]) >= 32
    status, body = lock(api, "job", owner="w2", immediate=True)
    assert (status, body["errorCode"]) == (409, "ERR_RESOURCE_LOCKED")
    seen = info(api, "job")
    assert seen["owner"] == "w1" and seen["held"] and seen["lease_timeout"] == 10.0
    assert seen["resourceId"] == "job" and seen["path"] == "app1/job"
    assert "lockID" not in seen and first["lockID"] not in str(seen)
    status, body = unlock(api, "job", "not-" + first["lockID"])
    assert status == 404 and "job with that lockID" in body["message"], body
    assert unlock(api, "other", first["lockID"])[0] == 404  # a lock id is for its resource
    assert unlock(api, "job", first["lockID"]) == (204, None)
    status, body = unlock(api, "job", first["lockID"])
    assert (status, body["errorCode"]) == (404, "ERR_LOCK_NOT_FOUND")
    assert "already released" in body["message"], "the 404 says which: released, not wrong"
    status, second = lock(api, "job", owner="w2", immediate=True)
    assert status == 200 and second["fence"] > first["fence"]
    assert second["lockID"] != first["lockID"]


def test_renew_and_list(api: Client) -> None:
    _, held = lock(api, "a1", ttl=5)
    lock(api, "a2")
    lock(api, "b1")
    assert api.renew("a1", held["lockID"]) == (200, held)
    status, body = api.renew("a1", "nope")
    assert (status, body["errorCode"]) == (404, "ERR_LOCK_NOT_FOUND")
    status, rows = api.list("a")
    assert status == 200
    assert sorted(row["resourceId"] for row in rows) == ["a1", "a2"]
    assert all(row["state"] == "held" for row in rows)


def test_renew_keeps_the_ttl(http_svc: Service) -> None:
    """Over HTTP a renew may name the ttl; it must be the one the lock was taken with."""
    svc = http_svc
    _, held = svc.request("POST", f"{BASE}/a1", {"ttl": 5})
    status, body = svc.request("POST", f"{BASE}/a1/renew", {"lockID": held["lockID"], "ttl": "9s"})
    assert (status, body["errorCode"]) == (400, "ERR_MALFORMED_REQUEST")
    status, body = svc.request("POST", f"{BASE}/a1/renew", {"lockID": held["lockID"], "ttl": "5s"})
    assert (status, body) == (200, held)


def test_service_renews_plain_locks(api: Client) -> None:
    """A plain lock outlives its ttl: the service renews it until it is unlocked."""
    _, held = lock(api, "long", ttl="1s")
    first = info(api, "long")["renewed_at"]
    deadline = time.monotonic() + 10
    while info(api, "long")["renewed_at"] == first:
        assert time.monotonic() < deadline, "never renewed"
        time.sleep(0.1)
    time.sleep(1.5)  # longer than the ttl: it must still be ours
    status, body = lock(api, "long", immediate=True)
    assert status == 409, body
    assert api.renew("long", held["lockID"])[0] == 200


def test_blocking_lock_waits_for_the_holder(
    api: Client, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    _, first = lock(api, "q", owner="w1")
    waiting = pool.submit(lock, api, "q", owner="w2")
    time.sleep(0.3)  # a same-priority waiter writes nothing to wait on; it acquires either way
    assert not waiting.done()
    assert unlock(api, "q", first["lockID"])[0] == 204
    status, second = waiting.result(timeout=10)
    assert status == 200 and second["fence"] == first["fence"] + 1
    assert info(api, "q")["owner"] == "w2"
    status, body = lock(api, "q", owner="w3", timeout="300ms")
    assert (status, body["errorCode"]) == (409, "ERR_RESOURCE_LOCKED")
    assert "timeout" in body["message"]


def test_a_waiter_whose_client_left_takes_nothing(api: Client) -> None:
    """A blocking request whose client hangs up is withdrawn: it must not take (and keep
    renewing) a lock that nobody will ever unlock."""
    _, first = lock(api, "gone", owner="w1")
    api.hang_up_waiting("gone", owner="w2")
    time.sleep(0.3)  # the service notices the hang-up (nothing observable to wait on)
    assert unlock(api, "gone", first["lockID"])[0] == 204
    status, body = lock(api, "gone", owner="w3", timeout="5s")
    assert status == 200, body
    assert info(api, "gone")["owner"] == "w3"


# -- streams -------------------------------------------------------------------------------------


def test_stream_acquire_refuse_and_disconnect(
    streams: Streams, api: Client, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    stream = streams.open(api, "s", {"owner": "streamer"})
    assert stream.status == 200
    got = stream.event()
    assert got is not None and got["type"] == "lock-acquired" and got["fence"] >= 1
    assert stream.event(pings=True) == {"type": "ping"}  # pings while idle
    refused = streams.open(api, "s", {"immediate": True})
    assert refused.status == 409  # refused before any stream
    refused.close()
    waiting = pool.submit(lock, api, "s", owner="next")
    time.sleep(0.3)  # let the waiter reach its wait (it would only acquire later otherwise)
    started = time.monotonic()
    stream.close()  # the client goes: the lock is released
    status, body = waiting.result(timeout=10)
    assert status == 200 and body["fence"] == got["fence"] + 1
    assert time.monotonic() - started < 2.0  # woken by the release, not by a lease running out
    assert info(api, "s")["owner"] == "next"


def test_stream_is_ndjson_and_asked_by_query(memory_svc: Service) -> None:
    """An HTTP stream is NDJSON; ``?stream=true`` asks for one as the Accept header does (for
    clients that can't set headers)."""
    svc = memory_svc
    stream = LockStream(svc, "locks", "ndjson-" + uuid.uuid4().hex[:8])
    try:
        assert stream.response.getheader("Content-Type", "").startswith("application/x-ndjson")
    finally:
        stream.close()
    conn = http.client.HTTPConnection("127.0.0.1", svc.http_port, timeout=10)
    try:
        conn.request("POST", f"{BASE}/query-{uuid.uuid4().hex[:8]}?stream=true", body=b"{}")
        response = conn.getresponse()
        assert response.getheader("Content-Type", "").startswith("application/x-ndjson")
        assert json.loads(response.readline())["type"] == "lock-acquired"
    finally:
        conn.close()


def test_blocking_stream_pings_then_acquires(streams: Streams, api: Client) -> None:
    _, first = lock(api, "w", owner="w1")
    stream = streams.open(api, "w", {"owner": "w2"})
    assert stream.status == 200
    assert stream.event(pings=True) == {"type": "ping"}  # waiting, and saying so
    assert unlock(api, "w", first["lockID"])[0] == 204
    got = stream.event()
    assert got is not None and got["type"] == "lock-acquired"
    assert got["fence"] == first["fence"] + 1
    stream.close()


def test_blocking_stream_times_out(streams: Streams, api: Client) -> None:
    lock(api, "t", owner="w1")
    stream = streams.open(api, "t", {"owner": "w2", "timeout": "300ms"})
    event = stream.event()
    assert event is not None and (event["type"], event["error"]) == (
        "error",
        "ERR_RESOURCE_LOCKED",
    )


def test_preemption_then_handover_on_close(
    streams: Streams, api: Client, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    stream = streams.open(api, "p", {"owner": "low", "cleanupTimeout": "20s", "ttl": "3s"})
    acquired = stream.event()
    assert acquired is not None and acquired["type"] == "lock-acquired"
    high = pool.submit(lock, api, "p", owner="high", priority=7, waitingTimeout="25s")
    asked = stream.event()
    assert asked is not None and asked["type"] == "cleanup-requested"
    assert asked["requestor"]["owner"] == "high" and asked["requestor"]["priority"] == 7
    assert asked["secondsLeft"] > 1 and asked["deadline"].endswith("Z")
    assert not high.done()  # it waits for our cleanup
    stream.close()  # cleaned up: closing hands over
    status, body = high.result(timeout=10)
    assert status == 200 and body["fence"] == acquired["fence"] + 1
    seen = info(api, "p")
    assert (seen["owner"], seen["last_event"]) == ("high", "handover")


def test_forceful_takeover_tells_the_stream(streams: Streams, api: Client) -> None:
    stream = streams.open(api, "f", {"owner": "stubborn", "cleanupTimeout": "1s"})
    acquired = stream.event()
    assert acquired is not None
    status, body = lock(api, "f", owner="boss", priority=9, forceful=True, waitingTimeout="1s")
    assert status == 200 and body["fence"] > acquired["fence"]
    events = []
    while (event := stream.event()) is not None:
        events.append(event)
    assert events[0]["type"] == "cleanup-requested"
    assert events[-1] == {"type": "lost", "reason": "preempted"}  # and the stream ends
    assert info(api, "f")["last_event"] == "forceful_takeover"
    stream.close()


PAIRS = [("grpc", "http"), ("http", "grpc")]


@pytest.mark.parametrize(("holder", "requestor"), PAIRS, ids=["-to-".join(p) for p in PAIRS])
def test_one_lease_across_transports(
    streams: Streams,
    memory_svc: Service,
    holder: str,
    requestor: str,
    pool: concurrent.futures.ThreadPoolExecutor,
) -> None:
    """A stream held over one transport excludes, is asked to hand over by, and hands over to a
    requestor on the other; alpha1 is excluded too."""
    resource = "x-" + uuid.uuid4().hex[:8]
    with open_client(holder, memory_svc) as held_by, open_client(requestor, memory_svc) as asks:
        # ttl 3s: the holder reads the request at its next watch, a third of its ttl
        body = {"owner": "low", "cleanupTimeout": "20s", "ttl": "3s"}
        stream = streams.open(held_by, resource, body)
        acquired = stream.event()
        assert acquired is not None and acquired["type"] == "lock-acquired"
        status, refused = asks.lock(resource, immediate=True)
        assert (status, refused["errorCode"]) == (409, "ERR_RESOURCE_LOCKED")
        assert memory_svc.lock("locks", resource, "dapr-app", 30) is False
        high = pool.submit(asks.lock, resource, owner="high", priority=5, waitingTimeout="25s")
        asked = stream.event()
        assert asked is not None and asked["type"] == "cleanup-requested"
        assert asked["requestor"]["owner"] == "high"
        stream.close()
        status, body = high.result(timeout=10)
        assert status == 200 and body["fence"] == acquired["fence"] + 1
        assert held_by.info(resource)[1]["last_event"] == "handover"
        # one service, one set of lock ids: a lock taken over one transport unlocks over either
        assert held_by.unlock(resource, body["lockID"]) == (204, None)
        assert asks.unlock(resource, body["lockID"])[0] == 404


@pytest.fixture(scope="module")
def memory_svc() -> Iterator[Service]:
    running = _start({"locks": f"memory://{uuid.uuid4().hex}"}, {})
    try:
        yield running
    finally:
        running.close()


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
    url = f"{service.url}{BASE}/hot"
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
@pytest.mark.parametrize("served", ON_SERVERS, indirect=True)
def test_many_clients_one_holder_at_a_time(http_svc: Service) -> None:
    """Streams and plain locks mixed on one resource: never two holders, every fence once."""
    turns = sorted(asyncio.run(_contend(http_svc)), key=lambda turn: turn[2])
    assert len(turns) == CLIENTS * ROUNDS
    fences = [turn[2] for turn in turns]
    assert fences == list(range(fences[0], fences[0] + len(turns))), "each change of holder +1"
    for before, after in itertools.pairwise(turns):
        # The next holder heard of its lock only after the previous one let go.
        assert after[0] >= before[1], (before, after)


# -- operators -----------------------------------------------------------------------------------


def test_override_and_force_unlock_need_the_operator_token(streams: Streams, api: Client) -> None:
    stream = streams.open(api, "o", {"owner": "worker", "ttl": "3s"})
    acquired = stream.event()
    assert acquired is not None
    override = {"owner": "ops", "priority": 2147483647, "message": "incident 7"}
    status, body = lock(api, "o", **override)
    assert (status, body["errorCode"]) == (403, "ERR_FORBIDDEN")
    status, body = api.lock("o", operator="wrong", **override)
    assert status == 403
    status, body = api.lock("o", operator=OPERATOR, **override)
    assert status == 200 and body["fence"] > acquired["fence"]
    assert stream.event() == {"type": "lost", "reason": "overridden"}
    seen = info(api, "o")
    assert (seen["last_event"], seen["last_event_message"]) == ("override", "incident 7")

    status, body = api.force_unlock("o")
    assert (status, body["errorCode"]) == (403, "ERR_FORBIDDEN")
    status, body = api.force_unlock("o", operator=OPERATOR, message="stuck", by="alice")
    assert (status, body) == (200, {"forced": True})
    seen = info(api, "o")
    assert (seen["held"], seen["last_event"], seen["last_event_by"]) == (
        False,
        "force_unlock",
        "alice",
    )
    status, body = unlock(api, "o", "any")
    assert status == 404


def test_override_rpc(memory_svc: Service) -> None:
    """gRPC's Override is the emergency override, for operators only."""
    from prioritylock.server._proto import lock_pb2
    from tests.server.clients import GrpcClient

    with open_client("grpc", memory_svc) as client:
        assert isinstance(client, GrpcClient)
        resource = "ov-" + uuid.uuid4().hex[:8]
        assert client.lock(resource, owner="worker")[0] == 200
        request = lock_pb2.OverrideRequest(
            store_name="locks", resource_id=resource, message="incident 8", owner="ops"
        )
        with pytest.raises(grpc.RpcError) as refused:
            client.stub.Override(request, metadata=client.metadata())
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        got = client.stub.Override(request, metadata=client.metadata(OPERATOR))
        seen = client.info(resource)[1]
        assert (seen["owner"], seen["last_event"], seen["fence"]) == ("ops", "override", got.fence)


def test_plain_holder_learns_of_a_force_unlock(api: Client) -> None:
    _, held = lock(api, "g", owner="w1")
    status, _ = api.force_unlock("g", operator=OPERATOR)
    assert status == 200
    deadline = time.monotonic() + 15
    while True:  # the service notices at its next renewal
        status, body = api.renew("g", held["lockID"])
        if status == 404:
            assert "lost (forced)" in body["message"], body
            break
        assert status == 200 and time.monotonic() < deadline
        time.sleep(0.2)


# -- metrics -------------------------------------------------------------------------------------


def _counted(svc: Service, api: Client, name: str, **labels: str) -> float:
    request = urllib.request.Request(svc.url + "/metrics")
    with urllib.request.urlopen(request, timeout=10) as response:
        samples = parse(response.read().decode())
    return value(samples, name, store="locks", api=api.api, **labels)


@pytest.fixture
def fresh(request: pytest.FixtureRequest) -> Iterator[tuple[Service, Client]]:
    """A service of its own (its counts start at 0), and a client over ``request.param``."""
    running = _start({"locks": f"memory://{uuid.uuid4().hex}"}, {})
    try:
        with open_client(request.param, running) as client:
            yield running, client
    finally:
        running.close()


@pytest.mark.parametrize("fresh", TRANSPORTS, indirect=True)
def test_metrics_of_the_full_api(
    streams: Streams, fresh: tuple[Service, Client], pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    svc, api = fresh

    def counted(name: str, **labels: str) -> float:
        return _counted(svc, api, name, **labels)

    _, plain = lock(api, "m1")
    assert lock(api, "m1", immediate=True)[0] == 409
    assert counted("prioritylock_locks_held") == 1
    assert unlock(api, "m1", plain["lockID"])[0] == 204
    # a stream that cooperates: asked, closes, hands over (a release, not a loss)
    stream = streams.open(api, "m2", {"cleanupTimeout": "20s", "ttl": "3s"})
    assert (stream.event() or {}).get("type") == "lock-acquired"
    high = pool.submit(lock, api, "m2", owner="high", priority=3, waitingTimeout="25s")
    assert (stream.event() or {}).get("type") == "cleanup-requested"
    stream.close()
    _, taker = high.result(timeout=10)
    # a stream that does not: taken forcefully, a loss
    stubborn = streams.open(api, "m3", {"cleanupTimeout": "1s"})
    assert (stubborn.event() or {}).get("type") == "lock-acquired"
    status, _ = lock(api, "m3", priority=9, forceful=True, waitingTimeout="1s")
    assert status == 200
    while (event := stubborn.event()) is not None and event["type"] != "lost":
        pass
    assert counted("prioritylock_acquires_total", outcome="acquired") == 5
    assert counted("prioritylock_acquires_total", outcome="refused") == 1
    assert counted("prioritylock_preemptions_total") == 2
    assert counted("prioritylock_losses_total", reason="preempted") == 1
    assert counted("prioritylock_releases_total") == 2  # m1, and m2 handed over
    assert counted("prioritylock_locks_held") == 2  # m2 by high, m3 by the forceful one
    assert unlock(api, "m2", taker["lockID"])[0] == 204
    assert counted("prioritylock_locks_held") == 1


# -- shutdown ------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sigterm_releases_stream_locks_only(
    streams: Streams, tmp_path: Path, transport: str
) -> None:
    stores = {"locks": (tmp_path / "store").as_uri()}
    first = _start(stores, {})
    try:
        with open_client(transport, first) as api:
            stream = streams.open(api, "streamed", {"owner": "s"})
            assert (stream.event() or {}).get("type") == "lock-acquired"
            assert lock(api, "plain", owner="p", ttl="30s")[0] == 200
            assert first.lock("locks", "dapr", "d", 30) is True
            code, out = first.stop()
            assert code == 0, out
            assert stream.event() == {"type": "lost", "reason": "service-stopping"}
            assert stream.event() is None
    finally:
        first.close()
    second = _start(stores, {})
    try:
        with open_client(transport, second) as api:
            status, body = lock(api, "streamed", immediate=True)
            assert status == 200, body  # released at shutdown
            assert lock(api, "plain", immediate=True)[0] == 409  # runs out its ttl
            assert second.lock("locks", "dapr", "other", 30) is False  # alpha1: the same
            assert info(api, "streamed")["last_event"] == "acquired"
    finally:
        second.close()


# -- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "ERR_MALFORMED_REQUEST"),
        (b"[1, 2]", 400, "ERR_MALFORMED_REQUEST"),
        ({"ttl": "30x"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"waitingTimeout": True}, 400, "ERR_MALFORMED_REQUEST"),
        ({"priority": "high"}, 400, "ERR_MALFORMED_REQUEST"),
        ({"immediate": "yes"}, 400, "ERR_MALFORMED_REQUEST"),
        (b"{" + b" " * 70_000 + b"}", 413, "ERR_REQUEST_TOO_LARGE"),
    ],
)
def test_bad_json_requests(bad_svc: Service, body: Any, status: int, code: str) -> None:
    got, answer = bad_svc.request("POST", f"{BASE}/r", body)
    assert (got, answer["errorCode"]) == (status, code), answer
    _still_serving(bad_svc, "http")


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    "body",
    [
        {"ttl": "-5s"},
        {"ttl": "0.5s"},
        {"ttl": "48h"},
        {"waitingTimeout": "-1s"},
        {"priority": -1},
        {"owner": "x" * 300},
    ],
)
def test_bad_lock_requests(bad_svc: Service, transport: str, body: dict[str, Any]) -> None:
    with open_client(transport, bad_svc) as api:
        got, answer = api.lock("r", **body)
        assert (got, answer["errorCode"]) == (400, "ERR_MALFORMED_REQUEST"), answer
        stream = api.stream("r", body)
        try:
            if stream.status == 200:  # HTTP: some are found once the stream has begun
                event = stream.event()
                assert event is not None and event["error"] == "ERR_MALFORMED_REQUEST", event
            else:
                assert stream.status == 400
        finally:
            stream.close()
    _still_serving(bad_svc, transport)


def _still_serving(svc: Service, transport: str) -> None:
    assert svc.request("GET", "/v1.0/healthz")[0] == 204
    with open_client(transport, svc) as api:
        status_ok, held = lock(api, "fine", immediate=True)
        assert status_ok == 200
        assert unlock(api, "fine", held["lockID"])[0] == 204


@pytest.fixture(scope="module")
def bad_svc() -> Iterator[Service]:
    """One memory-store service for every bad request (they must not disturb it)."""
    running = _start({"locks": "memory://bad"}, {})
    try:
        yield running
    finally:
        running.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_unknown_store_token_and_durations(transport: str) -> None:
    running = Service({"locks": "memory://t"}, token="app-token", args=["--ping-interval", "1"])
    try:
        with open_client(transport, running, store="nope") as nowhere:
            status, body = nowhere.lock("r")
            assert (status, body["errorCode"]) == (400, "ERR_LOCK_STORE_NOT_FOUND")
        with open_client(transport, running) as api:
            api.token = "wrong"
            status, body = api.lock("r")
            assert (status, body["errorCode"]) == (401, "ERR_UNAUTHORIZED")
            assert api.info("r")[0] == 401
            api.token = "app-token"
            status, body = api.lock("r", ttl="1m30s")
            assert status == 200
            assert info(api, "r")["lease_timeout"] == 90.0
            status, body = api.lock("r2", ttl=2.5)
            assert status == 200 and info(api, "r2")["lease_timeout"] == 2.5
    finally:
        running.close()
