"""examples/serve_stream.mjs, a Node.js client of the NDJSON lock stream, run as a user runs it:
it holds the lock, is asked to hand over by a higher priority, cleans up and hangs up."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.helpers import Service

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "serve_stream.mjs"

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js (as Azurite does)"),
]


@pytest.fixture
def service() -> Iterator[Service]:
    running = Service({"lockstore": f"memory://{uuid.uuid4().hex}"}, token="app-secret")
    try:
        yield running
    finally:
        running.close()


def test_node_worker_hands_over_when_asked(service: Service) -> None:
    env = {
        **os.environ,
        "PRIORITYLOCK_HTTP": service.url,
        "LOCK_RESOURCE": "report",
        "DAPR_API_TOKEN": "app-secret",
    }
    node = subprocess.Popen(
        ["node", str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert node.stdout is not None and node.stderr is not None
        first = node.stdout.readline()
        assert first == "acquired report with fence 1\n", first + node.stderr.read()
        status, body = service.request(
            "POST",
            "/v1.0-alpha2/lock/lockstore/report",
            {"owner": "urgent", "priority": 5, "waitingTimeout": "20s"},
            timeout=30,
        )
        assert (status, body["fence"]) == (200, 2), body
        out, err = node.communicate(timeout=20)
    finally:
        if node.poll() is None:
            node.kill()
            node.communicate()
    assert node.returncode == 0, out + err
    lines = out.splitlines()
    assert lines[0].startswith("asked to hand over by urgent (priority 5); cleaning up within ")
    assert lines[1] == "stream closed: the lock is handed over or released"
    status, seen = service.request("GET", "/v1.0-alpha2/lock/lockstore/report")
    assert (seen["owner"], seen["last_event"], seen["fence"]) == ("urgent", "handover", 2)
