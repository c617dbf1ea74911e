"""AzureBlobStore against Azurite: error mapping, secrets, request counts, URLs, transport faults.

The store contract runs in ``test_contract.py``; these are the Azure-specific behaviours. Faults
are injected under the SDK, at the requests transport (:class:`FaultyAdapter` inside azure-core's
``RequestsTransport``), while the real emulator serves every request that is let through.
"""

from __future__ import annotations

import base64
import datetime
import logging
import sys
import traceback
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.core.exceptions import AzureError
from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.storage.blob import ContainerClient, ContainerSasPermissions, generate_container_sas

from prioritylock import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreError,
)
from prioritylock.stores import NOT_MODIFIED, ConditionalReader, Versioned, open_store
from prioritylock.stores._azure import (
    ACCOUNT_ENV,
    CONNECTION_STRING_ENV,
    KEY_ENV,
    SAS_ENV,
    AzureBlobStore,
)
from tests._servers.azure import ACCOUNT, ACCOUNT_KEY, AzuriteServer, azure_error_body
from tests._servers.gcs import FaultyAdapter

pytestmark = [pytest.mark.timeout(60)]

KEY = "team/resource"
WRITES = ("create", "replace", "delete")
OPERATIONS = ("read", "read_if_changed", *WRITES, "list")
# A well-formed account key that is not Azurite's: every request signed with it is refused.
WRONG_KEY = base64.b64encode(b"prioritylock-wrong-key-" + bytes(range(41))).decode()
_ENV = (CONNECTION_STRING_ENV, ACCOUNT_ENV, KEY_ENV, SAS_ENV)


@dataclass
class Faulty:
    """A store whose HTTP requests pass through ``adapter`` on their way to Azurite."""

    store: AzureBlobStore
    adapter: FaultyAdapter

    def sent_since(self, mark: int) -> list[str]:
        return self.adapter.sent[mark:]


@pytest.fixture(autouse=True)
def _no_azure_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the Azure variables it needs, and sees no others."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def container(azurite_server: AzuriteServer) -> Iterator[str]:
    name = azurite_server.create_container()
    yield name
    azurite_server.remove_container(name)


@pytest.fixture
def azure(azurite_server: AzuriteServer, container: str) -> Iterator[AzureBlobStore]:
    store = azurite_server.store(container)
    yield store
    store.close()


@pytest.fixture
def faulty(azurite_server: AzuriteServer, container: str) -> Iterator[Faulty]:
    adapter = FaultyAdapter(azure_error_body)
    client = azurite_server.container_client(container, adapter=adapter)
    try:
        yield Faulty(AzureBlobStore(container, "locks/", client=client), adapter)
    finally:
        client.close()


def _call(store: AzureBlobStore, operation: str, version: str = '"0x1"') -> object:
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


def _everything_shown(exc: BaseException) -> str:
    """All a user could ever see of ``exc``: str, repr and the traceback with its causes."""
    shown = [str(exc), repr(exc), "".join(traceback.format_exception(exc))]
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        shown += [str(cause), repr(cause)]
        cause = cause.__cause__ or cause.__context__
    return "\n".join(shown)


def _assert_secret_free(text: str, *secrets: str) -> None:
    for secret in secrets:
        for form in {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret)}:
            assert form not in text, f"a secret ({secret[:4]}...) was shown"


# -- conditions ----------------------------------------------------------------------------------


def test_lost_conditions_are_condition_failed_chained_to_the_sdk_error(
    azure: AzureBlobStore,
) -> None:
    first = azure.create(KEY, b"one")
    second = azure.replace(KEY, b"two", first)
    cases: dict[str, Callable[[], object]] = {
        "create on existing (409 BlobAlreadyExists)": lambda: azure.create(KEY, b"x"),
        "replace with stale etag (412)": lambda: azure.replace(KEY, b"x", first),
        "replace of absent": lambda: azure.replace("absent", b"x", second),
        "delete with stale etag": lambda: azure.delete(KEY, first),
        "delete of absent": lambda: azure.delete("absent", second),
    }
    for what, call in cases.items():
        with pytest.raises(ConditionFailed) as caught:
            call()
        assert isinstance(caught.value.__cause__, AzureError), what
    assert azure.read(KEY) == Versioned(b"two", second)


