"""The service's benchmarks run and check what they measure: ``run.py --sections serve`` (a
TryLock + Unlock round trip through ``prioritylock serve``) and ``serve_scale.py`` (many lock
streams held through one service), each at a tiny size on the memory store.

Their figures are not asserted (they depend on the machine); what is: every variant produced
samples and the service's CPU, and a lock that is not held to the end fails the script.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
pytest.importorskip("dapr")

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
#: The service's clients the serve section times (alpha1, then the full API).
CLIENTS = ("http", "grpc", "sdk", "http-full", "grpc-full", "grpc-stream")


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-B", str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
        cwd=ROOT,
    )


@pytest.mark.timeout(120)
def test_serve_section_times_every_client(tmp_path: Path) -> None:
    out = tmp_path / "serve.json"
    done = _run(
        "run.py", "--quick", "--sections", "serve", "--stores", "memory", "--json", str(out)
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["variant"]: r for r in json.loads(out.read_text())["sections"]["serve"]["rows"]}
    assert sorted(rows) == sorted(
        f"memory/{v}" for v in (*CLIENTS, "in-process-fresh", "in-process-same")
    )
    for name in CLIENTS:
        row = rows[f"memory/{name}"]
        assert row["n"] > 0 and row["median"] > 0
        assert row["service_cpu_us_per_cycle"] is not None
    assert rows["memory/in-process-fresh"]["ratio"] == 1.0
    assert "Task was destroyed" not in done.stderr


_STREAMS = ["--holders", "20", "--idle", "0.2", "--ttl", "3"]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_serve_scale_streams_hold_with_renewals_on_time(tmp_path: Path, transport: str) -> None:
    """20 streams of a 3 s ttl (renewed every second) for 3 s, pinged every 0.5 s: NDJSON
    streams on a socket each, or gRPC calls on one channel."""
    out = tmp_path / "streams.json"
    args = [*_STREAMS, "--seconds", "3", "--ping-interval", "0.5", "--transport", transport]
    done = _run("serve_scale.py", *args, "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all 20 still held at the end" in done.stdout
    result = json.loads(out.read_text())
    assert result["transport"] == transport
    streams = result["streams"]
    # Every stream pinged about every 0.5 s of the window (20 x 6; half, for a loaded machine).
    assert streams["pings"] >= 60
    assert streams["ping_late_ms"]["max"] is not None
    # Every lock was read back during the window, and renewed within its interval + 1 s.
    assert streams["sampled_locks"] == 20 and streams["lease_reads"] >= 20
    assert streams["renewed_age_ms"]["max"] < 2000
    assert streams["renewed_age_at_end_ms"]["max"] < 2000
    assert streams["time_left_min_s"] > 0
    # Reads less than a renewal apart saw single renewals, each late by the scheduler's grid.
    assert streams["renewals_seen"] > 0 and streams["renewal_late_ms"]["max"] < 1000
    assert streams["stale"] == 0 and streams["streams_in_trouble"] == 0


@pytest.mark.timeout(120)
def test_serve_scale_streams_fail_on_a_late_renewal(tmp_path: Path) -> None:
    """Allowing renewals 0.9 s less than their 1 s interval, the leases read stale: exit 1,
    and the figures are still written."""
    out = tmp_path / "streams.json"
    args = [*_STREAMS, "--seconds", "2", "--slack", "-0.9", "--json", str(out)]
    done = _run("serve_scale.py", *args)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "stale lease readings (renewal interval 1 s + -0.9 s slack)" in done.stderr
    result = json.loads(out.read_text())
    assert result["streams"]["stale"] > 0
    assert "stale lease readings" in result["failed"]
