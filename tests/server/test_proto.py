"""The gRPC contract: proto/prioritylock/v1/lock.proto compiles on its own, and the committed
messages and stubs (prioritylock/v1, public) are what scripts/gen-proto makes of it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("grpc_tools")

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ROOT / "prioritylock" / "v1"

pytestmark = pytest.mark.timeout(60)


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run([str(ROOT / "scripts" / "gen-proto"), str(tmp_path)], check=True, env=env)
    for name in ("lock_pb2.py", "lock_pb2.pyi", "lock_pb2_grpc.py"):
        fresh = (tmp_path / name).read_text()
        assert (GENERATED / name).read_text() == fresh, (
            f"prioritylock/v1/{name} is stale: run scripts/gen-proto and commit"
        )


def test_the_contract_names() -> None:
    from prioritylock.v1 import lock_pb2

    service = lock_pb2.DESCRIPTOR.services_by_name["LockService"]
    assert lock_pb2.DESCRIPTOR.package == "prioritylock.v1"
    assert {method.name for method in service.methods} >= {
        "Lock", "Acquire", "Renew", "Unlock", "ForceUnlock", "Info", "List", "Override",
    }  # fmt: skip
    assert service.methods_by_name["Lock"].server_streaming
    assert [dep.name for dep in lock_pb2.DESCRIPTOR.dependencies] == [
        "google/protobuf/duration.proto",
        "google/protobuf/struct.proto",
        "google/protobuf/timestamp.proto",
    ]
    request = lock_pb2.LockRequest.DESCRIPTOR.fields_by_name
    assert [(request[n].number) for n in ("immediate", "resource_id", "ttl")] == [1, 2, 3]
    events = lock_pb2.LockServerStream.DESCRIPTOR.oneofs_by_name["lock_server_stream"]
    assert [(field.name, field.number) for field in events.fields] == [
        ("ping", 1),
        ("lock_acquired", 2),
        ("cleanup_requested", 3),
        ("lost", 4),
        ("request_withdrawn", 5),
    ]