@pytest.mark.parametrize("version", ["", "0x1 2", '"\n"', "é"])
def test_versions_that_cannot_be_etags_fail_without_a_request(faulty: Faulty, version: str) -> None:
    for operation in ("replace", "delete"):
        with pytest.raises(ConditionFailed):
            _call(faulty.store, operation, version)
    assert faulty.adapter.sent == []
    assert faulty.store.stats.total == 0


def test_a_409_other_than_blob_already_exists_is_not_a_lost_race(faulty: Faulty) -> None:
    """E.g. ``LeaseIdMissing``: somebody holds an Azure lease on the blob; not ours to retry."""
    faulty.adapter.fail_next("PUT", status=409)
    with pytest.raises(StoreError) as caught:
        faulty.store.create(KEY, b"x")
    assert type(caught.value) is StoreError
    assert "InjectedFault" in str(caught.value)


def test_objects_live_under_the_prefix(
    azurite_server: AzuriteServer, azure: AzureBlobStore, container: str
) -> None:
    azure.create("a/b", b"x")
    assert azurite_server.blob_names(container) == ["locks/a/b"]
    assert azure.list("") == ["a/b"]


# -- request counts ------------------------------------------------------------------------------


def test_every_operation_is_one_http_request(faulty: Faulty) -> None:
    store = faulty.store
    version = ""

    def create() -> None:
        nonlocal version
        version = store.create(KEY, b"one")

    def replace() -> None:
        nonlocal version
        version = store.replace(KEY, b"two", version)

    steps: list[tuple[str, Callable[[], object], str]] = [
        ("read absent", lambda: store.read(KEY), "GET"),
        ("create", create, "PUT"),
        ("read", lambda: store.read(KEY), "GET"),
        ("read_if_changed, unchanged", lambda: store.read_if_changed(KEY, version), "GET"),
        ("replace", replace, "PUT"),
        ("read_if_changed, changed", lambda: store.read_if_changed(KEY, '"0x1"'), "GET"),
        ("list", lambda: store.list(""), "GET"),
        ("delete", lambda: store.delete(KEY, version), "DELETE"),
    ]
    for what, step, method in steps:
        mark = len(faulty.adapter.sent)
        step()
        sent = faulty.sent_since(mark)
        assert len(sent) == 1 and sent[0].startswith(method), f"{what} sent {sent}"
    assert store.stats.total == len(steps) == len(faulty.adapter.sent)


def test_reading_an_empty_blob_takes_two_requests_and_counts_both(faulty: Faulty) -> None:
    """The SDK's ranged GET gets 416 on an empty blob, then it asks again without a range."""
    version = faulty.store.create(KEY, b"")
    faulty.store.stats.reset()
    mark = len(faulty.adapter.sent)
    assert faulty.store.read(KEY) == Versioned(b"", version)
    assert len(faulty.sent_since(mark)) == 2
    assert faulty.store.stats.reads == 2


def test_reading_an_empty_blob_conditionally_counts_every_request(faulty: Faulty) -> None:
    """Unchanged: the 304 comes before the range is looked at (one request); changed: two."""
    store = faulty.store
    version = store.create(KEY, b"")
    for known, answer, requests in (
        (version, NOT_MODIFIED, 1),
        ('"0x1"', Versioned(b"", version), 2),
    ):
        store.stats.reset()
        mark = len(faulty.adapter.sent)
        assert store.read_if_changed(KEY, known) == answer
        assert len(faulty.sent_since(mark)) == requests
        assert store.stats.reads == requests


# -- conditional reads ---------------------------------------------------------------------------


