"""``run``, ``override`` and ``force-unlock`` on the local store, as a user runs them.

CMD is ``_child.py``: it prints a ``ready`` line (with the fence it was given) and, on SIGTERM or
SIGINT, writes a marker file before it exits. Tests wait on those lines, never on sleeps.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from prioritylock import Lock
from tests.cli.helpers import (
    Cli,
    child,
    holder,
    kill_group,
    local,
    ready_fields,
    snapshot,
)

pytestmark = pytest.mark.timeout(30)

# A short lease so holders watch their lease every 1/3 s (min(lease / 3, cleanup / 2,
# (cleanup - drift) * 2/3)): a request is read with a third of the 0.5 s window to spare.
FAST = ["--lease", "3", "--cleanup", "1"]


def state(cli: Cli, url: str, path: str) -> dict[str, object]:
    result = cli.run("info", "--json", url, path)
    assert result.code == 0, result.stderr
    record: dict[str, object] = json.loads(result.stdout)
    return record


def test_run_passes_fence_and_exit_status(cli: Cli, url: str, markers: Path) -> None:
    first = cli.run("run", url, "jobs/r", "--", *child("one", markers, "exit", "3"))
    assert first.code == 3, first.stderr
    assert first.stderr == ""
    fields = ready_fields(first.stdout.splitlines()[0])
    assert fields["fence"] == "1"
    assert fields["path"] == "jobs/r"
    assert fields["url"] == url
    assert fields["pgid"] == fields["pid"]  # CMD leads a process group of its own
    second = cli.run("run", "--json", url, "jobs/r", "--", *child("two", markers, "exit", "0"))
    assert second.code == 0, second.stderr
    assert ready_fields(second.stdout.splitlines()[0])["fence"] == "2"
    summary = json.loads(second.stderr)
    assert (summary["outcome"], summary["status"], summary["fence"]) == ("released", 0, 2)
    assert state(cli, url, "jobs/r")["state"] == "free"


def test_run_gives_up_after_timeout_while_another_holds(
    cli: Cli, url: str, store_dir: Path, markers: Path, locks: list[Lock]
) -> None:
    other = holder(local(store_dir), "jobs/busy", owner="somebody", message="backup")
    locks.append(other)
    other.lock(timeout=5)
    before = other.info()
    result = cli.run(
        "run", url, "jobs/busy", "--timeout", "0.3", "--", *child("late", markers, "exit", "0")
    )
    line = result.one_error_line(6)
    assert "held by somebody" in line and "backup" in line
    assert result.stdout == ""  # CMD never ran
    # It joined the line while it waited, and left it when it gave up: nothing else changed.
    assert other.info() == before and before is not None and before.waiters == ()


def test_run_preempted_by_override(cli: Cli, url: str, markers: Path) -> None:
    job = cli.spawn("run", url, "jobs/o", *FAST, "--", *child("job", markers, "wait"))
    assert ready_fields(job.expect("ready job"))["fence"] == "1"
    # Held longer than the job's watch interval, so the job sees the override itself.
    override = cli.spawn(
        "override", url, "jobs/o", "--message", "INC-7: stop it", "--hold", "2", "--yes"
    )
    assert override.expect("holding") == "holding v1/path/jobs/o (fence 2) for 2 s"
    result = job.finish()
    line = result.one_error_line(7)
    assert "lock lost (overridden)" in line
    assert "INC-7: stop it" in line
    assert (markers / "job.SIGTERM").exists()
    done = override.finish()
    assert (done.code, done.stdout.splitlines()[-1]) == (0, "released v1/path/jobs/o")
    record = state(cli, url, "jobs/o")
    assert (record["state"], record["fence"]) == ("free", 2)
    assert str(record["last_event_by"]).count("@") == 1  # the operator, user@host


def test_override_runs_a_command_with_the_fence(cli: Cli, url: str, markers: Path) -> None:
    result = cli.run(
        "override",
        url,
        "jobs/oc",
        "--message",
        "by hand",
        "--yes",
        "--",
        *child("op", markers, "exit", "5"),
    )
    assert result.code == 5, result.stderr
    assert ready_fields(result.stdout.splitlines()[0])["fence"] == "1"
    record = state(cli, url, "jobs/oc")
    assert record["state"] == "free"
    assert record["last_event_message"] == "by hand"


def test_higher_priority_run_preempts_a_lower_one(cli: Cli, url: str, markers: Path) -> None:
    low = cli.spawn(
        "run",
        url,
        "jobs/p",
        "--priority",
        "1",
        "--lease",
        "3",
        "--cleanup",
        "5",
        "--",
        *child("low", markers, "wait"),
    )
    low.expect("ready low")
    high = cli.run(
        "run",
        url,
        "jobs/p",
        "--priority",
        "5",
        "--wait",
        "10",
        "--",
        *child("high", markers, "exit", "0"),
    )
    assert high.code == 0, high.stderr
    assert ready_fields(high.stdout.splitlines()[0])["fence"] == "2"
    assert (markers / "low.SIGTERM").exists()  # the low CMD had stopped before the handover
    result = low.finish()
    assert "preempted by" in result.one_error_line(7)
    assert "exited with status 0" in result.stderr


def test_cmd_that_ignores_sigterm_is_killed_after_the_cleanup_window(
    cli: Cli, url: str, markers: Path
) -> None:
    low = cli.spawn(
        "run",
        url,
        "jobs/k",
        "--priority",
        "1",
        "--lease",
        "3",
        "--cleanup",
        "1",
        "--",
        *child("stubborn", markers, "ignore"),
    )
    low.expect("ready stubborn")
    high = cli.run(
        "run", url, "jobs/k", "--priority", "2", "--", *child("hi", markers, "exit", "0")
    )
    assert high.code == 0, high.stderr
    result = low.finish()
    assert "killed by SIGKILL" in result.one_error_line(7)


def test_run_loses_the_lock_to_force_unlock(cli: Cli, url: str, markers: Path) -> None:
    job = cli.spawn("run", "--json", url, "jobs/f", *FAST, "--", *child("job", markers, "wait"))
    job.expect("ready job")
    freed = cli.run("force-unlock", url, "jobs/f", "--message", "stuck", "--fence", "1")
    assert freed.code == 0, freed.stderr
    result = job.finish()
    error = json.loads(result.one_error_line(7))
    assert (error["outcome"], error["reason"], error["exit"]) == ("lost", "forced", 7)
    assert (markers / "job.SIGTERM").exists()


def test_force_unlock_frees_a_killed_holder(
    cli: Cli, url: str, store_dir: Path, markers: Path
) -> None:
    job = cli.spawn("run", url, "jobs/dead", "--", *child("job", markers, "wait"))
    fields = ready_fields(job.expect("ready job"))
    assert fields["fence"] == "1"
    job.signal(signal.SIGKILL)  # the holder dies without releasing; its CMD lives on
    kill_group(int(fields["pgid"]))  # (the test's own cleanup: CMD keeps the pipes open)
    assert job.finish().code == -signal.SIGKILL
    assert state(cli, url, "jobs/dead")["state"] == "held"

    before = snapshot(store_dir)
    assert "--message" in cli.run("force-unlock", url, "jobs/dead").one_error_line(2)
    assert snapshot(store_dir) == before

    freed = cli.run("force-unlock", url, "jobs/dead", "--message", "holder was SIGKILLed", "--yes")
    assert freed.code == 0, freed.stderr
    assert freed.stdout.startswith("v1/path/jobs/dead: freed ")
    assert "fence 1" in freed.stdout and "fence now 2" in freed.stdout
    again = cli.run("force-unlock", url, "jobs/dead", "--message", "twice", "--yes")
    assert "not held" in again.one_error_line(8)

    after = cli.run("run", url, "jobs/dead", "--", *child("next", markers, "exit", "0"))
    assert after.code == 0, after.stderr
    assert int(ready_fields(after.stdout.splitlines()[0])["fence"]) > 2


def test_signals_to_run_reach_cmd_and_release(cli: Cli, url: str, markers: Path) -> None:
    job = cli.spawn("run", url, "jobs/int", "--", *child("job", markers, "wait"))
    job.expect("ready job")
    job.signal(signal.SIGINT)
    result = job.finish()
    assert "interrupted by SIGINT" in result.one_error_line(130)
    assert (markers / "job.SIGINT").exists()
    assert state(cli, url, "jobs/int")["state"] == "free"


def test_missing_command_releases_the_lock(cli: Cli, url: str) -> None:
    result = cli.run("run", url, "jobs/nf", "--", "/nonexistent/cmd")
    assert "command not found" in result.one_error_line(127)
    assert state(cli, url, "jobs/nf")["state"] == "free"


def test_the_console_script_runs_the_same_command(cli: Cli, url: str) -> None:
    script = Path(sys.executable).with_name("prioritylock")
    if not script.exists():
        pytest.skip("the console script is not installed next to this Python")
    done = subprocess.run(
        [str(script), "info", url, "jobs/cs"],
        capture_output=True,
        text=True,
        env=cli.env,
        timeout=20,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, cli.run("info", url, "jobs/cs").stdout)
