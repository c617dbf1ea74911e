"""LockBuilder: validation names the option, defaults, the override, and from_properties."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from prioritylock import OVERRIDE_PRIORITY, ConfigError, LockBuilder, LockListener
from prioritylock.stores import LocalStore, MemoryStore
from scopes import LockScope

pytestmark = pytest.mark.timeout(30)


def base() -> LockBuilder:
    return LockBuilder().store(MemoryStore()).path("jobs/x")


def test_defaults() -> None:
    cfg = base().config()
    assert cfg.priority == 0 and not cfg.forceful and cfg.keep_waiting
    assert cfg.lease_timeout == 30 and cfg.renew_interval == 10
    assert cfg.cleanup_timeout == 10 and cfg.watch_interval == 5  # half the cleanup window
    assert cfg.max_clock_drift == 0.5
    assert cfg.key == "v1/path/jobs/x"
    assert "@" in cfg.owner  # user@host:pid


def test_config_is_frozen() -> None:
    cfg = base().config()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        cfg.priority = 5  # type: ignore[misc]
    assert attrs.evolve(cfg, priority=5).priority == 5


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("lease_timeout", 0),
        ("lease_timeout", -1),
        ("lease_timeout", math.nan),
        ("lease_timeout", math.inf),
        ("lease_timeout", "30"),
        ("lease_timeout", True),
        ("cleanup_timeout", -0.1),
        ("waiting_timeout", math.nan),
        ("renew_interval", 0),
        ("watch_interval", -1),
        ("max_clock_drift", -1),
        ("poll_interval", 0),
        ("store_timeout", 0),
        ("priority", -1),
        ("priority", 2_147_483_648),
        ("priority", OVERRIDE_PRIORITY),
        ("priority", 1.5),
        ("priority", True),
        ("forceful", "yes"),
        ("keep_waiting", 1),
        ("owner", ""),
        ("owner", "x" * 257),
        ("owner", "bad\x00owner"),
        ("message", "m" * 5000),
        ("path", ""),
        ("path", "/abs"),
        ("path", "a//b"),
        ("path", "a/../b"),
        ("store", 42),
        ("store", "nope://x"),
        ("scope", "v1/path/x"),
        ("listener", object()),
    ],
)
def test_bad_values_raise_config_error_naming_the_option(option: str, value: Any) -> None:
    with pytest.raises(ConfigError) as caught:
        getattr(base(), option)(value)
    assert isinstance(caught.value, ValueError)
    if option != "store" or not isinstance(value, str):
        assert option in str(caught.value)


@pytest.mark.parametrize("missing", ["store", "scope"])
def test_missing_store_or_scope(missing: str) -> None:
    builder = LockBuilder()
    if missing != "store":
        builder.store(MemoryStore())
    if missing != "scope":
        builder.path("x")
    with pytest.raises(ConfigError, match=missing):
        builder.build()


def test_a_missing_scope_names_both_ways_to_name_the_lock() -> None:
    with pytest.raises(ConfigError) as caught:
        LockBuilder().store(MemoryStore()).build()
    assert ".path(" in str(caught.value) and ".scope(" in str(caught.value), caught.value


def test_contradictions() -> None:
    with pytest.raises(ConfigError, match="renew_interval"):
        base().lease_timeout(5).renew_interval(5).build()
    with pytest.raises(ConfigError, match="max_clock_drift"):
        base().lease_timeout(1).max_clock_drift(1).build()


def test_emergency_override() -> None:
    cfg = base().emergency_override(message="db on fire").config()
    assert cfg.priority == OVERRIDE_PRIORITY and cfg.forceful and cfg.waiting_timeout == 0
    assert cfg.message == "db on fire" and cfg.override
    with pytest.raises(ConfigError, match="message"):
        base().emergency_override(message="  ")


def test_scope_and_url() -> None:
    cfg = (
        LockBuilder()
        .store("memory://builder-test")
        .scope(LockScope.resource("prod", "db"))
        .config()
    )
    assert cfg.key == "v1/resource/prod/db"
    assert isinstance(cfg.store, MemoryStore)


def lease_builder(props: Mapping[str, object]) -> LockBuilder:
    """``from_properties`` over keys that name no Hudi provider: a ``LockBuilder`` (its type
    says it may be a ``HudiTableBuilder``; this narrows it)."""
    builder = LockBuilder.from_properties(props)
    assert isinstance(builder, LockBuilder)
    return builder


def test_from_properties(tmp_path: Path) -> None:
    props = {
        "prioritylock.store": f"file://{tmp_path}",
        "prioritylock.scope": "v1/resource/prod/orders-db",
        "prioritylock.owner": "worker-7",
        "prioritylock.priority": "5",
        "prioritylock.forceful": "true",
        "prioritylock.keep_waiting": "false",
        "prioritylock.lease_timeout": "12",
        "prioritylock.cleanup_timeout": "2.5",
        "prioritylock.waiting_timeout": "4",
        "unrelated.key": "ignored",
    }
    cfg = lease_builder(props).config()
    assert isinstance(cfg.store, LocalStore)
    assert cfg.key == "v1/resource/prod/orders-db"
    assert (cfg.owner, cfg.priority, cfg.forceful, cfg.keep_waiting) == ("worker-7", 5, True, False)
    assert (cfg.lease_timeout, cfg.cleanup_timeout, cfg.waiting_timeout) == (12, 2.5, 4)
    lock = lease_builder(props).build()
    assert lock.try_lock()
    lock.unlock()


@pytest.mark.parametrize(
    ("props", "named"),
    [
        ({"prioritylock.colour": "red"}, "prioritylock.colour"),
        ({"prioritylock.priority": "high"}, "prioritylock.priority"),
        ({"prioritylock.forceful": "maybe"}, "prioritylock.forceful"),
        ({"prioritylock.scope": "nope"}, "prioritylock.scope"),
        ({"hoodie.write.lock.conditional_write.heartbeat_poll_ms": "100"}, "hoodie.base.path"),
    ],
)
def test_from_properties_errors_name_the_key(props: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        lease_builder(props).config()


def test_hudi_keys(tmp_path: Path) -> None:
    props = {
        "hoodie.base.path": str(tmp_path / "lake" / "orders"),
        "hoodie.write.lock.storage.validity.timeout.secs": "60",
        "hoodie.write.lock.storage.renew.interval.secs": "5",
    }
    cfg = lease_builder(props).config()
    assert isinstance(cfg.store, LocalStore)
    assert cfg.lease_timeout == 60 and cfg.renew_interval == 5 and cfg.watch_interval == 5
    assert cfg.key.startswith("v1/path/hudi/orders-")
    # Another writer of the same table names the same lock; another table does not.
    again = lease_builder(dict(props)).config()
    assert again.key == cfg.key
    other = lease_builder({**props, "hoodie.base.path": str(tmp_path / "t2")}).config()
    assert other.key != cfg.key
    defaults = lease_builder({"hoodie.base.path": str(tmp_path / "lake" / "x")}).config()
    assert defaults.lease_timeout == 300 and defaults.renew_interval == 30
    assert (tmp_path / "lake" / "x" / ".hoodie" / ".locks").is_dir()
    # our own keys win over Hudi's
    mixed = lease_builder({**props, "prioritylock.lease_timeout": "90"}).config()
    assert mixed.lease_timeout == 90


def test_listener_is_accepted() -> None:
    listener = LockListener()
    assert base().listener(listener).config().listener is listener


def _s3() -> LockBuilder:
    # An S3 store object: building a lock sends no request, so no server is needed.
    url = "s3://bucket/locks?endpoint=http://127.0.0.1:9&region=us-east-1"
    return LockBuilder().store(url).path("jobs/x")


def test_a_watch_interval_that_misses_the_cleanup_window_warns_on_a_shared_store() -> None:
    with pytest.warns(UserWarning, match="watch_interval") as caught:
        _s3().cleanup_timeout(2).watch_interval(5).build().close()
    said = str(caught[0].message)
    assert "watch_interval (5 s)" in said and "cleanup_timeout (2 s)" in said, said
    assert "max_clock_drift" in said
    assert caught[0].filename == __file__, "the warning points at the caller"


@pytest.mark.parametrize(
    "builder",
    [
        lambda _: _s3().cleanup_timeout(2).watch_interval(1),  # one read falls in the window
        lambda _: _s3().cleanup_timeout(2),  # the default always fits
        lambda _: _s3().cleanup_timeout(0).watch_interval(5),  # no window: passes at once
        # A window no longer than the drift allowance is empty: no watch interval fits it.
        lambda _: _s3().cleanup_timeout(0.5).max_clock_drift(0.5).watch_interval(0.05),
        lambda _: base().cleanup_timeout(2).watch_interval(5),  # one process: told by a notice
        lambda tmp: (
            LockBuilder().store(LocalStore(tmp)).path("x").cleanup_timeout(2).watch_interval(5)
        ),
    ],
)
def test_no_warning_where_the_holder_is_told_in_time(builder: Any, tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        builder(tmp_path).config()


@pytest.mark.parametrize(
    ("setting", "warns"),
    [
        ("10.0.3.7", False),  # another host's request is a hint: told at once
        ("0.0.0.0:7700=203.0.113.5", False),
        ("127.0.0.1", True),  # hints reach this machine only
        ("off", True),
    ],
)
def test_with_hints_other_hosts_reach_a_long_watch_interval_does_not_warn(
    setting: str, warns: bool
) -> None:
    from prioritylock._hints import HINTS, parse_setting

    HINTS.configure(parse_setting(setting))  # as PRIORITYLOCK_HINTS=setting (nothing opened)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _s3().cleanup_timeout(2).watch_interval(5).config()
    finally:
        HINTS.configure(parse_setting(os.environ.get("PRIORITYLOCK_HINTS")))
    said = [str(w.message) for w in caught]
    assert bool(said) == warns, said
    if warns:
        assert "PRIORITYLOCK_HINTS" in said[0]
        assert ("loopback" in said[0]) == (setting != "off"), said[0]
