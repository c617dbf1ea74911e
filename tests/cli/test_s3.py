"""The command against an S3 emulator (moto): S3's own failures (the same behaviour on every
server store is tests/cli/test_stores.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests._servers.s3 import S3Server
from tests.cli.helpers import Cli, child, s3_url

pytestmark = pytest.mark.timeout(40)


def test_missing_bucket_fails_cleanly(s3_cli: Cli, moto_server: S3Server, markers: Path) -> None:
    url = s3_url(moto_server.endpoint_url, "plk-no-such-bucket")
    assert "bucket does not exist" in s3_cli.run("info", url, "jobs/a").one_error_line(4)
    ran = s3_cli.run("run", url, "jobs/a", "--", *child("job", markers, "exit", "0"))
    assert "bucket does not exist" in ran.one_error_line(4)
    assert ran.stdout == ""  # CMD never ran
    assert s3_cli.run("list", url).one_error_line(4)


def test_missing_credentials_fail_cleanly(moto_server: S3Server, s3_bucket: str) -> None:
    bare = Cli()  # no AWS_* variables, no config files, no instance metadata
    try:
        result = bare.run("info", s3_url(moto_server.endpoint_url, s3_bucket), "jobs/a")
    finally:
        bare.close()
    assert "no AWS credentials" in result.one_error_line(4)