@dataclass
class Exchange:
    """One request of a store and its answer, as the SDK's raw hooks see them."""

    method: str
    if_none_match: str | None
    status: int
    body_length: int


class Recorder:
    """Records every request's ``If-None-Match`` and its answer (azure-core's raw hooks).

    With :attr:`drop_condition` set it strips ``If-None-Match`` first, as a server that ignores
    the header would; the request hook runs before signing, so the request stays valid.
    """

    def __init__(self) -> None:
        self.seen: list[Exchange] = []
        self.drop_condition = False
        self._sent: list[tuple[str, str | None]] = []

    def on_request(self, request: PipelineRequest[Any]) -> None:
        headers = request.http_request.headers
        if self.drop_condition:
            headers.pop("If-None-Match", None)
        self._sent.append((request.http_request.method, headers.get("If-None-Match")))

    def on_response(self, response: PipelineResponse[Any, Any]) -> None:
        answer = response.http_response
        length = int(answer.headers.get("Content-Length", "0"))
        self.seen.append(Exchange(*self._sent.pop(0), answer.status_code, length))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def recorded(
    azurite_server: AzuriteServer, container: str, recorder: Recorder
) -> Iterator[AzureBlobStore]:
    """A store on ``container`` whose requests ``recorder`` sees."""
    client = ContainerClient.from_connection_string(
        azurite_server.connection_string,
        container,
        retry_total=0,
        raw_request_hook=recorder.on_request,
        raw_response_hook=recorder.on_response,
    )
    try:
        yield AzureBlobStore(container, "locks/", client=client)
    finally:
        client.close()


def test_an_unchanged_blob_is_a_304_without_a_body(
    recorded: AzureBlobStore, recorder: Recorder
) -> None:
    """Azurite honours If-None-Match on Get Blob, as Azure does."""
    store = recorded
    assert isinstance(store, ConditionalReader)
    first = store.create(KEY, b"1" * 4096)
    store.stats.reset()
    assert store.read_if_changed(KEY, first) is NOT_MODIFIED
    second = store.replace(KEY, b"2" * 4096, first)
    assert store.read_if_changed(KEY, first) == Versioned(b"2" * 4096, second)
    gets = [e for e in recorder.seen if e.method == "GET"]
    assert gets == [Exchange("GET", first, 304, 0), Exchange("GET", first, 206, 4096)]
    assert (store.stats.reads, store.stats.not_modified) == (2, 1)


def test_a_server_that_ignores_if_none_match_still_answers_not_modified(
    recorded: AzureBlobStore, recorder: Recorder
) -> None:
    version = recorded.create(KEY, b"same")
    recorder.drop_condition = True
    del recorder.seen[:]
    recorded.stats.reset()
    assert recorded.read_if_changed(KEY, version) is NOT_MODIFIED
    assert recorder.seen == [Exchange("GET", None, 206, 4)]
    assert (recorded.stats.total, recorded.stats.not_modified) == (1, 1)


@pytest.mark.parametrize("version", ["", "0x1 2", '"\n"', "é"])
def test_a_version_that_cannot_be_an_etag_is_read_without_a_condition(
    recorded: AzureBlobStore, recorder: Recorder, version: str
) -> None:
    current = recorded.create(KEY, b"data")
    del recorder.seen[:]
    assert recorded.read_if_changed(KEY, version) == Versioned(b"data", current)
    assert recorder.seen == [Exchange("GET", None, 206, 4)]


# -- access and secrets --------------------------------------------------------------------------


def test_missing_container_is_an_access_error_naming_it_on_every_operation(
    azurite_server: AzuriteServer,
) -> None:
    store = azurite_server.store("plk-no-such-container")
    try:
        for operation in OPERATIONS:
            with pytest.raises(StoreAccessError, match="plk-no-such-container") as caught:
                _call(store, operation)
            assert "ContainerNotFound" in str(caught.value), operation
    finally:
        store.close()


