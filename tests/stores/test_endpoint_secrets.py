"""A secret in a cloud store's endpoint (its query, or its user-info) is refused, the same way on
every cloud store: a ConfigError that never shows it, with nothing chained that does, and nothing
logged that does, even at DEBUG."""

from __future__ import annotations

import logging
import traceback
import urllib.parse
from collections.abc import Callable

import pytest

from prioritylock._errors import ConfigError
from prioritylock.stores import open_store
from tests._servers.s3 import S3Server
from tests.conftest import selected_kinds

pytestmark = [pytest.mark.timeout(60)]

SECRET = "s3cr3t-T0KEN-hunter2"
ENDPOINTS = [
    f"http://127.0.0.1:9/?X-Amz-Security-Token={SECRET}",
    f"http://127.0.0.1:9/devstoreaccount1?sv=2024&sig={SECRET}",
    f"https://127.0.0.1:9/acct?token={SECRET}#frag",
    f"http://user:{SECRET}@127.0.0.1:9/acct",
]


def _s3(endpoint: str) -> object:
    from prioritylock.stores._s3 import S3Store

    return S3Store(
        "bucket", endpoint_url=endpoint, aws_access_key_id="AKID", aws_secret_access_key="x"
    )


def _gcs(endpoint: str) -> object:
    from prioritylock.stores._gcs import GCSStore

    return GCSStore("bucket", endpoint=endpoint)


def _azure(endpoint: str) -> object:
    from prioritylock.stores._azure import AzureBlobStore

    return AzureBlobStore("box", account_url=endpoint, credential="a2V5")


def _s3_url(endpoint: str) -> object:
    return open_store(f"s3://bucket/locks?endpoint={urllib.parse.quote(endpoint, safe='')}")


def _azure_url(endpoint: str) -> object:
    return open_store(f"az://box/locks?endpoint={urllib.parse.quote(endpoint, safe='')}")


OPENERS: dict[str, Callable[[str], object]] = {
    "S3Store": _s3,
    "GCSStore": _gcs,
    "AzureBlobStore": _azure,
    "s3:// URL": _s3_url,
    "az:// URL": _azure_url,
}


@pytest.mark.parametrize("endpoint", ENDPOINTS)
@pytest.mark.parametrize("opener", sorted(OPENERS))
def test_a_secret_in_an_endpoint_is_refused_and_never_shown(
    opener: str, endpoint: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_KEY", "a2V5")
    caplog.set_level(logging.DEBUG)  # every logger: the SDKs' too
    with pytest.raises(ConfigError) as caught:
        OPENERS[opener](endpoint)
    shown = "".join(traceback.format_exception(caught.value))  # the whole chain
    assert SECRET not in shown, shown
    error: BaseException | None = caught.value
    while error is not None:
        assert SECRET not in repr(error.args), repr(error)
        error = error.__cause__ or error.__context__
    logged = "\n".join(caplog.handler.format(record) for record in caplog.records)
    assert SECRET not in logged, logged


@pytest.mark.parametrize("opener", ["S3Store", "GCSStore", "AzureBlobStore"])
def test_every_cloud_store_says_the_same(opener: str) -> None:
    with pytest.raises(ConfigError) as caught:
        OPENERS[opener](ENDPOINTS[0])
    assert "must not have a query or a fragment" in str(caught.value)


@pytest.mark.skipif("s3-moto" not in selected_kinds(["s3-moto"]), reason="s3-moto not selected")
def test_a_session_token_never_shows_in_the_sdks_debug_log(
    request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    server: S3Server = request.getfixturevalue("moto_server")
    bucket = server.create_bucket()
    caplog.set_level(logging.DEBUG)
    store = server.store(bucket, aws_session_token=SECRET)
    try:
        version = store.create("doc", b"one")
        assert store.read("doc") is not None
        store.delete("doc", version)
    finally:
        store.close()
    logged = "\n".join(caplog.handler.format(record) for record in caplog.records)
    assert "botocore" in logged, "botocore logged nothing: the test would prove nothing"
    assert SECRET not in logged
