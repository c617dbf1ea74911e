"""GCSStore against fake-gcs-server: error mapping, request counts, URLs, and transport faults.

The store contract runs in ``test_contract.py``; these are the GCS-specific behaviours. Faults are
injected under the SDK, at the requests transport (:class:`FaultyAdapter`), while the real
emulator serves every request that is let through: no part of the service is mocked.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
import requests
from google.api_core import exceptions as api_exceptions

from prioritylock import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreError,
)
from prioritylock.stores import NOT_MODIFIED, ConditionalReader, Versioned, open_store
from prioritylock.stores._gcs import EMULATOR_ENV, MAX_OBJECT_BYTES, GCSStore
from tests._servers.gcs import FakeGCSServer, FaultyAdapter, gcs_error_body

pytestmark = [pytest.mark.timeout(60)]

KEY = "team/resource"


@dataclass
class Faulty:
    """A store whose HTTP requests pass through ``adapter`` on their way to fake-gcs-server."""

    store: GCSStore
    adapter: FaultyAdapter

    def sent_since(self, mark: int) -> list[str]:
        return self.adapter.sent[mark:]


@pytest.fixture
def bucket(fake_gcs_server: FakeGCSServer) -> str:
    return fake_gcs_server.create_bucket()


@pytest.fixture
def gcs(fake_gcs_server: FakeGCSServer, bucket: str) -> Iterator[GCSStore]:
    store = fake_gcs_server.store(bucket)
    yield store
    store.close()


def _faulty(
    server: FakeGCSServer,
    bucket: str,
    error_body: Callable[[int], tuple[bytes, dict[str, str]]] = gcs_error_body,
) -> Iterator[Faulty]:
    adapter = FaultyAdapter(error_body)
    client = server.client(http=server.faulty_session(adapter))
    try:
        yield Faulty(GCSStore(bucket, "locks/", client=client), adapter)
    finally:
        client.close()


@pytest.fixture
def faulty(fake_gcs_server: FakeGCSServer, bucket: str) -> Iterator[Faulty]:
    yield from _faulty(fake_gcs_server, bucket)


def _call(store: GCSStore, operation: str, version: str = "1") -> object:
    """Run one seam operation on :data:`KEY`."""
    if operation == "read":
        return store.read(KEY)
    if operation == "read_if_changed":
        return store.read_if_changed(KEY, version)
    if operation == "create":
        return store.create(KEY, b"new")
    if operation == "replace":
        return store.replace(KEY, b"new", version)
    if operation == "delete":
        store.delete(KEY, version)
        return None
    return store.list("")


# -- conditions ----------------------------------------------------------------------------------


def test_lost_conditions_are_condition_failed_chained_to_the_sdk_error(gcs: GCSStore) -> None:
    first = gcs.create(KEY, b"one")
    second = gcs.replace(KEY, b"two", first)
    cases: dict[str, Callable[[], object]] = {
        "create on existing": lambda: gcs.create(KEY, b"x"),
        "replace with stale generation": lambda: gcs.replace(KEY, b"x", first),
        "replace of absent": lambda: gcs.replace("absent", b"x", second),
        "delete of absent": lambda: gcs.delete("absent", second),
    }
    for what, call in cases.items():
        with pytest.raises(ConditionFailed) as caught:
            call()
        assert isinstance(caught.value.__cause__, api_exceptions.GoogleAPICallError), what
    assert gcs.read(KEY) == Versioned(b"two", second)


@pytest.mark.parametrize("version", ["0", "-1", "abc", "", "1.5", " 1", "١٢"])
def test_versions_that_are_not_generations_fail_without_a_request(
    faulty: Faulty, version: str
) -> None:
    """``0`` matters most: to GCS it means "no live object", which would make replace a create."""
    for operation in ("replace", "delete"):
        with pytest.raises(ConditionFailed):
            _call(faulty.store, operation, version)
    assert faulty.adapter.sent == []
    assert faulty.store.stats.total == 0
    assert faulty.store.read(KEY) is None, "a replace at version '0' created the object"


def test_objects_live_under_the_prefix(
    fake_gcs_server: FakeGCSServer, gcs: GCSStore, bucket: str
) -> None:
    gcs.create("a/b", b"x")
    assert fake_gcs_server.object_names(bucket) == ["locks/a/b"]
    assert gcs.list("") == ["a/b"]


def test_objects_over_the_multipart_limit_are_refused_before_any_request(faulty: Faulty) -> None:
    with pytest.raises(ConfigError, match="limit"):
        faulty.store.create(KEY, bytes(MAX_OBJECT_BYTES + 1))
    assert faulty.adapter.sent == []


# -- request counts ------------------------------------------------------------------------------


def test_every_operation_is_one_http_request_and_nothing_runs_behind_it(faulty: Faulty) -> None:
    """No ``reload()`` before a download, and none of the SDK's background bucket requests."""
    store = faulty.store
    threads_before = set(threading.enumerate())
    steps: list[tuple[str, Callable[[], object], str]] = []
    version = ""

    def create() -> None:
        nonlocal version
        version = store.create(KEY, b"one")

    def replace() -> None:
        nonlocal version
        version = store.replace(KEY, b"two", version)

    steps = [
        ("read absent", lambda: store.read(KEY), "GET /download/"),
        ("create", create, "POST /upload/"),
        ("read", lambda: store.read(KEY), "GET /download/"),
        ("replace", replace, "POST /upload/"),
        ("list", lambda: store.list(""), "GET /storage/v1/b/"),
        ("delete", lambda: store.delete(KEY, version), "DELETE /storage/v1/b/"),
    ]
    for what, step, request in steps:
        mark = len(faulty.adapter.sent)
        step()
        sent = faulty.sent_since(mark)
        assert len(sent) == 1 and sent[0].startswith(request), f"{what} sent {sent}"
    # A background request would have been recorded above, or its thread would still be alive.
    assert set(threading.enumerate()) <= threads_before
    assert "multipart" in " ".join(faulty.adapter.sent), "uploads must be single multipart requests"
    assert store.stats.total == len(steps) == len(faulty.adapter.sent)


