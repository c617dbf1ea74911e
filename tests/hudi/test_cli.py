"""``prioritylock hudi info|watch|force-unlock BASE_PATH``, run as a user would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from prioritylock import _hudi as hudi
from prioritylock._hudi_lock import KEY
from prioritylock.stores import LocalStore, ObjectStore
from tests.cli.helpers import Cli
from tests.hudi.test_mixed import events, participant

pytestmark = pytest.mark.timeout(60)

JAVA = hudi.HudiLockData(False, 4_102_444_800_000, "0b6f0c5e-2d2a-4c55-9a53-0f4b2f7a9c11")


@pytest.fixture
def cli() -> Iterator[Cli]:
    runner = Cli()
    yield runner
    runner.close()


@pytest.fixture
def table(tmp_path: Path) -> tuple[str, ObjectStore]:
    """A table whose lock a Java writer left held until 2100 (its release got a 429)."""
    store = LocalStore(tmp_path)
    store.create(KEY, hudi.encode(JAVA))
    return str(tmp_path), store


def doc(store: ObjectStore) -> hudi.HudiLockData:
    seen = store.read(KEY)
    assert seen is not None
    return hudi.decode(seen.data, key=KEY)


def test_info(cli: Cli, table: tuple[str, ObjectStore], tmp_path: Path) -> None:
    base, _ = table
    done = cli.run("hudi", "info", base + "/")
    assert done.code == 0, done.stderr
    assert f"held: owner {JAVA.owner}, validUntil {JAVA.valid_until_ms}" in done.stdout
    shown: dict[str, Any] = json.loads(cli.run("hudi", "info", "--json", base).stdout)
    assert shown["owner"] == JAVA.owner and shown["valid_until_ms"] == JAVA.valid_until_ms
    assert shown["state"] == "held" and not shown["expired"] and shown["time_left"] > 0
    (tmp_path / "empty").mkdir()
    assert "never taken" in cli.run("hudi", "info", str(tmp_path / "empty")).stdout


def test_force_unlock_acts_only_on_what_the_operator_saw(
    cli: Cli, table: tuple[str, ObjectStore]
) -> None:
    base, store = table
    guard = ["--owner", JAVA.owner, "--valid-until"]
    stale = cli.run("hudi", "force-unlock", base, *guard, str(JAVA.valid_until_ms - 1))
    assert "no longer shows" in stale.one_error_line(9)
    assert doc(store) == JAVA
    unasked = cli.run("hudi", "force-unlock", base)
    assert "not on a terminal" in unasked.one_error_line(2)
    done = cli.run("hudi", "force-unlock", base, *guard, str(JAVA.valid_until_ms))
    assert done.code == 0, done.stderr
    assert doc(store) == hudi.forced(JAVA)
    again = cli.run("hudi", "force-unlock", "--yes", base)
    assert "not held" in again.one_error_line(8)


def test_watch_prints_each_change(cli: Cli, table: tuple[str, ObjectStore]) -> None:
    base, store = table
    watching = cli.spawn("hudi", "watch", "--interval", "0.05", "--count", "1", base)
    assert "held: owner" in watching.expect("")
    seen = store.read(KEY)
    assert seen is not None
    store.replace(KEY, hudi.encode(hudi.forced(JAVA)), seen.version)
    assert "released" in watching.expect("")
    assert watching.finish().code == 0


def test_watch_refuses_an_interval_that_would_busy_loop(
    cli: Cli, table: tuple[str, ObjectStore]
) -> None:
    base, _store = table
    refused = cli.run("hudi", "watch", base, "--interval", "0")
    assert refused.code == 2 and "at least" in refused.stderr, refused.stderr


def test_on_s3_from_the_standard_aws_environment(request: pytest.FixtureRequest) -> None:
    """s3a:// as Hudi has it; endpoint and credentials from AWS_* as the SDK reads them."""
    server = request.getfixturevalue("moto_server")
    bucket = server.create_bucket()
    java = events(
        participant(
            {
                "backend": "s3",
                "endpoint": server.endpoint_url,
                "bucket": bucket,
                "key": "warehouse/orders/" + KEY,
                "mode": "crash",
                "validity": 600.0,
                "renew": 60.0,
            }
        )
    )
    runner = Cli(
        {
            "AWS_ENDPOINT_URL": server.endpoint_url,
            "AWS_ACCESS_KEY_ID": server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": server.secret_access_key,
            "AWS_DEFAULT_REGION": server.region,
        }
    )
    try:
        base = f"s3a://{bucket}/warehouse/orders"
        shown = json.loads(runner.run("hudi", "info", "--json", base).stdout)
        assert shown["owner"] == java[0]["owner"] and shown["state"] == "held"
        done = runner.run("hudi", "force-unlock", "--yes", base)
        assert done.code == 0, done.stderr
        assert json.loads(runner.run("hudi", "info", "--json", base).stdout)["state"] == "released"
    finally:
        runner.close()
        server.remove_bucket(bucket)


@pytest.mark.parametrize("base", ["hdfs://namenode/warehouse/orders", "relative/table"])
def test_a_base_path_it_cant_read_lists_what_it_can(cli: Cli, base: str) -> None:
    said = cli.run("hudi", "info", base).one_error_line(3)
    for form in ("absolute local path", "s3a://", "gs://", "abfss://"):
        assert form in said, said
    assert "memory://" not in said, "not the store URLs of the lease commands"
