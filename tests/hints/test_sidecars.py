"""Two ``prioritylock serve`` sharing a bucket (moto), one listening for hints on 127.0.0.2 and
the other on 127.0.0.3: an app's request on one reaches the holding app of the other at hint
speed, over NDJSON and gRPC, and a force unlock reaches it as ``lost``.

Timed as the library's tests time it (``test_hosts``), from when the write landed (the asking
service reaches moto through a relay that notes when each PUT's answer came back), plus one
local hop: the holding service's stream to its app. From the app's call it is more by the
asking service's read of the lease and the window rule's gap (``EARLY_HINT_GAP``) before its
write, as for a library requestor."""

from __future__ import annotations

import concurrent.futures
import socket
import time
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests._servers.s3 import S3Server, needs_moto
from tests.hints.test_hosts import AT_ONCE
from tests.server.clients import GrpcClient, HttpClient
from tests.server.helpers import Service
from tools import sdk
from tools.netns import relay

pytest.importorskip("aiohttp")
pytestmark = [pytest.mark.timeout(90), pytest.mark.serial, needs_moto]

#: From the asking service's write landing to the holding app's event: the library's bound,
#: and one local hop.
TOLD_WITHIN = AT_ONCE + 0.010
OPERATOR = "operator-secret"


#: When each PUT of the second service (the asking one) came back.
LANDED: list[int] = []


@pytest.fixture(scope="module")
def sidecars(moto_server: S3Server) -> Iterator[tuple[Service, Service]]:
    bucket = moto_server.create_bucket()
    url = sdk.store_url("s3-moto", moto_server.endpoint_url, bucket, "locks")
    moto = urlsplit(moto_server.endpoint_url)
    assert moto.hostname is not None and moto.port is not None
    opened: list[socket.socket] = []
    port = relay(("127.0.0.1", 0), (moto.hostname, moto.port), opened, LANDED)
    relayed = sdk.store_url("s3-moto", f"http://127.0.0.1:{port}", bucket, "locks")
    env = {
        "AWS_ACCESS_KEY_ID": moto_server.access_key_id,
        "AWS_SECRET_ACCESS_KEY": moto_server.secret_access_key,
        "PRIORITYLOCK_OPERATOR_TOKEN": OPERATOR,
    }
    one = Service({"locks": url}, env=env, args=["--hint-address", "127.0.0.2"])
    try:
        two = Service({"locks": relayed}, env={**env, "PRIORITYLOCK_HINTS": "127.0.0.3"})
        try:
            yield one, two
        finally:
            two.close()
    finally:
        one.close()
        for sock in opened:
            sock.close()
        moto_server.remove_bucket(bucket)


def _since_landed(started: int, at: int) -> float:
    """Seconds from the asking service's first write after ``started`` to ``at`` (ns)."""
    landed = next(t for t in LANDED if t > started)
    return (at - landed) / 1e9


@pytest.mark.parametrize("transport", ["ndjson", "grpc"])
def test_a_request_through_one_sidecar_reaches_the_other_sidecars_app_at_once(
    sidecars: tuple[Service, Service], transport: str
) -> None:
    one, two = sidecars
    client = HttpClient if transport == "ndjson" else GrpcClient
    holding, asking = client(one), client(two)
    resource = "hint-" + uuid.uuid4().hex[:8]
    # A 60 s ttl: the holder's watch read comes every 5 s (its default); a hint comes at once.
    assert asking.info(resource)[0] in (200, 404)  # its store client made (a first call's cost)
    holder = holding.stream(resource, {"owner": "batch", "ttl": "60s", "cleanupTimeout": "20s"})
    try:
        acquired = holder.event()
        assert acquired is not None and acquired["type"] == "lock-acquired", acquired
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic_ns()
            urgent = pool.submit(
                asking.lock, resource, owner="urgent", priority=9, waitingTimeout="25s"
            )
            asked = holder.event()
            told_ns = time.monotonic_ns()
            assert asked is not None and asked["type"] == "cleanup-requested", asked
            told = _since_landed(started, told_ns)
            asked_ms = (told_ns - started) / 1e6
            print(f"{transport}: the other sidecar's app was told {told * 1000:.1f} ms after "
                  f"the request landed, {asked_ms:.1f} ms after the app asked")  # fmt: skip
            assert told < TOLD_WITHIN
            assert asked["secondsLeft"] > 19.0, "its whole window (the early hint)"
            holder.close()  # cleaned up: closing hands over
            status, body = urgent.result(timeout=30)
        assert status == 200 and body["fence"] == acquired["fence"] + 1, body
        # A holder on the first sidecar hears a force unlock through the second at once.
        other = holding.stream(resource + "-forced", {"owner": "batch", "ttl": "60s"})
        try:
            again = other.event()
            assert again is not None and again["type"] == "lock-acquired", again
            started = time.monotonic_ns()
            forced = asking.force_unlock(
                resource + "-forced", operator=OPERATOR, message="hint test"
            )
            assert forced[0] == 200, forced
            lost = other.event()
            took = _since_landed(started, time.monotonic_ns())
            assert lost is not None and lost["type"] == "lost", lost
            print(f"{transport}: lost {took * 1000:.1f} ms after the force unlock landed")
            assert took < TOLD_WITHIN
        finally:
            other.close()
    finally:
        holder.close()
        asking.close()
        holding.close()
