"""The command line's edges: one message for a ``file://`` URL with a host, ``watch`` that
would spin, global options on either side of the command, and a note when the store is slow.

These run ``main`` in this process (no interpreter start-up per case)."""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
from pathlib import Path

import pytest

from prioritylock._errors import LockLost, NotLockOwner, StoreUnavailable
from prioritylock._listener import CleanupNotice
from prioritylock.cli import main
from prioritylock.cli._exits import Failure
from prioritylock.cli._output import Output
from prioritylock.cli._supervise import Ended, _verdict

pytestmark = pytest.mark.timeout(30)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err.splitlines()


def test_a_file_url_with_a_host_is_explained_by_every_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "relative" / "dir").mkdir(parents=True)
    url = "file://relative/dir"
    said = {}
    for argv in (
        ["info", url, "x"],
        ["list", url],
        ["watch", url, "x"],
        ["force-unlock", url, "x", "--message", "m", "--yes"],
        ["run", url, "x", "--", "true"],
    ):
        code, out, err = _run(capsys, *argv)
        assert (code, out, len(err)) == (3, "", 1), (argv, code, err)
        said[argv[0]] = err[0]
    assert len(set(said.values())) == 1, said
    assert "file:///ABSOLUTE/PATH (no host)" in said["info"]
    assert repr((tmp_path / "relative" / "dir").as_uri()) in said["info"]


@pytest.mark.parametrize("interval", ["0", "0.001"])
def test_watch_refuses_an_interval_that_would_spin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, interval: str
) -> None:
    code, _, err = _run(capsys, "watch", tmp_path.as_uri(), "x", "--interval", interval)
    assert code == 2
    assert "--interval: must be at least 0.01 s" in err[0], err


@pytest.mark.parametrize(
    "argv",
    [
        ["--store-timeout", "1", "--json", "info", "{url}", "x"],
        ["info", "{url}", "x", "--store-timeout", "1", "--json"],
        ["--json", "info", "{url}", "x", "--store-timeout", "1"],
        ["--store-timeout", "1", "info", "--json", "{url}", "x"],
    ],
)
def test_global_options_before_or_after_the_command(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    code, out, err = _run(capsys, *(a.format(url=tmp_path.as_uri()) for a in argv))
    assert (code, err) == (0, [])
    assert json.loads(out)["state"] == "never taken"


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["--store-timeout", "0", "info", "{url}", "x"], 3, "--store-timeout: must be positive"),
        (["info", "{url}", "x", "--store-timeout", "0"], 3, "--store-timeout: must be positive"),
        (["--store-timeout", "5", "demo"], 2, "--store-timeout: demo does not call a store"),
        (["serve", "--app-id", "a", "--store-timeout", "5"], 2, "unrecognized arguments"),
    ],
)
def test_global_options_refused_alike(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], code: int, says: str
) -> None:
    got, _, err = _run(capsys, *(a.format(url=tmp_path.as_uri()) for a in argv))
    assert got == code and len(err) == 1, err
    assert says in err[0], err


@pytest.mark.parametrize("json_mode", [False, True])
def test_a_slow_call_says_what_it_waits_for(json_mode: bool) -> None:
    err = io.StringIO()
    out = Output(json_mode, io.StringIO(), err)
    told = threading.Event()
    err_write = err.write

    def write(text: str) -> int:
        told.set()
        return err_write(text)

    err.write = write  # type: ignore[method-assign]
    with out.waiting("the store at s3://b/p (store timeout 10 s)", after=0.05):
        assert told.wait(10)
    with out.waiting("something quick", after=5):
        pass  # done at once: nothing is said
    line = err.getvalue().strip()
    text = json.loads(line)["note"] if json_mode else line
    assert "waiting for the store at s3://b/p (store timeout 10 s)" in text
    assert "quick" not in err.getvalue()


def test_info_on_an_unreachable_store_says_it_is_waiting(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """And the retries in the log say what happened: a refused connection, not a busy store."""
    pytest.importorskip("boto3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # bound, never listening: connections are refused
        url = f"s3://bucket/p?endpoint=http://127.0.0.1:{port}&region=us-east-1&addressing=path"
        with caplog.at_level(logging.INFO, logger="prioritylock"):
            code, _, err = _run(capsys, "info", url, "x", "--store-timeout", "1.5")
    assert code == 4, err
    assert err[0] == (
        "prioritylock: waiting for the store at s3://bucket/p (store timeout 1.5 s)"
    ), err
    assert len(err) == 2, err  # then the one error line
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retries, caplog.text
    assert all(": connection refused (" in text for text in retries), retries
    assert not any("busy" in text for text in retries), retries


_NOTICE = CleanupNotice(
    lock=None,
    requestor_owner="boss",
    requestor_priority=9,
    requestor_message="m",
    forceful=False,
    deadline=0.0,
    deadline_wall=0.0,
)


@pytest.mark.parametrize(
    ("ended", "code", "says"),
    [
        (Ended(0, None), 0, None),
        (Ended(3, None), 3, None),
        (Ended(-15, None), 128 + 15, None),  # killed by a signal, as shells report it
        (Ended(None, None, interrupted=15), 143, "interrupted by SIGTERM; CMD was not started"),
        (Ended(0, None, preempted=_NOTICE), 7, "preempted by boss (priority 9); CMD exited"),
        (Ended(0, None, lost="expired"), 7, "lock lost (expired) while CMD ran; CMD exited"),
        (Ended(0, LockLost("x", reason="forced")), 7, "lock lost (forced)"),
        (Ended(0, NotLockOwner("x")), 7, "lock lost (not held at release)"),
        (Ended(2, NotLockOwner("x"), handover_after_end=True), 2, None),
        (Ended(0, StoreUnavailable("down")), 4, "but the release failed (down)"),
    ],
)
def test_the_verdict_on_work_under_the_lock(ended: Ended, code: int, says: str | None) -> None:
    verdict = _verdict(
        ended, key="k", ran_cmd=True, lease_timeout=30, loss_detail=lambda: "; detail"
    )
    if says is None:
        assert verdict == code
    else:
        assert isinstance(verdict, Failure)
        assert verdict.code == code and says in verdict.message, verdict.message
