"""Operators act on what they saw: ``force-unlock`` and ``override`` with ``--fence``/``--owner``,
a confirmation on a terminal (a pseudo-terminal here), and ``--yes`` off one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prioritylock import Lock
from tests.cli.helpers import Cli, holder, local, snapshot

pytestmark = pytest.mark.timeout(40)


def held(store_dir: Path, locks: list[Lock], path: str, owner: str = "worker-1") -> Lock:
    """A lock held in this process (long lease: it does not renew during a test)."""
    lock = holder(local(store_dir), path, owner=owner, message="compaction", lease_timeout=60)
    locks.append(lock)
    lock.lock(timeout=5)
    return lock


def lease(cli: Cli, url: str, path: str) -> dict[str, object]:
    result = cli.run("info", "--json", url, path)
    assert result.code == 0, result.stderr
    record: dict[str, object] = json.loads(result.stdout)
    return record


@pytest.mark.parametrize(
    "guard",
    [["--fence", "1"], ["--owner", "worker-1"], ["--fence", "1", "--owner", "worker-1"]],
)
def test_force_unlock_with_a_matching_guard_frees(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock], guard: list[str]
) -> None:
    held(store_dir, locks, "jobs/g")
    freed = cli.run("force-unlock", url, "jobs/g", "--message", "stuck", *guard)
    assert freed.code == 0, freed.stderr
    assert "freed worker-1" in freed.stdout
    record = lease(cli, url, "jobs/g")
    assert (record["state"], record["fence"], record["last_event"]) == ("free", 2, "force_unlock")


@pytest.mark.parametrize(
    "guard",
    [
        ["--fence", "2"],
        ["--owner", "worker-2"],
        ["--fence", "1", "--owner", "worker-2"],
        ["--fence", "0", "--owner", "worker-1"],
    ],
)
def test_force_unlock_with_a_stale_guard_is_refused(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock], guard: list[str]
) -> None:
    held(store_dir, locks, "jobs/s")
    before = snapshot(store_dir)
    refused = cli.run("force-unlock", url, "jobs/s", "--message", "stuck", *guard)
    line = refused.one_error_line(9)
    assert "held by worker-1 (priority 0, fence 1)" in line, line
    assert "nothing was changed" in line
    assert snapshot(store_dir) == before
    as_json = cli.run("force-unlock", "--json", url, "jobs/s", "--message", "stuck", *guard)
    assert json.loads(as_json.one_error_line(9))["exit"] == 9
    assert snapshot(store_dir) == before


def test_override_with_a_matching_guard_takes_the_lock(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    held(store_dir, locks, "jobs/og")
    done = cli.run(
        "override", url, "jobs/og", "--message", "INC-3", "--fence", "1", "--owner", "worker-1",
        "--hold", "0",
    )  # fmt: skip
    assert done.code == 0, done.stderr
    assert done.stdout.splitlines()[0] == "holding v1/path/jobs/og (fence 2) for 0 s"
    record = lease(cli, url, "jobs/og")
    assert (record["state"], record["fence"]) == ("free", 2)
    assert record["last_event_by"] != "worker-1"  # released by the operator, who had taken it


def test_override_with_a_stale_guard_takes_nothing(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    lock = held(store_dir, locks, "jobs/os")
    before = snapshot(store_dir)
    for guard in (["--fence", "7"], ["--owner", "somebody-else"]):
        refused = cli.run("override", url, "jobs/os", "--message", "INC-4", *guard, "--hold", "5")
        line = refused.one_error_line(9)
        assert "not taken" in line and "held by worker-1" in line, line
        assert refused.stdout == ""  # never held, so no "holding" line
        assert snapshot(store_dir) == before
    assert lock.is_current_owner()


@pytest.mark.parametrize(
    "argv",
    [
        ["force-unlock", "{url}", "jobs/n", "--message", "why"],
        ["override", "{url}", "jobs/n", "--message", "why", "--hold", "1"],
        ["override", "{url}/new-dir", "jobs/n", "--message", "why", "--", "true"],
    ],
)
def test_no_guard_no_terminal_no_yes_is_refused(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock], argv: list[str]
) -> None:
    held(store_dir, locks, "jobs/n")
    before = snapshot(store_dir)
    refused = cli.run(*(arg.format(url=url) for arg in argv))
    line = refused.one_error_line(2)
    assert "not on a terminal" in line and "--yes" in line and "--fence" in line, line
    assert snapshot(store_dir) == before
    assert not (store_dir / "new-dir").exists()


def test_overwrite_corrupt_with_a_guard_is_a_usage_error(cli: Cli, url: str) -> None:
    result = cli.run(
        "force-unlock", url, "jobs/x", "--message", "m", "--overwrite-corrupt", "--fence", "3"
    )
    assert "--overwrite-corrupt" in result.one_error_line(2)


def test_force_unlock_asks_on_a_terminal_and_yes_frees(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    held(store_dir, locks, "jobs/t")
    terminal = cli.on_terminal("force-unlock", url, "jobs/t", "--message", "stuck")
    terminal.expect("Free it? [y/N] ")
    assert "v1/path/jobs/t: held by worker-1 (priority 0, fence 1) since 20" in terminal.shown
    assert "compaction" in terminal.shown
    terminal.type("y")
    code, shown = terminal.finish()
    assert code == 0, shown
    assert "freed worker-1" in shown
    record = lease(cli, url, "jobs/t")
    assert (record["state"], record["fence"]) == ("free", 2)


def test_force_unlock_asks_on_a_terminal_and_no_changes_nothing(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    lock = held(store_dir, locks, "jobs/tn")
    before = snapshot(store_dir)
    terminal = cli.on_terminal("force-unlock", url, "jobs/tn", "--message", "stuck")
    terminal.expect("Free it? [y/N] ")
    terminal.type("n")
    code, shown = terminal.finish()
    assert code == 1, shown
    assert "not confirmed; nothing was changed" in shown
    assert snapshot(store_dir) == before
    assert lock.is_current_owner()


def test_a_confirmation_holds_only_for_the_lease_it_showed(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    first = held(store_dir, locks, "jobs/tr")
    terminal = cli.on_terminal("force-unlock", url, "jobs/tr", "--message", "stuck")
    terminal.expect("Free it? [y/N] ")
    assert "fence 1" in terminal.shown
    first.unlock()  # while the operator reads: the holder changes
    second = held(store_dir, locks, "jobs/tr", owner="worker-2")
    before = snapshot(store_dir)
    terminal.type("y")
    code, shown = terminal.finish()
    assert code == 9, shown
    assert "held by worker-2 (priority 0, fence 2)" in shown
    assert snapshot(store_dir) == before
    assert second.is_current_owner()


def test_override_asks_on_a_terminal(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    held(store_dir, locks, "jobs/to")
    declined = cli.on_terminal("override", url, "jobs/to", "--message", "INC-5", "--hold", "0")
    declined.expect("Take it with the emergency override? [y/N] ")
    assert "held by worker-1 (priority 0, fence 1)" in declined.shown
    declined.type("no")
    assert declined.finish()[0] == 1
    assert lease(cli, url, "jobs/to")["fence"] == 1

    taken = cli.on_terminal("override", url, "jobs/to", "--message", "INC-5", "--hold", "0")
    taken.expect("[y/N] ")
    taken.type("y")
    code, shown = taken.finish()
    assert code == 0, shown
    assert "holding v1/path/jobs/to (fence 2)" in shown
    record = lease(cli, url, "jobs/to")
    assert (record["state"], record["fence"]) == ("free", 2)
