"""Two apps of one ``prioritylock serve``: a request reaches the holder's NDJSON stream at once
(the service's locks share the process's in-process notices), not at the holder's next watch
read (10 s with a 20 s cleanup window), on the memory store and a local directory."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.helpers import LockStream, Service

pytestmark = pytest.mark.timeout(60)

#: Request -> holder's stream told, measured by the client: an HTTP request in, an event out.
TOLD_WITHIN = 0.200


@pytest.fixture(params=["memory", "local"])
def sidecar(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Service]:
    if request.param == "memory":
        url = f"memory://{uuid.uuid4().hex}"
    else:
        url = (tmp_path / "store").as_uri()
    running = Service({"locks": url})
    try:
        yield running
    finally:
        running.close()


def test_a_request_reaches_the_holding_app_at_once(sidecar: Service) -> None:
    resource = "push-" + uuid.uuid4().hex[:8]
    holder = LockStream(
        sidecar, "locks", resource, {"owner": "batch", "ttl": "60s", "cleanupTimeout": "20s"}
    )
    try:
        acquired = holder.event()
        assert acquired is not None and acquired["type"] == "lock-acquired", acquired
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            started = time.monotonic()
            urgent = pool.submit(
                sidecar.request,
                "POST",
                f"/v1.0-alpha2/lock/locks/{resource}",
                {"owner": "urgent", "priority": 9, "waitingTimeout": "25s"},
                timeout=30,
            )
            asked = holder.event()
            told = time.monotonic() - started
            assert asked is not None and asked["type"] == "cleanup-requested", asked
            assert told < TOLD_WITHIN, f"the holding app was told after {told * 1000:.0f} ms"
            assert asked["requestor"]["owner"] == "urgent"
            holder.close()  # cleaned up: closing hands over
            status, body = urgent.result(timeout=20)
        assert status == 200 and body["fence"] == acquired["fence"] + 1, body
    finally:
        holder.close()
