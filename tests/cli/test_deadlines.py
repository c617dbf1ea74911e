"""The commands that read or write a lock end by ``--store-timeout`` when the store does not
answer (a black hole: a server of the test's own that accepts connections and never answers),
and say what they wait for after a second (issue 22). In this process: no interpreter start-up
(nor the SDK's import) counted in."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from prioritylock.cli import main
from tests.lock.test_deadlines import SLACK, BlackHole

pytestmark = pytest.mark.timeout(60)

STORE_TIMEOUT = 1.5


@pytest.fixture(scope="module")
def black_hole() -> Iterator[BlackHole]:
    pytest.importorskip("boto3")
    hole = BlackHole()
    yield hole
    hole.close()


def url_of(hole: BlackHole) -> str:
    return f"s3://bucket/p?endpoint=http://127.0.0.1:{hole.port}&region=us-east-1&addressing=path"


@pytest.mark.parametrize(
    "argv",
    [
        ["info", "x"],
        ["list"],
        ["force-unlock", "x", "--message", "stuck", "--yes"],
    ],
    ids=["info", "list", "force-unlock"],
)
def test_a_command_ends_by_the_store_timeout(
    black_hole: BlackHole,
    argv: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    command, *rest = argv
    started = time.monotonic()
    code = main([command, url_of(black_hole), *rest, "--store-timeout", str(STORE_TIMEOUT)])
    took = time.monotonic() - started
    err = capsys.readouterr().err.splitlines()
    assert code == 4, err
    assert err[0] == (
        f"prioritylock: waiting for the store at s3://bucket/p (store timeout {STORE_TIMEOUT:g} s)"
    ), err
    assert len(err) == 2, err  # then the one error line
    assert took <= STORE_TIMEOUT + SLACK, took
