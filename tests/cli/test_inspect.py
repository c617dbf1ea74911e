"""``info``, ``list`` and ``watch`` on the local store, and how bad input fails."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from prioritylock import Lock, PreemptionTimeout
from tests.cli.helpers import Cli, child, holder, local, snapshot

pytestmark = pytest.mark.timeout(30)


def test_info_never_taken_held_and_free(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    result = cli.run("info", url, "jobs/nightly")
    assert result.code == 0, result.stderr
    assert result.stdout == "v1/path/jobs/nightly: never taken (no lease document)\n"
    assert (
        json.loads(cli.run("info", "--json", url, "jobs/nightly").stdout)["state"] == "never taken"
    )

    lock = holder(
        local(store_dir), "jobs/nightly", owner="worker-1", message="compaction", priority=3
    )
    locks.append(lock)
    lock.lock(timeout=5)
    text = cli.run("info", url, "jobs/nightly")
    assert text.code == 0, text.stderr
    assert text.stdout.startswith("v1/path/jobs/nightly: held by worker-1\n")
    for expected in ("compaction", "priority    3", "fence       1", "approximate", "acquired by"):
        assert expected in text.stdout
    record = json.loads(cli.run("--json", "info", url, "jobs/nightly").stdout)
    assert record["state"] == "held"
    assert (record["owner"], record["priority"], record["fence"]) == ("worker-1", 3, 1)
    assert 0 < record["time_left_approx"] <= 30
    assert record["key"] == "v1/path/jobs/nightly" and record["path"] == "jobs/nightly"

    lock.unlock()
    free = cli.run("info", url, "v1/path/jobs/nightly")  # the scope key names the same lock
    assert free.code == 0, free.stderr
    assert free.stdout.startswith("v1/path/jobs/nightly: free\n")
    assert "released by worker-1" in free.stdout


def test_info_shows_the_pending_request(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    low = holder(local(store_dir), "jobs/req", owner="low", priority=1, cleanup_timeout=10)
    high = holder(
        local(store_dir),
        "jobs/req",
        owner="high",
        priority=7,
        waiting_timeout=10,
        message="urgent fix",
    )
    locks += [low, high]
    low.lock(timeout=5)
    outcome: list[object] = []

    def request() -> None:
        try:
            outcome.append(high.try_lock())
        except PreemptionTimeout as exc:
            outcome.append(exc)

    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while (info := low.info()) is None or info.requestor_owner is None:  # the request landed
        assert time.monotonic() < deadline, "the request never landed"
        thread.join(0.02)
    result = cli.run("info", url, "jobs/req")
    assert result.code == 0, result.stderr
    assert "requested   by high, priority 7, waits 10 s" in result.stdout
    assert "urgent fix" in result.stdout
    record = json.loads(cli.run("info", "--json", url, "jobs/req").stdout)
    assert (record["requestor_owner"], record["requestor_priority"]) == ("high", 7)
    low.unlock()  # hands over to the requestor
    thread.join(10)
    assert outcome == [True]


def test_list_shows_every_lock_and_corrupt_documents(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    store = local(store_dir)
    held = holder(store, "jobs/a", owner="alice", priority=2)
    freed = holder(store, "jobs/b", owner="bob")
    locks += [held, freed]
    held.lock(timeout=5)
    freed.lock(timeout=5)
    freed.unlock()
    other = holder(store, "other/c")
    locks.append(other)
    other.lock(timeout=5)
    store.create("v1/path/jobs/broken", b"{not json")
    store.create("notes/readme", b"not a lock")

    result = cli.run("list", url)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["KEY", "STATE", "FENCE", "PRIORITY", "LINE", "OWNER"]
    rows = {line.split()[0]: line.split() for line in lines[1:]}
    assert rows["v1/path/jobs/a"][:6] == ["v1/path/jobs/a", "held", "1", "2", "0", "alice"]
    assert rows["v1/path/jobs/b"][:3] == ["v1/path/jobs/b", "free", "1"]
    assert rows["v1/path/jobs/broken"][1] == "corrupt"
    assert rows["notes/readme"][1] == "foreign"
    assert rows["v1/path/other/c"][1] == "held"

    as_json = cli.run("list", "--json", url, "--prefix", "jobs/")
    assert as_json.code == 0, as_json.stderr
    states = {row["key"]: row["state"] for row in json.loads(as_json.stdout)}
    assert states == {
        "v1/path/jobs/a": "held",
        "v1/path/jobs/b": "free",
        "v1/path/jobs/broken": "corrupt",
    }
    by_key = cli.run("list", "--json", url, "--prefix", "v1/path/other/")
    assert [row["key"] for row in json.loads(by_key.stdout)] == ["v1/path/other/c"]
    empty = cli.run("list", "--json", url, "--prefix", "nothing/")
    assert (empty.code, json.loads(empty.stdout)) == (0, [])


def test_watch_prints_each_change(cli: Cli, url: str, store_dir: Path, locks: list[Lock]) -> None:
    lock = holder(local(store_dir), "jobs/w", owner="worker-9", lease_timeout=60)
    locks.append(lock)
    watch = cli.spawn("watch", url, "jobs/w", "--interval", "0.02", "--count", "4")
    assert watch.expect("").split()[1:] == ["state", "never", "taken"]
    steps: list[tuple[Callable[[], object], str, str]] = [
        (lambda: lock.lock(timeout=5), "acquired", "worker-9 (priority 0), fence 1"),
        (lock.renew, "renewed", "worker-9"),
        (lock.unlock, "released", "fence 1 by worker-9"),
        (lambda: lock.force_unlock("cleanup", by="ops"), "forced", "fence 2 by ops: cleanup"),
    ]
    for act, change, detail in steps:
        act()
        line = watch.expect("")  # one change at a time: each is seen before the next is made
        assert line.split()[1] == change, line
        assert detail in line, line
    result = watch.finish()
    assert result.code == 0, result.stderr


def test_watch_json_lines_and_ctrl_c(cli: Cli, url: str, store_dir: Path) -> None:
    watch = cli.spawn("watch", "--json", url, "jobs/wj", "--interval", "0.02")
    first = json.loads(watch.expect("{"))
    assert (first["change"], first["state"], first["key"]) == (
        "state",
        "never taken",
        "v1/path/jobs/wj",
    )
    watch.signal(2)  # SIGINT: watching ends normally
    result = watch.finish()
    assert result.code == 0, result.stderr


def test_watch_started_before_the_first_holder_waits_for_it(
    cli: Cli, url: str, store_dir: Path, locks: list[Lock]
) -> None:
    watch = cli.spawn("watch", f"{url}/later", "jobs/w", "--interval", "0.02")
    note = watch.expect("prioritylock: ", stderr=True)
    assert "does not exist yet" in note and "checking every 0.02 s" in note, note
    lock = holder(local(store_dir / "later"), "jobs/w", owner="first", lease_timeout=60)
    locks.append(lock)
    lock.lock(timeout=5)
    # The directory appears with the store, the lease a moment later: the first read may come
    # between the two ("never taken", then "acquired") or after both ("held by first").
    line = watch.expect("")
    if "never taken" in line:
        line = watch.expect("")
    assert "first (priority 0), fence 1" in line, line
    watch.signal(2)
    assert watch.finish().code == 0


BAD_INPUT = [
    (["info", "bogus://x", "jobs/a"], 3, "unknown store URL scheme"),
    (["info", "{url}", "/jobs/a"], 3, "lock path"),
    (["info", "{url}", "v1/nonsense/a"], 3, "unknown scope kind"),
    (["run", "{url}", "jobs/a", "--lease", "soon", "--", "true"], 2, "--lease"),
    (["run", "{url}", "jobs/a", "--priority", "2147483647", "--", "true"], 3, "override"),
    (["run", "{url}", "jobs/a"], 2, "needs a command"),
    (["frobnicate"], 2, "invalid choice"),
    (["info", "{url}/missing", "jobs/a"], 4, "is created by its first holder"),
    (["force-unlock", "{url}", "jobs/a"], 2, "--message"),
    (["force-unlock", "{url}", "jobs/a", "--message", "  "], 3, "--message"),
    (["override", "{url}", "jobs/a", "--message", "m"], 2, "--hold"),
]


@pytest.mark.parametrize(("argv", "code", "says"), BAD_INPUT)
def test_bad_input_is_one_line_and_changes_nothing(
    cli: Cli, url: str, store_dir: Path, argv: list[str], code: int, says: str
) -> None:
    before = snapshot(store_dir)
    result = cli.run(*(arg.format(url=url) for arg in argv))
    assert says in result.one_error_line(code)
    assert snapshot(store_dir) == before
    assert not (store_dir / "missing").exists()


def test_corrupt_lease_is_reported_and_left_alone(
    cli: Cli, url: str, store_dir: Path, markers: Path
) -> None:
    local(store_dir).create("v1/path/jobs/bad", b'{"schema": 99}')
    before = snapshot(store_dir)
    assert "unknown schema" in cli.run("info", url, "jobs/bad").one_error_line(5)
    ran = cli.run("run", url, "jobs/bad", "--", *child("never", markers, "exit", "0"))
    ran.one_error_line(5)
    assert "ready" not in ran.stdout  # CMD never ran
    refused = cli.run("force-unlock", url, "jobs/bad", "--message", "fix", "--yes")
    assert "--overwrite-corrupt" in refused.one_error_line(5)
    assert snapshot(store_dir) == before

    fixed = cli.run(
        "force-unlock", url, "jobs/bad", "--message", "fix", "--overwrite-corrupt", "--yes"
    )
    assert fixed.code == 0, fixed.stderr
    assert "corrupt" in fixed.stdout
    record = json.loads(cli.run("info", "--json", url, "jobs/bad").stdout)
    assert (record["state"], record["last_event"]) == ("free", "force_unlock")


def test_errors_in_json_mode_are_one_json_line(cli: Cli) -> None:
    result = cli.run("info", "--json", "bogus://x", "jobs/a")
    error = json.loads(result.one_error_line(3))
    assert error["exit"] == 3 and "unknown store URL scheme" in error["error"]


def test_secrets_in_urls_are_not_printed(cli: Cli, url: str) -> None:
    secret = "hunter2"
    results = [
        cli.run("info", f"{url}?token={secret}", "jobs/a"),
        cli.run("info", f"s3://AKIA:{secret}@bucket/p", "jobs/a"),
        cli.run("info", f"gopher://user:{secret}@host/p?key={secret}", "jobs/a"),
    ]
    for result in results:
        result.one_error_line(3)
        assert secret not in result.stderr + result.stdout


def test_help_version_and_demo(cli: Cli) -> None:
    helped = cli.run("--help")
    assert helped.code == 0
    assert "exit codes:" in helped.stdout
    assert cli.run("--version").stdout.startswith("prioritylock ")
    demo = cli.run("demo", timeout=25)
    assert demo.code == 0, demo.stderr
    assert "preempts a low-priority holder" in demo.stdout
