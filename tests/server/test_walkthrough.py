"""examples/serve_curl.sh runs as a user runs it and prints the answers it promises."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "serve_curl.sh"


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
