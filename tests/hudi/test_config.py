"""LockBuilder.from_properties over Hudi's shipped lock keys (prioritylock._hudi_config)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from prioritylock import ConfigError, HudiTableBuilder, LockBuilder
from prioritylock._hudi_config import read_hudi, store_url
from prioritylock._hudi_lock import KEY, HudiTableLock
from prioritylock.stores import LocalStore

FIXTURES = Path(__file__).parent / "fixtures"
PROVIDER = "org.apache.hudi.client.transaction.lock.StorageBasedLockProvider"


def read_properties(text: str) -> dict[str, str]:
    """A Java .properties file as Hudi reads hudi-defaults.conf: key=value, key value, # ! notes."""
    found = {}
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith(("#", "!")):
            key, value = re.split(r"\s*[=:\s]\s*", line, maxsplit=1)
            found[key] = value.strip()
    return found


def test_a_writer_configuration_file_as_it_is(tmp_path: Path) -> None:
    props = read_properties((FIXTURES / "hudi-defaults.conf").read_text())
    props["hoodie.base.path"] = str(tmp_path / "warehouse" / "orders")  # s3a:// in production
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a real configuration gets no warning
        builder = LockBuilder.from_properties(props)
    assert isinstance(builder, HudiTableBuilder)
    lock = builder.build()
    assert isinstance(lock, HudiTableLock) and lock.key == KEY
    assert (lock._st.validity, lock._st.renew_interval, lock._st.drift) == (600, 45, 0.5)
    assert isinstance(lock.store, LocalStore)
    assert lock.try_lock()
    assert lock.store.read(KEY) is not None
    lock.unlock()


def test_defaults_are_hudis() -> None:
    settings = read_hudi({"hoodie.base.path": "s3a://b/t/", "hoodie.write.lock.provider": PROVIDER})
    assert settings is not None
    assert (settings.validity, settings.renew_interval) == (300, 30)
    assert settings.base_path == "s3a://b/t" and settings.storage_provider


def test_without_a_provider_the_lease_is_prioritylocks_own(tmp_path: Path) -> None:
    builder = LockBuilder.from_properties(
        {
            "hoodie.base.path": str(tmp_path / "orders"),
            "hoodie.write.lock.storage.validity.timeout.secs": "120",
            "hoodie.write.lock.storage.renew.interval.secs": "12",
        }
    )
    assert isinstance(builder, LockBuilder)  # no provider named: prioritylock's own lease
    cfg = builder.config()
    assert (cfg.lease_timeout, cfg.renew_interval, cfg.watch_interval) == (120, 12, 12)
    assert cfg.key.startswith("v1/path/hudi/orders-")


