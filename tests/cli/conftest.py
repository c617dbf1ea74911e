"""Fixtures for the CLI tests: a command runner, a local store, a moto bucket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from prioritylock import Lock
from tests._servers.s3 import S3Server
from tests.cli.helpers import Cli


@pytest.fixture
def cli() -> Iterator[Cli]:
    runner = Cli()
    yield runner
    runner.close()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "store"
    directory.mkdir()
    return directory


@pytest.fixture
def url(store_dir: Path) -> str:
    return f"file://{store_dir}"


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    directory = tmp_path / "markers"
    directory.mkdir()
    return directory


@pytest.fixture
def locks() -> Iterator[list[Lock]]:
    """Locks a test holds in this process; closed (released) at the end."""
    made: list[Lock] = []
    yield made
    for lock in made:
        lock.close()


@pytest.fixture
def s3_bucket(moto_server: S3Server) -> Iterator[str]:
    bucket = moto_server.create_bucket()
    yield bucket
    moto_server.remove_bucket(bucket)


@pytest.fixture
def s3_cli(moto_server: S3Server) -> Iterator[Cli]:
    runner = Cli(
        {
            "AWS_ACCESS_KEY_ID": moto_server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": moto_server.secret_access_key,
        }
    )
    yield runner
    runner.close()