# -- conditional reads ---------------------------------------------------------------------------


def _statuses(store: GCSStore) -> list[int]:
    """The HTTP status of every response the store's client gets from now on."""
    statuses: list[int] = []

    def record(response: requests.Response, *_args: object, **_kwargs: object) -> None:
        statuses.append(response.status_code)

    store.client._http.hooks["response"].append(record)
    return statuses


def test_read_if_changed_is_one_download_with_if_generation_not_match(faulty: Faulty) -> None:
    """fake-gcs-server 0.1.1 ignores the condition and sends the object: the store compares."""
    store = faulty.store
    assert isinstance(store, ConditionalReader)
    first = store.create(KEY, b"one")
    statuses = _statuses(store)
    store.stats.reset()
    mark = len(faulty.adapter.sent)
    assert store.read_if_changed(KEY, first) is NOT_MODIFIED
    second = store.replace(KEY, b"two", first)
    assert store.read_if_changed(KEY, first) == Versioned(b"two", second)
    sent = faulty.sent_since(mark)
    assert len(sent) == 3, sent
    for request in sent[0], sent[2]:
        assert request.startswith("GET /download/") and f"ifGenerationNotMatch={first}" in request
    assert statuses == [200, 200, 200], (
        "fake-gcs-server now answers ifGenerationNotMatch with 304: say so in the module notes"
    )
    assert (store.stats.reads, store.stats.not_modified) == (2, 1)


def test_a_304_is_not_modified_and_costs_one_request(faulty: Faulty) -> None:
    """What GCS itself answers for an unchanged object (fabricated: the emulator can't)."""
    store = faulty.store
    version = store.create(KEY, b"one")
    store.stats.reset()
    faulty.adapter.fail_next("GET", status=304)
    assert store.read_if_changed(KEY, version) is NOT_MODIFIED
    assert store.stats.snapshot()["total"] == 1 and store.stats.not_modified == 1
    # Without a condition a 304 means nothing sensible: an error, never "unchanged".
    faulty.adapter.fail_next("GET", status=304)
    with pytest.raises(StoreError, match="HTTP 304"):
        store.read(KEY)
    assert store.stats.not_modified == 1


@pytest.mark.parametrize("version", ["0", "-1", "abc", "", " 1", "١٢"])
def test_a_version_that_is_not_a_generation_is_read_without_a_condition(
    faulty: Faulty, version: str
) -> None:
    current = faulty.store.create(KEY, b"data")
    mark = len(faulty.adapter.sent)
    assert faulty.store.read_if_changed(KEY, version) == Versioned(b"data", current)
    (sent,) = faulty.sent_since(mark)
    assert "ifGenerationNotMatch" not in sent, sent


def test_store_made_clients_have_background_bucket_requests_off(gcs: GCSStore) -> None:
    assert gcs.client._bucket_metadata_cache is None


# -- access ----------------------------------------------------------------------------------


def test_missing_bucket_is_an_access_error_naming_it(fake_gcs_server: FakeGCSServer) -> None:
    store = fake_gcs_server.store("plk-no-such-bucket")
    try:
        for operation in ("create", "replace", "list"):
            with pytest.raises(StoreAccessError, match="plk-no-such-bucket") as caught:
                _call(store, operation)
            assert "bucket does not exist" in str(caught.value)
        # A 404 on a read or delete does not say whether the bucket or the object is missing
        # (GCS answers "No such object" for both): absent, as for an existing bucket.
        assert store.read(KEY) is None
        assert store.read_if_changed(KEY, "1") is None
        with pytest.raises(ConditionFailed):
            store.delete(KEY, "1")
    finally:
        store.close()


