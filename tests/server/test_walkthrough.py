"""The service's examples run as a user runs them and print the answers they promise:
examples/serve_curl.sh (which starts its own service) and examples/dapr_client.py (a Dapr SDK
app, run beside a service started here)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.server.helpers import Service
from tests.test_examples import SERVICE_CLIENTS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPT = EXAMPLES / "serve_curl.sh"


@pytest.mark.timeout(60)
@pytest.mark.skipif(shutil.which("curl") is None, reason="the walkthrough needs curl")
@pytest.mark.parametrize("store", ["default", "file"])
def test_curl_walkthrough(store: str, tmp_path: Path) -> None:
    args = [] if store == "default" else [(tmp_path / "locks").as_uri()]
    done = subprocess.run(
        ["bash", str(SCRIPT), *args],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    answers = [line.rsplit(" -> ", 1)[1] for line in done.stdout.splitlines()]
    assert answers[:5] == [
        '{"success": true}',
        '{"success": false}',
        '{"status": 2}',
        '{"status": 0}',
        '{"success": true}',
    ]
    assert '"errorCode": "ERR_MALFORMED_REQUEST"' in answers[5]
    assert '"lockID": ' in answers[6] and '"fence": 1' in answers[6]
    assert '"errorCode": "ERR_RESOURCE_LOCKED"' in answers[7]
    assert answers[8:10] == ["worker-a", "204"]
    assert '"errorCode": "ERR_LOCK_NOT_FOUND"' in answers[10]


#: What examples/dapr_client.py prints, line by line (after its first line, which names the port).
DAPR_CLIENT_LINES = [
    "worker-a try_lock -> True",
    "worker-b try_lock while worker-a holds it -> False",
    "worker-b unlock -> lock_belongs_to_others",
    "worker-b try_lock after worker-a's block -> True",
    "worker-b unlock -> success",
    "worker-b unlock again -> lock_does_not_exist",
]


def test_service_clients_are_run_here() -> None:
    # Each one run by a test: dapr_client.py below, grpc_client.py in tests/client/.
    assert sorted(SERVICE_CLIENTS) == ["dapr_client.py", "grpc_client.py"]
    assert all((EXAMPLES / name).is_file() for name in SERVICE_CLIENTS)


@pytest.mark.timeout(60)
def test_dapr_sdk_example(service: Service) -> None:
    """The Dapr SDK app runs unchanged against the service (memory and S3), finding it through
    the SDK's own environment variables, with warnings as errors."""
    env = {
        **os.environ,
        "DAPR_RUNTIME_HOST": "127.0.0.1",
        "DAPR_HTTP_PORT": str(service.http_port),
        "DAPR_GRPC_PORT": str(service.grpc_port),
        "DAPR_HEALTH_TIMEOUT": "10",
    }
    done = subprocess.run(
        [sys.executable, "-W", "error", str(EXAMPLES / "dapr_client.py"), "locks"],
        env=env,
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == f"sidecar: gRPC port {service.grpc_port}, lock store 'locks'"
    assert lines[1:] == DAPR_CLIENT_LINES
    # The with-block's unlock reached the service: the lock is free now.
    assert service.lock("locks", "order-1", "someone-else") is True
