"""Every script in examples/ runs, as a user would run it, and prints what it promises.

Each example runs in its own interpreter (``sys.executable``, warnings as errors): with no
argument (its own temporary directory), and with a store URL as its first argument (a fresh
directory under pytest's ``tmp_path``, and a process-local memory store).
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: Examples that are clients of a running ``prioritylock serve``: the tests of the service
#: start one and run them (tests/server/test_walkthrough.py, tests/client/test_client.py).
SERVICE_CLIENTS = frozenset({"dapr_client.py", "grpc_client.py"})
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if p.name not in SERVICE_CLIENTS)

#: One line (or part of one) each example must print: the point it makes.
KEY_LINES = {
    "async_worker.py": "urgent try_lock() -> True, fence 6 -> 7",
    "basic_lock.py": "worker-2 holds the lock with fencing token 2 (one more)",
    "scoped_builder.py": "observer sees: held=True by 'migrator@host-3'",
    "preemption.py": "urgent try_lock() -> True, fence 1 -> 2",
    "fencing_guard.py": "old holder's write refused: the report carries a token above 1",
    "emergency_override.py": "message 'INC-1234: migration is locking orders, stopping it'",
}

#: More lines that must appear, where one line is not the whole point.
MORE_LINES = {
    "async_worker.py": [
        "5 workers took turns, fences [1, 2, 3, 4, 5]",
        "batch: rolled back 2 steps, handing over",
        "batch still believes it holds the lock: False",
    ],
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


#: The demo's lines, in order (times and paths vary): each printed whole, none run together.
DEMO_LINES = [
    r"prioritylock demo on the local-directory store file:///\S+",
    r"",
    r"1\. Two clients contend for one lock",
    r"  client-1 holds the lock, fencing token 1",
    r"  \[info\] fence=1 held by 'client-1' \(priority 0\); last event: acquired",
    r"  client-2 try_lock\(\) -> False",
    r"  client-1 releases",
    r"  client-2 holds the lock, fencing token 2 \(higher: fenced\)",
    r"  \[info\] fence=2 held by 'client-2' \(priority 0\); last event: acquired",
    r"",
    r"2\. A higher-priority job preempts a low-priority holder",
    r"  batch-job holds the lock, fencing token 1",
    r"  low-priority job: 'urgent-job' \(priority 10\) asks for the lock; cleaning up "
    r"\(\d+\.\d s left in the window\)",
    r"  low-priority job: cleanup done, handing over",
    r"  low-priority job: told it no longer holds the lock \(preempted\)",
    r"  urgent-job try_lock\(\) -> True after \d+\.\d\d s, fencing token 2",
    r"  \[info\] fence=2 held by 'urgent-job' \(priority 10\); last event: handover",
]


@pytest.mark.timeout(60)
def test_demo_prints_its_story_line_by_line() -> None:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-m", "prioritylock._demo"],
        capture_output=True,
        text=True,
        timeout=50,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert len(lines) == len(DEMO_LINES), done.stdout
    for line, pattern in zip(lines, DEMO_LINES, strict=True):
        assert re.fullmatch(pattern, line), f"{line!r} is not {pattern!r}\n{done.stdout}"


class _SlowStdout(io.StringIO):
    """A stream that lets other threads run in the middle of every write, as a pipe may."""

    def write(self, s: str) -> int:
        time.sleep(0.0005)
        return super().write(s)


@pytest.mark.timeout(30)
def test_demo_lines_from_two_threads_never_interleave(monkeypatch: pytest.MonkeyPatch) -> None:
    from prioritylock import _demo

    out = _SlowStdout()
    monkeypatch.setattr(sys, "stdout", out)
    start = threading.Barrier(2)

    def talk(who: str) -> None:
        start.wait()
        for n in range(40):
            _demo._say(f"{who} line {n}")

    threads = [threading.Thread(target=talk, args=(who,)) for who in ("main", "heartbeat")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    lines = out.getvalue().splitlines()
    assert sorted(lines) == sorted(
        f"{w} line {n}" for w in ("main", "heartbeat") for n in range(40)
    )