def test_a_404_that_names_the_bucket_is_an_access_error_on_reads_too(
    fake_gcs_server: FakeGCSServer, bucket: str
) -> None:
    def no_bucket(status: int) -> tuple[bytes, dict[str, str]]:
        body = {"error": {"code": status, "message": "The specified bucket does not exist."}}
        return json.dumps(body).encode(), {"Content-Type": "application/json"}

    for faulty in _faulty(fake_gcs_server, bucket, no_bucket):
        for method, operation in (
            ("GET", "read"),
            ("GET", "read_if_changed"),
            ("DELETE", "delete"),
        ):
            faulty.adapter.fail_next(method, status=404)
            with pytest.raises(StoreAccessError, match=bucket):
                _call(faulty.store, operation)


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize(
    ("method", "operation"), [("GET", "read"), ("GET", "read_if_changed"), ("POST", "create")]
)
def test_refused_credentials_are_access_errors_naming_the_bucket(
    faulty: Faulty, bucket: str, status: int, method: str, operation: str
) -> None:
    faulty.adapter.fail_next(method, status=status)
    with pytest.raises(StoreAccessError, match=bucket) as caught:
        _call(faulty.store, operation)
    assert "roles/storage.objectUser" in str(caught.value)
    assert isinstance(caught.value, PermissionError)


def test_no_credentials_is_an_access_error_saying_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(EMULATOR_ENV, raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/prioritylock-key.json")
    with pytest.raises(StoreAccessError, match="plk-bucket") as caught:
        open_store("gs://plk-bucket/locks")
    assert "GOOGLE_APPLICATION_CREDENTIALS" in str(caught.value)
    assert caught.value.__cause__ is not None


# -- other errors (transient faults: tests/stores/test_faults.py) -----------------------------


def test_other_client_errors_are_store_errors(faulty: Faulty) -> None:
    faulty.adapter.fail_next("POST", status=400)
    with pytest.raises(StoreError) as caught:
        faulty.store.create(KEY, b"x")
    assert type(caught.value) is StoreError


# -- open_store and configuration ----------------------------------------------------------------


def test_open_store_honours_storage_emulator_host(
    monkeypatch: pytest.MonkeyPatch, fake_gcs_server: FakeGCSServer, bucket: str
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, fake_gcs_server.url)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/never-read.json")
    store = open_store(f"gs://{bucket}/team%20a/locks/?project=p&read_timeout=5")
    try:
        assert isinstance(store, GCSStore)
        assert store.prefix == "team a/locks/"
        version = store.create(KEY, b"via env")
        assert store.read(KEY) == Versioned(b"via env", version)
        assert fake_gcs_server.object_names(bucket) == [f"team a/locks/{KEY}"]
    finally:
        store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("gs://", "needs a bucket name"),
        ("gs:///prefix", "needs a bucket name"),
        ("gs://bucket?nope=1", "unknown gs:// store URL option 'nope'"),
        ("gs://bucket?project=", "option 'project' is empty"),
        ("gs://bucket?read_timeout=soon", "must be a number of seconds"),
        ("gs://bucket?read_timeout=0", "positive number"),
        ("gs://Upper_Case", "GCS bucket name"),
        ("gs://b", "GCS bucket name"),
        ("gs://bucket:4443", "not host:port"),
        ("gs://bucket#frag", "fragment"),
        ("gs://bucket/a/../b", "segment"),
    ],
)
def test_open_store_url_errors(
    monkeypatch: pytest.MonkeyPatch, fake_gcs_server: FakeGCSServer, url: str, message: str
) -> None:
    monkeypatch.setenv(EMULATOR_ENV, fake_gcs_server.url)
    with pytest.raises(ConfigError, match=message):
        open_store(url)


def test_open_store_refuses_credentials_in_the_url_without_echoing_them() -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("gs://someone:hunter2@bucket/prefix")
    assert "hunter2" not in str(caught.value)


def test_client_and_client_options_do_not_mix(fake_gcs_server: FakeGCSServer) -> None:
    client = fake_gcs_server.client()
    try:
        with pytest.raises(ConfigError, match="either client= or client options"):
            GCSStore("plk-bucket", client=client, project="p")
    finally:
        client.close()


def test_capabilities_and_repr(gcs: GCSStore, bucket: str) -> None:
    assert gcs.capabilities.shared_across_hosts
    assert gcs.capabilities.shared_across_processes
    assert gcs.capabilities.conditional_delete
    assert repr(gcs) == f"GCSStore(bucket={bucket!r}, prefix='locks/')"
