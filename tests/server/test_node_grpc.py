"""examples/grpc_stream.mjs, a Node.js client of the gRPC LockService made at run time from the
proto with @grpc/grpc-js and @grpc/proto-loader (installed from npm for the test session): it
holds the lock as a stream, is asked to hand over by a higher priority and does, waits for the
lock again, and reads ``lost`` when an operator forces it out."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.clients import GrpcClient
from tests.server.helpers import Service

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "grpc_stream.mjs"
PACKAGES = ("@grpc/grpc-js@1.14.7", "@grpc/proto-loader@0.8.1")
OPERATOR = "op-" + uuid.uuid4().hex

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("npm") is None, reason="needs Node.js and npm"),
]


@pytest.fixture(scope="session")
def node_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the npm packages and the example (ES modules resolve packages from the
    script's own directory)."""
    where = tmp_path_factory.mktemp("node-grpc")
    subprocess.run(
        ["npm", "install", "--no-save", "--no-audit", "--no-fund", "--loglevel=error", *PACKAGES],
        cwd=where,
        check=True,
        capture_output=True,
        timeout=110,
    )
    shutil.copy(SCRIPT, where / SCRIPT.name)
    return where


@pytest.fixture
def service() -> Iterator[Service]:
    running = Service(
        {"lockstore": f"memory://{uuid.uuid4().hex}"},
        token="app-secret",
        env={"PRIORITYLOCK_OPERATOR_TOKEN": OPERATOR},
        args=["--ping-interval", "1"],
    )
    try:
        yield running
    finally:
        running.close()


def test_node_worker_hands_over_then_is_forced_out(node_dir: Path, service: Service) -> None:
    env = {
        **os.environ,
        "PRIORITYLOCK_GRPC": f"127.0.0.1:{service.grpc_port}",
        "PRIORITYLOCK_PROTO": str(ROOT / "proto" / "prioritylock" / "v1" / "lock.proto"),
        "LOCK_RESOURCE": "report",
        "DAPR_API_TOKEN": "app-secret",
    }
    node = subprocess.Popen(
        ["node", str(node_dir / SCRIPT.name)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    client = GrpcClient(service, "lockstore")
    try:
        assert node.stdout is not None and node.stderr is not None
        first = node.stdout.readline()
        assert first == "acquired report with fence 1\n", first + node.stderr.read()
        status, taken = client.lock("report", owner="urgent", priority=5, waitingTimeout="20s")
        assert (status, taken["fence"]) == (200, 2), taken
        asked = node.stdout.readline()
        assert asked.startswith("asked to hand over by urgent (priority 5); cleaning up within ")
        assert node.stdout.readline() == "stream closed: handed-over\n"
        # the worker asks again and waits; it gets the lock when the urgent one is done
        assert client.unlock("report", taken["lockID"]) == (204, None)
        assert node.stdout.readline() == "acquired again report with fence 3\n"
        status, body = client.force_unlock("report", operator=OPERATOR, message="stuck")
        assert (status, body) == (200, {"forced": True})
        out, err = node.communicate(timeout=20)
    finally:
        client.close()
        if node.poll() is None:
            node.kill()
            node.communicate()
    assert node.returncode == 0, out + err
    assert out.splitlines() == ["lost the lock: forced", "stream closed: forced"]
