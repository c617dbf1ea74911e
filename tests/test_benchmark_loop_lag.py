"""``benchmarks/loop_lag.py`` runs every variant and checks what it measures, at a tiny size on
its own moto server.

Its figures are not asserted (they depend on the machine); what is: every variant probed the
loop in every window and sent the traffic it stands for (the lock variants renewed every lease
once an interval; the raw variants at the paced rate).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import selected_kinds

pytest.importorskip("moto")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "loop_lag.py"
LEASES, INTERVAL, WINDOWS, WINDOW = 20, 1.0, 1, 1.0


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.timeout(180)
@pytest.mark.skipif(not selected_kinds(["s3-moto"]), reason="moto not selected")
def test_every_variant_probes_the_loop_under_its_traffic(tmp_path: Path) -> None:
    out = tmp_path / "lag.json"
    # The library's lease variants both ways, and the raw traffic sent from another process.
    variants = ["native", "pool32", "idle"]
    args = ["--rounds", "1", "--leases", str(LEASES), "--interval", str(INTERVAL)]
    args += ["--windows", str(WINDOWS), "--window", str(WINDOW), "--variants", ",".join(variants)]
    done = subprocess.run(
        [sys.executable, "-B", str(SCRIPT), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(out.read_text())["results"]
    assert sorted(results) == sorted(variants)
    rate = LEASES / INTERVAL
    for variant, runs in results.items():
        (run,) = runs
        assert len(run["windows"]) == WINDOWS, variant
        for window in run["windows"]:
            # A 5 ms probe wakes up about 200 times a second unless the loop is stuck.
            assert window["wakeups"] > 0.5 * WINDOW / 0.005, (variant, window)
            assert 0 <= window["p50_ms"] <= window["p99_ms"] <= window["max_ms"]
        assert run["best_max_ms"] == min(w["max_ms"] for w in run["windows"])
        assert 0.7 * rate <= run["requests_per_s"] <= 1.3 * rate, (variant, run)
        if variant.startswith(("pool", "sleepy")):
            # The lock variants count every kind of request they sent (renewals are replaces).
            assert run["store_requests"]["replaces"] >= run["requests"] > 0
            assert run["store_requests"]["creates"] == 0  # the windows open once all are held
        if variant in ("pool32", "sleepy", "sleepy-nogc"):
            assert run["pool_threads"] == 32
        if variant == "pool8":
            assert run["pool_threads"] == 8
