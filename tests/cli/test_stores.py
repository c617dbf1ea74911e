"""The command on the stores behind a server (S3 on moto, Redis, ZooKeeper, etcd): run, info,
list and an override behave as on a directory, and no credential of the URL is ever shown."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli.helpers import Cli, child, ready_fields, s3_url
from tests.conftest import selected_kinds

pytestmark = pytest.mark.timeout(40)


@dataclass
class OnStore:
    cli: Cli
    url: str
    shown: str  # the URL as the command names it: where, never how to get in
    secret: str  # what must never be shown


@pytest.fixture(params=selected_kinds(["s3-moto", "redis", "zookeeper", "etcd"]))
def on_store(request: pytest.FixtureRequest) -> Iterator[OnStore]:
    kind, prefix = str(request.param), f"cli-{uuid.uuid4().hex[:8]}"
    server = request.getfixturevalue("moto_server" if kind == "s3-moto" else f"{kind}_server")
    if kind == "s3-moto":
        bucket = server.create_bucket()
        env = {"AWS_ACCESS_KEY_ID": server.access_key_id}
        cli = Cli(env | {"AWS_SECRET_ACCESS_KEY": server.secret_access_key})
        yield OnStore(
            cli,
            s3_url(server.endpoint_url, bucket),
            f"s3://{bucket}/locks",
            cli.env["AWS_SECRET_ACCESS_KEY"],
        )
        server.remove_bucket(bucket)
    elif kind == "redis":
        cli = Cli()
        shown = f"redis://127.0.0.1:{server.port}/0"
        yield OnStore(cli, server.url(prefix), shown, server.password)
    else:
        cli = Cli()
        yield OnStore(cli, server.url(prefix), server.url(prefix), "")
    cli.close()


def test_run_info_list(on_store: OnStore, markers: Path) -> None:
    cli, url = on_store.cli, on_store.url
    ran = cli.run("run", url, "v1/resource/prod/db", "--", *child("job", markers, "exit", "4"))
    assert ran.code == 4, ran.stderr
    fields = ready_fields(ran.stdout.splitlines()[0])
    assert fields["fence"] == "1"
    assert fields["path"] == "v1/resource/prod/db"
    assert fields["url"] == on_store.shown

    info = cli.run("info", "--json", url, "v1/resource/prod/db")
    assert info.code == 0, info.stderr
    record = json.loads(info.stdout)
    assert (record["state"], record["fence"], record["path"]) == ("free", 1, None)

    listed = cli.run("list", url)
    assert listed.code == 0, listed.stderr
    assert listed.stdout.splitlines()[1].split()[:3] == ["v1/resource/prod/db", "free", "1"]
    if on_store.secret:
        assert on_store.secret not in ran.stdout + ran.stderr + info.stdout + listed.stdout


def test_run_preempted_by_override(on_store: OnStore, markers: Path) -> None:
    cli, url = on_store.cli, on_store.url
    job = cli.spawn(
        "run", url, "jobs/o", "--lease", "3", "--cleanup", "1", "--", *child("job", markers, "wait")
    )
    job.expect("ready job")
    override = cli.spawn(
        "override", url, "jobs/o", "--message", "INC-9", "--hold", "2", "--fence", "1"
    )
    override.expect("holding v1/path/jobs/o (fence 2)")
    assert "lock lost (overridden)" in job.finish().one_error_line(7)
    assert (markers / "job.SIGTERM").exists()
    assert override.finish().code == 0