def _wrong_key_stores(
    server: AzuriteServer, container: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, tuple[Callable[[], AzureBlobStore], list[str]]]:
    """Ways to open a store with a wrong secret, and the secrets each one must never show."""
    wrong_connection_string = server.connection_string.replace(ACCOUNT_KEY, WRONG_KEY)
    sas = generate_container_sas(
        ACCOUNT,
        container,
        account_key=WRONG_KEY,
        permission=ContainerSasPermissions(read=True, write=True, delete=True, list=True),
        expiry=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1),
    )
    signature = urllib.parse.parse_qs(sas)["sig"][0]

    def from_url() -> AzureBlobStore:
        monkeypatch.setenv(KEY_ENV, WRONG_KEY)
        store = open_store(f"az://{container}/locks?endpoint={server.account_url}")
        assert isinstance(store, AzureBlobStore)
        return store

    return {
        "account key": (
            lambda: AzureBlobStore(
                container,
                account_url=server.account_url,
                credential=AzureNamedKeyCredential(ACCOUNT, WRONG_KEY),
            ),
            [WRONG_KEY],
        ),
        "connection string": (
            lambda: AzureBlobStore(container, connection_string=wrong_connection_string),
            [WRONG_KEY, wrong_connection_string],
        ),
        "SAS": (
            lambda: AzureBlobStore(
                container, account_url=server.account_url, credential=AzureSasCredential(sas)
            ),
            [sas, signature],
        ),
        "URL and AZURE_STORAGE_KEY": (from_url, [WRONG_KEY]),
    }


@pytest.mark.parametrize(
    "how", ["account key", "connection string", "SAS", "URL and AZURE_STORAGE_KEY"]
)
def test_wrong_credentials_are_access_errors_that_show_no_secret(
    azurite_server: AzuriteServer,
    container: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    how: str,
) -> None:
    caplog.set_level(logging.DEBUG)  # everything the SDK and we log, at every level
    make, secrets = _wrong_key_stores(azurite_server, container, monkeypatch)[how]
    secrets.append(ACCOUNT_KEY)
    store = make()
    shown = [repr(store)]
    try:
        for operation in OPERATIONS:
            with pytest.raises(StoreAccessError, match=container) as caught:
                _call(store, operation)
            assert "HTTP 403" in str(caught.value), operation
            shown.append(_everything_shown(caught.value))
    finally:
        store.close()
    assert any(r.name.startswith("azure") for r in caplog.records), "the SDK logged nothing"
    shown.append(caplog.text)
    _assert_secret_free("\n".join(shown), *secrets)


@pytest.mark.parametrize(
    "connection_string",
    [
        "AccountName=x;AccountKey=c2VjcmV0LXRoYXQtbXVzdC1ub3Qtc2hvdw==;Broken",
        "just c2VjcmV0LXRoYXQtbXVzdC1ub3Qtc2hvdw== without settings",
        "DefaultEndpointsProtocol=https;AccountName=x;SharedAccessSignature=c2VjcmV0LXRoYXQtbXVz;"
        "BlobEndpoint=::not a url::",
    ],
)
def test_a_malformed_connection_string_is_a_config_error_that_does_not_echo_it(
    connection_string: str,
) -> None:
    with pytest.raises(ConfigError, match="malformed") as caught:
        AzureBlobStore("plk-container", connection_string=connection_string)
    _assert_secret_free(_everything_shown(caught.value), "c2VjcmV0LXRoYXQtbXVz", connection_string)


# -- open_store and configuration ----------------------------------------------------------------


def test_open_store_with_an_endpoint_and_azure_storage_key(
    monkeypatch: pytest.MonkeyPatch, azurite_server: AzuriteServer, container: str
) -> None:
    monkeypatch.setenv(KEY_ENV, ACCOUNT_KEY)
    store = open_store(f"az://{container}/team%20a/locks/?endpoint={azurite_server.account_url}")
    try:
        assert isinstance(store, AzureBlobStore)
        assert (store.account, store.prefix) == (ACCOUNT, "team a/locks/")
        version = store.create(KEY, b"via URL")
        assert store.read(KEY) == Versioned(b"via URL", version)
        assert azurite_server.blob_names(container) == [f"team a/locks/{KEY}"]
    finally:
        store.close()


