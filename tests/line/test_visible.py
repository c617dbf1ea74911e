"""The line where operators look: ``LockInfo.waiters``, ``prioritylock info``/``list``/
``watch``, the service's lock info over HTTP and gRPC, and its ``prioritylock_line_length``
metric; and blocking requests through the service taking the lock in line order."""

from __future__ import annotations

import json
import threading
import urllib.request
from pathlib import Path

import pytest

from prioritylock import LockInfo, Waiter
from prioritylock.cli._inspect import Observation, changes
from prioritylock.cli._main import main
from prioritylock.stores import LocalStore
from prioritylock.v1 import lock_pb2
from tests.line.test_order import builder, lined, until, waiting
from tests.server.clients import GrpcClient, HttpClient
from tests.server.helpers import Service


@pytest.mark.timeout(30)
def test_info_and_list_print_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store = LocalStore(tmp_path)
    holder = builder(store, "holder", priority=5).build()  # above both: nobody preempts
    holder.lock()
    order: list[str] = []
    threads = [waiting(builder(store, "first", priority=2).build(), order)]
    lined(store, 1)
    threads.append(waiting(builder(store, "second").build(), order))
    lined(store, 2)
    url = f"file://{tmp_path}"
    assert main(["info", url, "jobs/line"]) == 0
    text = capsys.readouterr().out
    assert "waiting     1. first, priority 2, since " in text
    assert "            2. second, priority 0, since " in text
    assert main(["info", "--json", url, "jobs/line"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert [(w["owner"], w["priority"]) for w in record["waiters"]] == [("first", 2), ("second", 0)]
    assert main(["list", url]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:6] == ["v1/path/jobs/line", "held", "1", "5", "2", "holder"]
    holder.unlock()
    for t in threads:
        t.join(30)
    assert order == ["first", "second"]


def test_watch_prints_joins_and_leaves() -> None:
    def seen(*waiters: str, owner: str = "holder") -> Observation:
        line = tuple(Waiter(w, 0, 1.0e9 + ord(w[0])) for w in waiters)
        return Observation(LockInfo("k", 1, True, owner=owner, waiters=line))

    assert changes(seen(), seen("a")) == [("joined", "a (priority 0), 1 of 1")]
    assert changes(seen("a"), seen("a", "b")) == [("joined", "b (priority 0), 2 of 2")]
    assert changes(seen("a", "b"), seen("b")) == [("left", "a left the line, 1 waiting")]
    # The waiter that takes the lock leaves the line as its new holder: shown as acquired.
    took = changes(seen("a", "b"), Observation(LockInfo("k", 2, True, owner="a", waiters=())))
    assert [c for c, _ in took] == ["acquired", "left"]
    assert "b left the line" in took[1][1]


def _metrics(service: Service) -> str:
    with urllib.request.urlopen(service.url + "/metrics", timeout=10) as response:
        return str(response.read().decode())


@pytest.mark.timeout(90)
def test_blocking_requests_through_the_service_take_it_in_line_order(tmp_path: Path) -> None:
    """Five blocking requests (HTTP and gRPC) and a blocking stream joining 100 ms apart are
    served in that order; the service's lock info shows the line over both, and the metric
    counts it."""
    with Service({"locks": f"file://{tmp_path}"}) as service:
        http, grpc_client = HttpClient(service), GrpcClient(service)
        try:
            status, first = http.lock("job", owner="holder")
            assert status == 200, first
            order: list[str] = []
            fences: list[int] = []
            threads = []
            for i in range(5):
                client = http if i % 2 == 0 else grpc_client

                def ask(client: HttpClient | GrpcClient = client, owner: str = f"w{i}") -> None:
                    status, got = client.lock("job", owner=owner, timeout="30s")
                    assert status == 200, got
                    order.append(owner)
                    fences.append(got["fence"])
                    client.unlock("job", got["lockID"])

                threads.append(threading.Thread(target=ask))
                threads[-1].start()
                until(lambda n=i + 1: len(http.info("job")[1]["waiters"]) == n)  # type: ignore[misc]
            stream = http.stream("job", {"owner": "w5"})
            until(lambda: len(http.info("job")[1]["waiters"]) == 6)
            owners = [f"w{i}" for i in range(6)]
            assert [w["owner"] for w in http.info("job")[1]["waiters"]] == owners
            got = grpc_client.stub.Info(
                lock_pb2.InfoRequest(store_name="locks", resource_id="job"),
                metadata=grpc_client.metadata(),
                timeout=10,
            )
            assert [w.owner for w in got.waiters] == owners
            assert all(w.since.seconds > 0 for w in got.waiters)
            http.unlock("job", first["lockID"])
            for t in threads:
                t.join(30)
            assert order == owners[:5]
            event = stream.event()  # the stream, last in line, is served last
            assert event is not None and event["type"] == "lock-acquired", event
            assert event["fence"] == max(fences) + 1
            stream.close()
            text = _metrics(service)
            counts = [
                line
                for line in text.splitlines()
                if line.startswith("prioritylock_line_length_count")
            ]
            assert sum(float(line.split()[-1]) for line in counts) == 7
        finally:
            grpc_client.close()
