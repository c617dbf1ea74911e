"""What ``run`` says while it waits for a held lock: a status line on a terminal, two lines on
stderr off one, nothing with ``--quiet``; and a timeout that names the holder once."""

from __future__ import annotations

from pathlib import Path

import pytest

from prioritylock import Lock
from tests.cli.helpers import Cli, child, holder, local

pytestmark = pytest.mark.timeout(30)

HELD = "held by somebody (priority 3: backup)"


@pytest.fixture
def held(store_dir: Path, locks: list[Lock]) -> Lock:
    other = holder(local(store_dir), "jobs/w", owner="somebody", message="backup", priority=3)
    locks.append(other)
    other.lock(timeout=5)
    return other


def test_off_a_terminal_one_line_when_the_wait_starts_and_one_when_it_ends(
    cli: Cli, url: str, markers: Path, held: Lock
) -> None:
    run = cli.spawn("run", url, "jobs/w", "--", *child("next", markers, "exit", "0"))
    assert (
        run.expect("prioritylock: ", stderr=True) == f"prioritylock: waiting for {held.key}: {HELD}"
    )
    held.unlock()
    got = run.expect("prioritylock: ", stderr=True)
    assert got.startswith(f"prioritylock: acquired {held.key} (fence 2) after "), got
    result = run.finish()
    assert result.code == 0, result.stderr
    assert len(result.stderr.splitlines()) == 2, result.stderr


def test_on_a_terminal_a_status_line_counts_the_wait(
    cli: Cli, url: str, markers: Path, held: Lock
) -> None:
    cli.env["COLUMNS"] = "200"  # the line is cut to the terminal's width (a pty's is 0: 80)
    run = cli.on_terminal("run", url, "jobs/w", "--", *child("next", markers, "exit", "0"))
    run.expect(f"\r\x1b[Kprioritylock: waiting 0s for {held.key}: {HELD}")
    run.expect(f"\r\x1b[Kprioritylock: waiting 1s for {held.key}: {HELD}")  # redrawn, in place
    held.unlock()
    run.expect(f"\r\x1b[Kprioritylock: acquired {held.key} (fence 2) after ")  # line erased
    code, shown = run.finish()
    assert code == 0, shown
    assert "ready next" in shown


def test_quiet_says_nothing_while_waiting(cli: Cli, url: str, markers: Path, held: Lock) -> None:
    ran = cli.run("run", "--quiet", url, "jobs/w", "--timeout", "1.5", "--", "true")
    line = ran.one_error_line(6)  # the error alone: no waiting line before it
    assert "not acquired within 1.5 s" in line, line


def test_a_timeout_names_the_holder_once(cli: Cli, url: str, held: Lock) -> None:
    line = cli.run("run", url, "jobs/w", "--timeout", "0", "--", "true").one_error_line(6)
    assert line.count("somebody") == 1, line
    assert "held by somebody (priority 3, fence 1: backup)" in line, line
