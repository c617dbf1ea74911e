"""``--components DIR``: the lock stores of Dapr component files, with Dapr's keyPrefix, and
Dapr's own ``lock.redis`` components served through the Redis store."""

from __future__ import annotations

import json
import uuid
import warnings
from pathlib import Path
from typing import Any

import pytest
import redis

from prioritylock._errors import ConfigError
from prioritylock.server._components import StoreSpec, read_components
from tests._servers.redis import RedisServer
from tests.server.helpers import Service

pytestmark = pytest.mark.timeout(60)

COMPONENT = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: {name}
spec:
  type: lock.prioritylock
  version: v1
  metadata:
  - name: url
    value: "{url}"
{extra}"""

REDIS = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: statestore
spec:
  type: state.redis
  version: v1
  metadata:
  - name: redisHost
    value: localhost:6379
"""


def _write(directory: Path, name: str, text: str) -> None:
    directory.mkdir(exist_ok=True)
    (directory / name).write_text(text, encoding="utf-8")


def test_read_components_and_key_prefixes(tmp_path: Path) -> None:
    comp = tmp_path / "components"
    _write(comp, "a.yaml", COMPONENT.format(name="locka", url="memory://a", extra=""))
    _write(comp, "state.yaml", REDIS)
    for n, value in enumerate(["name", "none", "shared"]):
        extra = f"  - name: keyPrefix\n    value: {value}\n"
        _write(comp, f"b{n}.yml", COMPONENT.format(name=f"lock{n}", url="memory://b", extra=extra))
    found = read_components(comp, "orders")
    assert found["locka"] == StoreSpec(url="memory://a", key_prefix="orders")
    assert [found[f"lock{n}"].key_prefix for n in range(3)] == ["lock0", None, "shared"]
    assert "statestore" not in found


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (COMPONENT.format(name="x", url="", extra=""), "needs a 'url'"),
        (
            COMPONENT.format(
                name="x", url="memory://x", extra="  - name: key\n    secretKeyRef: {}\n"
            ),
            "secretKeyRef is not supported",
        ),
        ("kind: [", "not readable YAML"),
    ],
)
def test_bad_components(tmp_path: Path, text: str, problem: str) -> None:
    _write(tmp_path / "c", "x.yaml", text)
    with pytest.raises(ConfigError, match=problem):
        read_components(tmp_path / "c", "app")


def test_service_from_components(tmp_path: Path) -> None:
    comp = tmp_path / "components"
    store = (tmp_path / "store").as_uri()
    _write(comp, "lock.yaml", COMPONENT.format(name="lockstore", url=store, extra=""))
    extra = "  - name: keyPrefix\n    value: none\n"
    _write(comp, "plain.yaml", COMPONENT.format(name="plain", url=store, extra=extra))
    service = Service({}, components=comp, app_id="orders")
    try:
        assert service.lock("lockstore", "job", "o1") is True
        assert service.lock("plain", "job", "o2") is True  # no prefix: another key
        assert service.lock("plain", "orders/job", "o2") is False  # the same key as lockstore's
    finally:
        assert service.stop()[0] == 0


# -- Dapr's lock.redis, served through the Redis store ---------------------------------------------

LOCK_REDIS = """\
apiVersion: dapr.io/v1alpha1
kind: Component
metadata:
  name: {name}
spec:
  type: lock.redis
  version: v1
  metadata:
{items}"""


def _lock_redis(name: str, **metadata: str) -> str:
    items = "".join(f"  - name: {key}\n    value: {value!r}\n" for key, value in metadata.items())
    return LOCK_REDIS.format(name=name, items=items)


def test_lock_redis_metadata_becomes_a_redis_url(tmp_path: Path) -> None:
    comp = tmp_path / "c"
    _write(
        comp,
        "redis.yaml",
        _lock_redis(
            "lockstore",
            redisHost="cache:6380",
            redisUsername="app",
            redisPassword="p@ss",
            redisDB="2",
            enableTLS="true",
            dialTimeout="500ms",
            readTimeout="3s",
            maxRetries="3",  # the Go client's tuning: ignored
            keyPrefix="name",
        ),
    )
    _write(comp, "open.yaml", _lock_redis("open", redisHost="cache:6379", redisPassword=""))
    found = read_components(comp, "orders")
    assert found["lockstore"] == StoreSpec(
        url="rediss://app:p%40ss@cache:6380/2?connect_timeout=0.5&read_timeout=3.0",
        key_prefix="lockstore",
    )
    # An empty redisPassword means no AUTH, as in Dapr.
    assert found["open"] == StoreSpec(url="redis://cache:6379/0", key_prefix="orders")


@pytest.mark.parametrize(
    ("metadata", "problem"),
    [
        ({}, "needs redisHost"),
        ({"redisHost": "a:1", "failover": "true"}, "failover: 'true' is not supported"),
        ({"redisHost": "a:1", "redisType": "cluster"}, "redisType: 'cluster' is not supported"),
        ({"redisHost": "a:1,b:1"}, "clusters and Sentinel are not supported"),
        ({"redisHost": "a:1", "clientCert": "PEM"}, "metadata clientCert not supported"),
        ({"redisHost": "a:1", "dialTimeout": "soon"}, "dialTimeout must be a positive duration"),
    ],
)
def test_lock_redis_metadata_it_cannot_honour_is_named(
    tmp_path: Path, metadata: dict[str, str], problem: str
) -> None:
    _write(tmp_path / "c", "redis.yaml", _lock_redis("lockstore", **metadata))
    with pytest.raises(ConfigError, match=problem) as caught:
        read_components(tmp_path / "c", "app")
    assert "lock store 'lockstore' (lock.redis)" in str(caught.value)


def test_dapr_sdk_locks_through_a_lock_redis_component(
    tmp_path: Path, redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Dapr user's lock.redis component, unchanged: the SDK tries, holds and unlocks; the
    lease is the key's JSON in the database the component names."""
    from dapr.clients import DaprClient

    comp = tmp_path / "components"
    _write(
        comp,
        "lock.yaml",
        _lock_redis(
            "lockstore",
            redisHost=f"127.0.0.1:{redis_server.port}",
            redisPassword=redis_server.password,
            redisDB="3",
            maxRetries="3",
        ),
    )
    service = Service({}, components=comp, app_id="orders")
    monkeypatch.setenv("DAPR_RUNTIME_HOST", "127.0.0.1")
    monkeypatch.setenv("DAPR_GRPC_PORT", str(service.grpc_port))
    monkeypatch.setenv("DAPR_HTTP_PORT", str(service.http_port))
    monkeypatch.setenv("DAPR_HEALTH_TIMEOUT", "10")
    resource = f"job-{uuid.uuid4().hex[:8]}"
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "The Distributed Lock API is an Alpha")
            client = DaprClient()
            try:
                assert client.try_lock("lockstore", resource, "owner1", 30).success
                assert not client.try_lock("lockstore", resource, "owner2", 30).success
                database: Any = redis.Redis(
                    port=redis_server.port, password=redis_server.password, db=3
                )
                names = [n.decode() for n in database.scan_iter(match=f"*{resource}*")]
                documents = [n for n in names if not n.endswith("//version")]
                assert len(documents) == 1, names
                lease = json.loads(database.get(documents[0]))
                assert lease["fence"] == 1 and lease["holder"] is not None
                assert client.unlock("lockstore", resource, "owner1").status.value == 0
                assert client.try_lock("lockstore", resource, "owner2", 30).success
                assert json.loads(database.get(documents[0]))["fence"] == 2
            finally:
                client.close()  # type: ignore[no-untyped-call]
    finally:
        assert service.stop()[0] == 0
