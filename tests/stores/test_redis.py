"""What the Redis store adds to the store contract: its URL, its layout (the lease JSON is the
key's value), scripts called by SHA1, refused credentials, keys that are not ours, the durability
warning, and its pub/sub notices across a restart (a lock held across one:
tests/stores/test_restarts.py).

The contract, the fault contract and the lock suites run on Redis through ``store_kind``; these
are the cases only Redis has."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import threading
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from prioritylock import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock._alock import route_for
from prioritylock.stores import _redis as redis_module
from prioritylock.stores import open_store
from prioritylock.stores._base import NOT_MODIFIED
from prioritylock.stores._redis import RedisStore
from scopes import LockScope
from tests._servers.redis import RedisServer
from tests.lock.helpers import builder, make

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def prefix() -> str:
    return f"t-{uuid.uuid4().hex[:12]}/"


@pytest.fixture
def store(redis_server: RedisServer, prefix: str) -> Iterator[RedisStore]:
    opened = redis_server.store(prefix)
    yield opened
    opened.close()


# -- the URL ---------------------------------------------------------------------------------------


def test_the_url_names_host_port_database_prefix_and_credentials() -> None:
    store = open_store("redis://ops:s%40cret@redis.example:6380/3?prefix=team/locks&read_timeout=2")
    try:
        assert isinstance(store, RedisStore)
        assert store.namespace == "redis:redis.example:6380/3/team/locks/"
        kwargs = store.client.connection_pool.connection_kwargs
        assert (kwargs["username"], kwargs["password"], kwargs["db"]) == ("ops", "s@cret", 3)
        assert kwargs["socket_timeout"] == 2.0
        assert "s@cret" not in repr(store)
    finally:
        store.close()
    tls = open_store("rediss://:pw@127.0.0.1?ca_certs=/ca.pem&client_cert=/me.pem&client_key=/k")
    try:
        assert isinstance(tls, RedisStore)
        assert tls.namespace == "redis:127.0.0.1:6379/0/"
        assert tls.client.connection_pool.connection_class.__name__ == "SSLConnection"
        kwargs = tls.client.connection_pool.connection_kwargs
        assert (kwargs["ssl_ca_certs"], kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == (
            "/ca.pem",
            "/me.pem",
            "/k",
        )
    finally:
        tls.close()


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://127.0.0.1/locks", "path is the database number"),
        ("redis://127.0.0.1/0?region=x", "unknown redis:// store URL option 'region'"),
        ("redis://127.0.0.1:port/0", "port that is not a number"),
        ("redis:///0", "needs a host"),
        ("redis://127.0.0.1/0?connect_timeout=soon", "must be a number of seconds"),
        ("redis://127.0.0.1/0?ca_certs=/ca.pem", "are for TLS (rediss://)"),
    ],
)
def test_a_bad_url_is_a_config_error_that_never_shows_the_password(url: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url.replace("redis://", "redis://:hunter2@", 1))
    assert says in str(caught.value)
    assert "hunter2" not in str(caught.value)


# -- the layout ------------------------------------------------------------------------------------


def test_the_lease_document_is_the_keys_value(redis_server: RedisServer, store: RedisStore) -> None:
    lock = make(store, "jobs/nightly", "holder")
    assert lock.try_lock()
    try:
        raw = redis_server.client().get(store.prefix + LockScope.path("jobs/nightly").key)
        document = json.loads(raw)  # what `redis-cli GET` shows an operator
        assert document["fence"] == 1
        assert document["holder"]["owner"] == "holder"
    finally:
        lock.unlock()


def test_versions_never_repeat_across_keys_and_deletes(store: RedisStore) -> None:
    seen = [store.create("a", b"1"), store.create("b", b"1")]
    seen.append(store.replace("a", b"2", seen[0]))
    store.delete("a", seen[2])
    seen.append(store.create("a", b"1"))
    assert len(set(seen)) == len(seen)
    assert store.list("") == ["a", "b"], "the version keys are not listed"


def test_scripts_go_by_sha_and_whole_only_to_a_server_without_them(
    redis_server: RedisServer, store: RedisStore
) -> None:
    """A request names its script by SHA1 (EVALSHA); a server that lost the scripts (SCRIPT
    FLUSH, as after a restart) answers NOSCRIPT having run nothing, and gets the script whole
    once (EVAL), which loads it."""
    version = store.create("doc", b"0")
    client = redis_server.client()
    try:
        client.script_flush()
        client.config_resetstat()
        before = store.stats.snapshot()["replaces"]
        for data in (b"1", b"2"):
            version = store.replace("doc", data, version)
        calls = {k: (v["calls"], v["failed_calls"]) for k, v in client.info("commandstats").items()}
        assert calls["cmdstat_eval"] == (1, 0), calls
        assert calls["cmdstat_evalsha"] == (2, 1), calls  # NOSCRIPT, then by SHA1 again
        assert store.stats.snapshot()["replaces"] - before == 2  # one request per operation
        found = store.read("doc")
        assert found is not None and found.data == b"2"
    finally:
        client.close()


def test_a_key_holding_something_else_is_left_untouched(
    redis_server: RedisServer, store: RedisStore
) -> None:
    client = redis_server.client()
    client.hset(store.prefix + "foreign", "field", "value")
    for call in (
        lambda: store.read("foreign"),
        lambda: store.create("foreign", b"ours"),
        lambda: store.replace("foreign", b"ours", "1"),
        lambda: store.delete("foreign", "1"),
    ):
        with pytest.raises(StoreError, match="holds a Redis hash") as caught:
            call()
        assert not isinstance(caught.value, StoreUnavailable)
    assert client.hgetall(store.prefix + "foreign") == {b"field": b"value"}
    client.set(store.prefix + "text", b"not json")  # a string: ours to read, the lease's to judge
    found = store.read("text")
    assert found is not None and found.data == b"not json"
    with pytest.raises(ConditionFailed):
        store.replace("text", b"ours", "7")


# -- credentials -----------------------------------------------------------------------------------


@pytest.mark.parametrize("password", ["wrong-password-1234", None])
def test_refused_credentials_are_an_access_error_and_never_logged(
    redis_server: RedisServer,
    prefix: str,
    password: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    refused = RedisStore("127.0.0.1", redis_server.port, prefix=prefix, password=password)
    try:
        for call in (lambda: refused.read("k"), lambda: refused.create("k", b"x")):
            with pytest.raises(StoreAccessError) as caught:
                call()
            assert "password" in str(caught.value)
            if password is not None:
                assert password not in str(caught.value)
        assert refused.stats.total == 2
    finally:
        refused.close()
    logged = "\n".join(caplog.handler.format(r) for r in caplog.records)
    assert "StoreAccessError" in logged
    for secret in (redis_server.password, "wrong-password-1234"):
        assert secret not in logged


# -- durability ----------------------------------------------------------------------------------


def test_a_server_that_can_forget_acknowledged_writes_is_warned_of_once(
    redis_server: RedisServer,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = redis_server.client()
    monkeypatch.setattr(redis_module, "_checked", set())
    client.config_set("appendfsync", "everysec")
    try:
        with caplog.at_level(logging.WARNING, logger="prioritylock.stores"):
            for _ in range(2):
                store = redis_server.store(prefix)
                store.read("k")
                store.read("k")
                store.close()
    finally:
        client.config_set("appendfsync", "always")
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert "appendfsync everysec" in message and "lower fence" in message
    assert redis_server.password not in message


def _wait(event: threading.Event, what: str) -> None:
    assert event.wait(20), what


def test_notices_come_back_after_a_restart(redis_server: RedisServer, store: RedisStore) -> None:
    """The watch reconnects by itself, and calls each watcher once for what it may have missed;
    later writes from elsewhere are announced again."""
    calls: list[int] = []
    told = threading.Event()

    def callback() -> None:
        calls.append(1)
        told.set()

    stop = store.watch_key("doc", callback)
    writer = RedisStore(
        "127.0.0.1", redis_server.port, prefix=store.prefix, password=redis_server.password
    )
    # A store of another namespace string (the same server by another name) is "elsewhere".
    writer._token = "another-process"
    try:
        version = writer.create("doc", b"1")
        _wait(told, "a write was not announced")
        told.clear()
        redis_server.restart()
        _wait(told, "no call after the watch reconnected")
        told.clear()
        writer.replace("doc", b"2", version)
        _wait(told, "a write after the restart was not announced")
    finally:
        stop()
        writer.close()


# -- native asyncio ----------------------------------------------------------------------------


async def _hold_and_release(store: RedisStore, path: str) -> int:
    """An AsyncLock's cycle on ``store``; the connections its loop's asyncio client made."""
    lock = builder(store, path, "async-holder").build_async()
    async with lock:
        assert lock.is_current_owner()
    native = store._natives[asyncio.get_running_loop()]
    pool = native._client.connection_pool
    return len(pool._available_connections) + len(pool._in_use_connections)


def test_an_async_lock_makes_its_calls_on_the_loops_asyncio_client(store: RedisStore) -> None:
    assert route_for(store)._native == store._call_async
    assert asyncio.run(_hold_and_release(store, "jobs/native")) >= 1
    assert not store._natives  # forgotten when its loop shut down


def test_native_calls_keep_the_sync_paths_answers(store: RedisStore) -> None:
    async def calls() -> None:
        def call(op: str, *args: object) -> Any:
            pending = store._call_async(op, *args)
            assert pending is not None
            return pending

        version = await call("create", "jobs/same", b"one")
        with pytest.raises(ConditionFailed):
            await call("create", "jobs/same", b"two")
        with pytest.raises(ConditionFailed):
            await call("replace", "jobs/same", b"two", str(int(version) + 1000))
        assert await call("read_if_changed", "jobs/same", version) is NOT_MODIFIED
        newer = await call("replace", "jobs/same", b"two", version)
        found = await call("read", "jobs/same")
        assert (found.data, found.version) == (b"two", newer)
        assert store.read("jobs/same") == found  # the sync client sees the same document

    asyncio.run(calls())


def test_asyncio_run_twice_on_one_store_leaves_no_resource_warning(store: RedisStore) -> None:
    async def close_inside() -> None:
        await _hold_and_release(store, "jobs/closing")
        store.close()  # from the loop: its connections close on it

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        asyncio.run(_hold_and_release(store, "jobs/twice"))
        asyncio.run(_hold_and_release(store, "jobs/twice"))
        asyncio.run(close_inside())
        gc.collect()
    assert [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)] == []
    assert not store._natives


def test_a_native_call_to_a_server_not_there_is_unavailable_with_nothing_sent() -> None:
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    store = RedisStore("127.0.0.1", port, connect_timeout=2.0)

    async def create() -> None:
        pending = store._call_async("create", "jobs/absent", b"{}")
        assert pending is not None
        await pending

    try:
        with pytest.raises(StoreUnavailable) as raised:
            asyncio.run(create())
        assert not raised.value.outcome_unknown  # never sent: the lock need not read back
    finally:
        store.close()


def test_a_native_write_whose_answer_does_not_come_is_outcome_unknown_by_its_timeout(
    redis_server: RedisServer, prefix: str
) -> None:
    store = redis_server.store(prefix, read_timeout=0.3)
    admin = redis_server.client()

    async def create_while_paused() -> float:
        await store._call_async("read", "jobs/paused")  # type: ignore[misc]  # connected
        admin.execute_command("CLIENT", "PAUSE", 3000, "WRITE")
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            with pytest.raises(StoreUnavailable) as raised:
                await store._call_async("create", "jobs/paused", b"{}")  # type: ignore[misc]
        finally:
            admin.execute_command("CLIENT", "UNPAUSE")
        assert raised.value.outcome_unknown  # sent: it may have landed; the lock reads back
        return loop.time() - started

    try:
        assert asyncio.run(create_while_paused()) < 2.0  # by its read timeout, not the pause's end
    finally:
        admin.close()
        store.close()