@pytest.mark.parametrize(
    ("props", "key"),
    [
        ({"hoodie.write.lock.storage.validity.timeout.secs": "299"}, "validity.timeout.secs"),
        ({"hoodie.write.lock.storage.renew.interval.secs": "31"}, "validity.timeout.secs"),
        (
            {
                "hoodie.write.lock.storage.validity.timeout.secs": "9",
                "hoodie.write.lock.storage.renew.interval.secs": "0",
            },
            "validity.timeout.secs",
        ),
        (
            {
                "hoodie.write.lock.storage.validity.timeout.secs": "10",
                "hoodie.write.lock.storage.renew.interval.secs": "0",
            },
            "renew.interval.secs",
        ),
        ({"hoodie.write.lock.storage.renew.interval.secs": "1.5"}, "renew.interval.secs"),
        ({"hoodie.write.lock.provider": "org.x.ZookeeperBasedLockProvider"}, "lock.provider"),
    ],
)
def test_hudis_rules_are_config_errors_naming_the_key(props: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LockBuilder.from_properties({"hoodie.base.path": "/tmp/t", **props})
    assert caught.value.option is not None and caught.value.option.endswith("." + key)
    assert str(caught.value).startswith(caught.value.option + ": ")


def test_the_validity_is_exactly_ten_renewals_at_least() -> None:
    settings = read_hudi(
        {
            "hoodie.base.path": "/t",
            "hoodie.write.lock.storage.validity.timeout.secs": 10,
            "hoodie.write.lock.storage.renew.interval.secs": 1,
        }
    )
    assert settings is not None and (settings.validity, settings.renew_interval) == (10, 1)


def test_the_deprecated_alias_and_the_draft_names_warn() -> None:
    base = {"hoodie.base.path": "/t"}
    with pytest.warns(DeprecationWarning, match="heartbeat.poll.secs"):
        alias = read_hudi({**base, "hoodie.write.lock.storage.heartbeat.poll.secs": "20"})
    assert alias is not None and alias.renew_interval == 20
    with pytest.warns(DeprecationWarning, match="heartbeat.poll.secs"):
        both = read_hudi(
            {
                **base,
                "hoodie.write.lock.storage.heartbeat.poll.secs": "20",
                "hoodie.write.lock.storage.renew.interval.secs": "25",
            }
        )
    assert both is not None and both.renew_interval == 25  # the shipped name wins
    with pytest.warns(DeprecationWarning, match="conditional_write"):
        draft = read_hudi(
            {
                **base,
                "hoodie.write.lock.conditional_write.lock_validity_timeout_ms": "60000",
                "hoodie.write.lock.conditional_write.heartbeat_poll_ms": "5000",
            }
        )
    assert draft is not None and (draft.validity, draft.renew_interval) == (60, 5)


def test_an_unknown_lock_key_is_warned_about_not_dropped() -> None:
    with pytest.warns(UserWarning, match=r"hoodie\.write\.lock\.storage\.validity\.timeout\b"):
        read_hudi({"hoodie.base.path": "/t", "hoodie.write.lock.storage.validity.timeout": "60"})


def test_the_draft_location_cant_move_hudis_lock() -> None:
    with (
        pytest.warns(DeprecationWarning, match="locks_location"),
        pytest.raises(ConfigError) as caught,
    ):
        read_hudi(
            {
                "hoodie.base.path": "/t",
                "hoodie.write.lock.provider": PROVIDER,
                "hoodie.write.lock.conditional_write.locks_location": "/elsewhere",
            }
        )
    assert caught.value.option == "hoodie.write.lock.conditional_write.locks_location"


@pytest.mark.parametrize(
    ("path", "url"),
    [
        ("s3a://lake/warehouse/orders", "s3://lake/warehouse/orders"),
        ("s3://lake/orders", "s3://lake/orders"),
        ("gs://lake/orders", "gs://lake/orders"),
        ("abfss://data@acct1.dfs.core.windows.net/t/orders", "az://data/t/orders?account=acct1"),
        ("wasbs://data@acct1.blob.core.windows.net/orders", "az://data/orders?account=acct1"),
        ("/srv/lake/orders", "file:///srv/lake/orders"),
    ],
)
def test_hudi_paths_as_store_urls(path: str, url: str) -> None:
    assert store_url(path) == url


def test_the_azure_keys_are_known_and_kept() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        settings = read_hudi(
            {
                "hoodie.base.path": "abfss://data@acct1.dfs.core.windows.net/orders",
                "hoodie.write.lock.azure.connection.string": "UseDevelopmentStorage=true",
                "hoodie.write.lock.azure.sas.token": "",
            }
        )
    assert settings is not None
    assert dict(settings.azure) == {
        "hoodie.write.lock.azure.connection.string": "UseDevelopmentStorage=true"
    }


def test_prioritylock_keys_still_win(tmp_path: Path) -> None:
    builder = LockBuilder.from_properties(
        {
            "hoodie.base.path": str(tmp_path),
            "hoodie.write.lock.provider": PROVIDER,
            "prioritylock.owner": "backup-job",
            "prioritylock.poll_interval": "0.2",
        }
    )
    assert isinstance(builder, HudiTableBuilder)  # narrows: build() is a HudiTableLock
    lock = builder.build()
    assert lock.name == "backup-job" and lock._st.poll_interval == 0.2


def test_the_azure_connection_string_key_reaches_the_table(request: pytest.FixtureRequest) -> None:
    """abfss:// as Hudi has it, authenticated by hoodie.write.lock.azure.connection.string."""
    server = request.getfixturevalue("azurite_server")
    container = server.create_container()
    try:
        builder = LockBuilder.from_properties(
            {
                "hoodie.base.path": f"abfss://{container}@devstoreaccount1.dfs.core.windows.net/t",
                "hoodie.write.lock.provider": PROVIDER,
                "hoodie.write.lock.azure.connection.string": server.connection_string,
            }
        )
        assert isinstance(builder, HudiTableBuilder)
        lock = builder.build()
        assert lock.try_lock()
        lock.unlock()
        assert server.blob_names(container) == ["t/" + KEY]
    finally:
        server.remove_container(container)


def test_an_unused_option_points_at_a_command_the_cli_has(tmp_path: Path) -> None:
    from prioritylock.cli._parse import build_parser

    with pytest.raises(ConfigError) as caught:
        LockBuilder.from_properties(
            {
                "hoodie.base.path": str(tmp_path),
                "hoodie.write.lock.provider": PROVIDER,
                "prioritylock.store": "memory://x",
            }
        )
    found = re.search(r"with prioritylock (.+?) BASE_PATH\)", str(caught.value))
    assert found is not None, caught.value
    words = [*found.group(1).split(), str(tmp_path)]
    args = build_parser().parse_args(words)  # exits (SystemExit) on an unknown command or flag
    assert (args.command, args.hudi_command, args.base_path) == ("hudi", "force-unlock", words[-1])
