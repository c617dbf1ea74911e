"""Every script in examples/ runs, as a user would run it, and prints what it promises.

Each example runs in its own interpreter (``sys.executable``, warnings as errors): with no
argument (its own temporary directory), and with a store URL as its first argument (a fresh
directory under pytest's ``tmp_path``, and a process-local memory store).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))

#: One line (or part of one) each example must print: the point it makes.
KEY_LINES = {
    "basic_lock.py": "worker-2 holds the lock with fencing token 2 (one more)",
    "scoped_builder.py": "observer sees: held=True by 'migrator@host-3'",
    "preemption.py": "urgent try_lock() -> True, fence 1 -> 2",
    "fencing_guard.py": "old holder's write refused: the report carries a token above 1",
    "emergency_override.py": "message 'INC-1234: migration is locking orders, stopping it'",
}

#: More lines that must appear, where one line is not the whole point.
MORE_LINES = {
    "preemption.py": [
        "signal to batch's lock: cleanup_requested (by 'urgent')",
        "signal to batch's lock: lock_lost (reason 'preempted')",
        "batch: rolling back 3 uncommitted steps",
    ],
    "fencing_guard.py": ["new holder writes the final report: True"],
    "emergency_override.py": [
        "last event 'override' by 'oncall-alice', fence 2",
        "migration-42 told: lock lost (overridden)",
    ],
}


def test_every_example_has_a_key_line() -> None:
    assert SCRIPTS, f"no examples found in {EXAMPLES}"
    assert sorted(p.name for p in SCRIPTS) == sorted(KEY_LINES)


def run_example(script: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-W", "error", str(script), *args],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
        cwd=EXAMPLES.parent,
    )
    assert done.returncode == 0, (
        f"{script.name} exited {done.returncode}\n--- stdout\n{done.stdout}"
        f"\n--- stderr\n{done.stderr}"
    )
    assert done.stderr == "", f"{script.name} wrote to stderr:\n{done.stderr}"
    return done.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["default", "file", "memory"])
@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_example_runs(script: Path, kind: str, tmp_path: Path) -> None:
    urls = {"default": [], "file": [f"file://{tmp_path / 'store'}"], "memory": ["memory://x"]}
    out = run_example(script, *urls[kind])
    for line in [KEY_LINES[script.name], *MORE_LINES.get(script.name, [])]:
        assert line in out, f"{script.name} did not print {line!r}:\n{out}"


@pytest.mark.timeout(90)
@pytest.mark.parametrize("url_kind", ["default", "file"])
def test_cron_style_shell_example(tmp_path: Path, url_kind: str) -> None:
    args = [] if url_kind == "default" else [f"file://{tmp_path}/locks"]
    done = subprocess.run(
        ["bash", str(EXAMPLES / "cron_job.sh"), *args],
        capture_output=True,
        text=True,
        timeout=80,
        check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "first run: working with fencing token 1",
        "overlapping run skipped with exit code 6",
        "passed on the job's exit code 3",
        "next run: fencing token 2",
    ):
        assert line in done.stdout, done.stdout
    assert "must not happen" not in done.stdout
    assert "Traceback" not in done.stderr
