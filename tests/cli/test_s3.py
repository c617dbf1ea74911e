"""The command against an S3 emulator (moto): the same behaviour, and S3's own failures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._servers.s3 import S3Server
from tests.cli.helpers import Cli, child, ready_fields, s3_url

pytestmark = pytest.mark.timeout(40)


def test_run_info_list_on_s3(
    s3_cli: Cli, moto_server: S3Server, s3_bucket: str, markers: Path
) -> None:
    url = s3_url(moto_server.endpoint_url, s3_bucket)
    ran = s3_cli.run("run", url, "v1/resource/prod/db", "--", *child("job", markers, "exit", "4"))
    assert ran.code == 4, ran.stderr
    fields = ready_fields(ran.stdout.splitlines()[0])
    assert fields["fence"] == "1"
    assert fields["path"] == "v1/resource/prod/db"
    assert fields["url"] == f"s3://{s3_bucket}/locks"  # no query string: it may hold secrets

    info = s3_cli.run("info", "--json", url, "v1/resource/prod/db")
    assert info.code == 0, info.stderr
    record = json.loads(info.stdout)
    assert (record["state"], record["fence"], record["path"]) == ("free", 1, None)

    listed = s3_cli.run("list", url)
    assert listed.code == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:3] == ["v1/resource/prod/db", "free", "1"]


def test_run_preempted_by_override_on_s3(
    s3_cli: Cli, moto_server: S3Server, s3_bucket: str, markers: Path
) -> None:
    url = s3_url(moto_server.endpoint_url, s3_bucket)
    job = s3_cli.spawn(
        "run", url, "jobs/o", "--lease", "3", "--cleanup", "1", "--", *child("job", markers, "wait")
    )
    job.expect("ready job")
    override = s3_cli.spawn(
        "override", url, "jobs/o", "--message", "INC-9", "--hold", "2", "--fence", "1"
    )
    override.expect("holding v1/path/jobs/o (fence 2)")
    assert "lock lost (overridden)" in job.finish().one_error_line(7)
    assert (markers / "job.SIGTERM").exists()
    assert override.finish().code == 0


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