def test_open_store_with_the_connection_string_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, azurite_server: AzuriteServer, container: str
) -> None:
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_server.connection_string)
    store = open_store(f"az://{container}?read_timeout=5")
    try:
        version = store.create(KEY, b"via env")
        assert store.read(KEY) == Versioned(b"via env", version)
    finally:
        store.close()


def test_the_store_uses_azure_storage_connection_string_by_default(
    monkeypatch: pytest.MonkeyPatch, azurite_server: AzuriteServer, container: str
) -> None:
    monkeypatch.setenv(CONNECTION_STRING_ENV, azurite_server.connection_string)
    store = AzureBlobStore(container)
    try:
        assert store.list("") == []
    finally:
        store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("az://", "needs a container name"),
        ("az:///prefix?account=acct", "needs a container name"),
        ("az://box?nope=1", "unknown az:// store URL option 'nope'"),
        ("az://box?account=", "option 'account' is empty"),
        ("az://box?account=Not_Valid", "account name"),
        ("az://box?account=acct&read_timeout=soon", "must be a number of seconds"),
        ("az://Upper?account=acct", "container name"),
        ("az://ab?account=acct", "container name"),
        ("az://a--b?account=acct", "container name"),
        ("az://box:10000", "not host:port"),
        ("az://box#frag", "fragment"),
        ("az://box", "AZURE_STORAGE_CONNECTION_STRING"),
        ("az://box?endpoint=ftp://127.0.0.1/acct", "http"),
        ("az://box?endpoint=http://127.0.0.1:1", "AZURE_STORAGE_KEY needs the account name"),
    ],
)
def test_open_store_url_errors(monkeypatch: pytest.MonkeyPatch, url: str, message: str) -> None:
    monkeypatch.setenv(KEY_ENV, WRONG_KEY)
    with pytest.raises(ConfigError, match=message) as caught:
        open_store(url)
    _assert_secret_free(_everything_shown(caught.value), WRONG_KEY)


def test_open_store_without_any_credential_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "azure.identity", None)  # as if azure-identity were absent
    with pytest.raises(ConfigError, match=KEY_ENV):
        open_store("az://box?account=acct")


def test_credentials_in_the_url_or_its_endpoint_are_refused_without_echoing_them() -> None:
    for url in (
        "az://someone:hunter2@box?account=acct",
        "az://box?endpoint=https://acct.blob.core.windows.net/%3Fsig%3Dhunter2",
        f"az://box?endpoint={urllib.parse.quote('https://acct.blob.core.windows.net/?sig=hunter2')}",
    ):
        with pytest.raises(ConfigError) as caught:
            open_store(url)
        assert "hunter2" not in _everything_shown(caught.value), url


def test_ways_to_connect_do_not_mix(azurite_server: AzuriteServer, container: str) -> None:
    client = azurite_server.container_client(container)
    try:
        with pytest.raises(ConfigError, match="either client= or connection options"):
            AzureBlobStore(container, client=client, account_url=azurite_server.account_url)
        with pytest.raises(ConfigError, match="is for container"):
            AzureBlobStore("plk-other", client=client)
    finally:
        client.close()
    with pytest.raises(ConfigError, match="not both"):
        AzureBlobStore(
            container,
            connection_string=azurite_server.connection_string,
            account_url=azurite_server.account_url,
        )


def test_capabilities_and_repr(azure: AzureBlobStore, container: str) -> None:
    assert azure.capabilities.shared_across_hosts
    assert azure.capabilities.conditional_delete
    assert repr(azure) == (
        f"AzureBlobStore(account={ACCOUNT!r}, container={container!r}, prefix='locks/')"
    )
