"""Errors that say what to do: a missing ``--``, a bare path for a store, options by their flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import Cli, child, snapshot

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["run", "{url}", "jobs/a", "echo", "hi"], "'--' is missing before the command 'echo'"),
        (["run", "--timeout", "0", "{url}", "jobs/a", "make", "-j"], "'--' is missing"),
        (["override", "{url}", "jobs/a", "--message", "m", "sh"], "'--' is missing"),
        (["run", "{url}", "jobs/a"], "needs a command after '--' ('--' is missing)"),
        (["run", "{url}", "jobs/a", "--"], "needs a command after '--'"),
    ],
)
def test_run_without_the_separator_says_so(
    cli: Cli, url: str, store_dir: Path, argv: list[str], says: str
) -> None:
    before = snapshot(store_dir)
    line = cli.run(*(arg.format(url=url) for arg in argv)).one_error_line(2)
    assert says in line, line
    assert "-- CMD [ARGS ...]" in line
    assert snapshot(store_dir) == before


def test_an_unknown_option_is_still_unrecognized(cli: Cli, url: str) -> None:
    line = cli.run("run", url, "jobs/a", "--bogus", "--", "true").one_error_line(2)
    assert "unrecognized arguments: --bogus" in line


def test_a_bare_path_store_suggests_a_file_url(cli: Cli, tmp_path: Path, markers: Path) -> None:
    bare = str(tmp_path / "locks")
    hint = f"'file://{bare}'"  # the URL to use, whichever words the stores put around it
    assert hint in cli.run("info", bare, "jobs/a").one_error_line(3)
    ran = cli.run("run", bare, "jobs/a", "--", *child("never", markers, "exit", "0"))
    assert hint in ran.one_error_line(3)
    assert ran.stdout == ""  # CMD never ran
    assert not (tmp_path / "locks").exists()
    # A query string is not repeated back: it may hold a secret.
    secret = cli.run("info", bare + "?token=hunter2", "jobs/a")
    assert hint in secret.one_error_line(3)
    assert "hunter2" not in secret.stderr


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--lease", "0"], "--lease: must be positive"),
        (["--lease", "0.2"], "--lease: must be longer than the clock drift allowance (0.5 s)"),
        (["--owner", "o" * 1000], "--owner: longer than"),
        (["--owner", ""], "--owner: must not be empty"),
        (["--message", "a\x07b"], "--message: contains control characters"),
        (["--priority", "-1"], "--priority: must be in 0..2147483646"),
        (["--priority", "2147483647"], "--priority: 2147483647 is reserved"),
        (["--store-timeout", "0"], "--store-timeout: must be positive"),
    ],
)
def test_builder_errors_name_the_flag(
    cli: Cli, url: str, store_dir: Path, options: list[str], says: str
) -> None:
    result = cli.run("run", url, "jobs/a", *options, "--", "true")
    line = result.one_error_line(3)
    assert says in line, line
    assert "_timeout" not in line  # the builder's names never reach the command line
    assert snapshot(store_dir) == {}
