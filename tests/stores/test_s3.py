"""S3Store against real S3 servers on 127.0.0.1 (moto and SeaweedFS): what the contract can't see.

Error mapping, credentials and missing buckets, ``s3://`` URLs, and the S3-only faults injected at
the SDK boundary: a botocore ``before-send`` handler answers in the server's place (409
``ConditionalRequestConflict``), raises a connect failure, or delivers the request and loses the
answer to a client whose SDK retries. Throttling, 5xx, timeouts and lost answers are the same on
every cloud store: ``tests/stores/test_faults.py``. The requests that do go out go to a real
server; nothing of S3 is mocked in process."""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import traceback
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import botocore.awsrequest
import botocore.exceptions
import botocore.httpsession
import pytest

from prioritylock import (
    ConditionFailed,
    ConfigError,
    StoreAccessError,
    StoreUnavailable,
)
from prioritylock.stores import (
    NOT_MODIFIED,
    ConditionalReader,
    ObjectStore,
    StoreCapabilities,
    Versioned,
    open_store,
)
from prioritylock.stores._s3 import S3Store
from tests._servers import emulator
from tests._servers.s3 import S3Server, needs_moto, needs_seaweedfs, s3_server

pytestmark = [pytest.mark.timeout(60)]

WRITES = ("create", "replace", "delete")
OPERATIONS = ("read", "read_if_changed", *WRITES, "list")


# -- fixtures -------------------------------------------------------------------------------------


@pytest.fixture
def store(server: S3Server, bucket: str) -> Iterator[S3Store]:
    opened = server.store(bucket)
    yield opened
    opened.close()


@pytest.fixture
def moto_bucket(moto_server: S3Server) -> Iterator[str]:
    name = moto_server.create_bucket()
    yield name
    moto_server.remove_bucket(name)


@pytest.fixture
def moto_store(moto_server: S3Server, moto_bucket: str) -> Iterator[S3Store]:
    opened = moto_server.store(moto_bucket)
    yield opened
    opened.close()


# -- helpers --------------------------------------------------------------------------------------


class _Body:
    """The ``raw`` of a fabricated botocore response."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    def stream(self, **_kwargs: Any) -> Iterator[bytes]:
        yield self._data


def _error_response(request: Any, status: int, code: str) -> botocore.awsrequest.AWSResponse:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>injected by the test</Message>"
        "<RequestId>test</RequestId></Error>"
    ).encode()
    headers = {"Content-Type": "application/xml", "Content-Length": str(len(body))}
    return botocore.awsrequest.AWSResponse(request.url, status, headers, _Body(body))


@contextlib.contextmanager
def _hooked(client: Any, event: str, handler: Callable[..., Any]) -> Iterator[None]:
    """``handler`` on ``client``'s ``event`` for the duration of the block."""
    client.meta.events.register(event, handler)
    try:
        yield
    finally:
        client.meta.events.unregister(event, handler)


def _deliver(request: Any) -> int:
    """Send a signed, prepared request to the server ourselves; its HTTP status."""
    session = botocore.httpsession.URLLib3Session()
    try:
        return int(session.send(request).status_code)
    finally:
        session.close()


def _run(store: S3Store, operation: str, key: str, version: str) -> object:
    calls: dict[str, Callable[[], object]] = {
        "read": lambda: store.read(key),
        "read_if_changed": lambda: store.read_if_changed(key, version),
        "create": lambda: store.create(key, b"after"),
        "replace": lambda: store.replace(key, b"after", version),
        "delete": lambda: store.delete(key, version),
        "list": lambda: store.list(""),
    }
    return calls[operation]()


def _target(store: ObjectStore, operation: str) -> tuple[str, str, Versioned | None]:
    """The key an operation works on, the version to pass, and the object before it."""
    version = store.create("doc", b"before")
    if operation == "create":
        return "new", version, None
    return "doc", version, Versioned(b"before", version)


@contextlib.contextmanager
def _get_objects(client: Any) -> Iterator[list[tuple[str | None, int, int]]]:
    """Every GetObject in the block: (its If-None-Match, the status, the body's length)."""
    seen: list[tuple[str | None, int, int]] = []
    sent: list[str | None] = []

    def on_send(request: Any, **_kwargs: Any) -> None:
        value = request.headers.get("If-None-Match")  # bytes, once botocore has signed it
        sent.append(value.decode() if isinstance(value, bytes) else value)

    def on_answer(response_dict: dict[str, Any], **_kwargs: Any) -> None:
        body = response_dict["body"]
        # An error (304 included) arrives read in full; a 200's body is still a stream.
        size = (
            len(body)
            if isinstance(body, bytes)
            else int(response_dict["headers"]["content-length"])
        )
        seen.append((sent.pop(0), int(response_dict["status_code"]), size))

    with (
        _hooked(client, "before-send.s3.GetObject", on_send),
        _hooked(client, "before-parse.s3.GetObject", on_answer),
    ):
        yield seen


def _everything_said(exc: BaseException) -> str:
    """All a user could see of an error: str, repr, and the chained traceback."""
    return "\n".join([str(exc), repr(exc), *traceback.format_exception(exc)])


# -- the seam on both servers ---------------------------------------------------------------------


def test_declares_a_store_shared_across_hosts(store: S3Store) -> None:
    assert isinstance(store, ObjectStore)
    assert store.capabilities == StoreCapabilities(
        shared_across_processes=True,
        shared_across_hosts=True,
        conditional_delete=True,
        unique_versions=False,
    )


def test_create_on_existing_is_condition_failed(store: S3Store) -> None:
    store.create("doc", b"one")
    with pytest.raises(ConditionFailed, match="already exists") as caught:
        store.create("doc", b"two")
    assert caught.value.key == "doc"
    assert isinstance(caught.value.__cause__, botocore.exceptions.ClientError)


@pytest.mark.parametrize("operation", ["replace", "delete"])
def test_conditional_write_on_a_vanished_key_is_condition_failed(
    store: S3Store, operation: str
) -> None:
    """moto answers 404 NoSuchKey here, SeaweedFS 412: both are a lost condition."""
    version = store.create("doc", b"one")
    store.delete("doc", version)
    with pytest.raises(ConditionFailed) as caught:
        _run(store, operation, "doc", version)
    assert caught.value.key == "doc"
    assert store.read("doc") is None


def test_versions_are_quoted_etags_and_unquoted_ones_are_accepted(
    server: S3Server, bucket: str, store: S3Store
) -> None:
    version = store.create("doc", b"one")
    assert version.startswith('"') and version.endswith('"'), version
    raw = server.client()
    try:
        head = raw.head_object(Bucket=bucket, Key="locks/doc")
    finally:
        raw.close()
    assert head["ETag"] == version, "the version is the ETag, as S3 spells it"
    newer = store.replace("doc", b"two", version.strip('"'))
    assert store.read("doc") == Versioned(b"two", newer)
    store.delete("doc", newer.strip('"'))
    assert store.read("doc") is None


def test_identical_bytes_give_identical_versions(store: S3Store) -> None:
    """S3 ETags are content hashes (the ABA hazard the lease's nonce is there for)."""
    first = store.create("doc", b"same")
    assert store.replace("doc", b"same", first) == first


def test_an_unchanged_object_is_a_304_without_a_body(store: S3Store) -> None:
    """moto and SeaweedFS both honour If-None-Match on GetObject, as S3 does."""
    assert isinstance(store, ConditionalReader)
    version = store.create("doc", b"1" * 4096)
    store.stats.reset()
    with _get_objects(store.client) as seen:
        assert store.read_if_changed("doc", version) is NOT_MODIFIED
        assert store.read_if_changed("doc", version.strip('"')) is NOT_MODIFIED  # unquoted too
        newer = store.replace("doc", b"2" * 4096, version)
        assert store.read_if_changed("doc", version) == Versioned(b"2" * 4096, newer)
    assert seen == [(version, 304, 0), (version, 304, 0), (version, 200, 4096)]
    assert (store.stats.reads, store.stats.not_modified) == (3, 2)


@needs_moto
def test_a_server_that_ignores_if_none_match_still_answers_not_modified(
    moto_store: S3Store,
) -> None:
    """Some S3-compatible servers send the body anyway: the ETag then says it is unchanged."""
    version = moto_store.create("doc", b"same")

    def drop_condition(request: Any, **_kwargs: Any) -> None:
        del request.headers["If-None-Match"]  # before signing, so the request stays valid

    moto_store.stats.reset()
    with (
        _hooked(moto_store.client, "before-sign.s3.GetObject", drop_condition),
        _get_objects(moto_store.client) as seen,
    ):
        assert moto_store.read_if_changed("doc", version) is NOT_MODIFIED
    assert seen == [(None, 200, 4)]
    assert (moto_store.stats.total, moto_store.stats.not_modified) == (1, 1)


@needs_moto
def test_a_version_that_cannot_be_an_etag_is_read_without_a_condition(
    moto_store: S3Store,
) -> None:
    version = moto_store.create("doc", b"data")
    with _get_objects(moto_store.client) as seen:
        for unknown in ("é", 'a"b', "x\ny", "z" * 300):
            assert moto_store.read_if_changed("doc", unknown) == Versioned(b"data", version)
    assert seen == [(None, 200, 4)] * 4


def test_keys_live_under_the_prefix(server: S3Server, bucket: str) -> None:
    scoped = server.store(bucket, "/team/locks/")
    raw = server.client()
    try:
        assert scoped.prefix == "team/locks/"
        scoped.create("a/b", b"x")
        raw.put_object(Bucket=bucket, Key="team/other", Body=b"not ours")
        raw.put_object(Bucket=bucket, Key="team/locksmith", Body=b"not ours either")
        listed = raw.list_objects_v2(Bucket=bucket, Prefix="team/")
        assert sorted(item["Key"] for item in listed["Contents"]) == [
            "team/locks/a/b",
            "team/locksmith",
            "team/other",
        ]
        assert scoped.list("") == ["a/b"]
        assert scoped.list("a/") == ["a/b"]
        assert scoped.read("a/b") is not None
    finally:
        raw.close()
        scoped.close()


@needs_seaweedfs
def test_list_pages_through_more_than_one_page(seaweedfs_server: S3Server) -> None:
    """SeaweedFS only: moto takes ~12 s for the 1005 puts of the setup."""
    server = seaweedfs_server
    bucket = server.create_bucket()
    store = server.store(bucket)
    raw = server.client(max_pool_connections=8)
    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:  # setup only: plain puts
            list(
                pool.map(
                    lambda i: raw.put_object(Bucket=bucket, Key=f"locks/many/{i:04d}", Body=b""),
                    range(1005),
                )
            )
        store.stats.reset()
        assert store.list("many/") == [f"many/{index:04d}" for index in range(1005)]
        assert store.stats.lists == 2, f"two pages are two requests: {store.stats!r}"
    finally:
        raw.close()
        store.close()
        server.remove_bucket(bucket)


@pytest.mark.parametrize("leftover", ["live", "deleted"])
def test_a_key_that_prefixes_other_keys_can_be_created(
    request: pytest.FixtureRequest, server: S3Server, store: S3Store, leftover: str
) -> None:
    """A lock at ``a/b`` next to one at ``a/b/c``: S3 keys are flat, so both may exist.

    SeaweedFS keeps keys in a file tree: ``a/b`` is then a directory (one that outlives the
    deletion of ``a/b/c``), ``read`` says absent and ``If-None-Match: *`` says exists.
    """
    if server.name == "seaweedfs":
        request.applymarker(
            pytest.mark.xfail(
                strict=True, raises=ConditionFailed, reason="SeaweedFS 4.48: directory is 412"
            )
        )
    below = store.create("a/b/c", b"below")
    if leftover == "deleted":
        store.delete("a/b/c", below)
    assert store.read("a/b") is None
    version = store.create("a/b", b"above")
    assert store.read("a/b") == Versioned(b"above", version)


def test_key_too_long_with_the_prefix_is_refused_before_any_request(store: S3Store) -> None:
    with pytest.raises(ConfigError, match="longer than"):
        store.create("k" * 1020, b"x")
    assert store.stats.total == 0


def test_close_leaves_a_callers_client_open(server: S3Server, bucket: str) -> None:
    client = server.client()
    try:
        lent = S3Store(bucket, "locks", client=client)
        lent.create("doc", b"x")
        lent.close()
        lent.close()
        assert client.head_object(Bucket=bucket, Key="locks/doc")["ContentLength"] == 1
    finally:
        client.close()


# -- credentials and buckets ----------------------------------------------------------------------


def test_missing_bucket_is_an_access_error_naming_it(server: S3Server) -> None:
    missing = f"plk-missing-{uuid.uuid4().hex[:12]}"
    absent = server.store(missing)
    try:
        for operation in OPERATIONS:
            if server.name == "seaweedfs" and operation == "replace":
                # SeaweedFS checks If-Match before the bucket: 412. The lock reads back after a
                # lost condition, and that read names the missing bucket.
                with pytest.raises(ConditionFailed):
                    _run(absent, operation, "doc", '"0"')
                continue
            with pytest.raises(StoreAccessError) as caught:
                _run(absent, operation, "doc", '"0"')
            message = str(caught.value)
            assert missing in message, message
            assert "does not exist" in message, message
            assert isinstance(caught.value, PermissionError)
    finally:
        absent.close()


@needs_seaweedfs
@pytest.mark.parametrize(
    ("wrong", "code"),
    [("secret", "SignatureDoesNotMatch"), ("key id", "InvalidAccessKeyId")],
)
def test_refused_credentials_are_an_access_error_without_the_secret(
    seaweedfs_server: S3Server, caplog: pytest.LogCaptureFixture, wrong: str, code: str
) -> None:
    """SeaweedFS checks signatures (moto accepts anything); nothing shows the secret."""
    bucket = seaweedfs_server.create_bucket()
    secret = "plk-secret-" + uuid.uuid4().hex
    key_id = "PLKKEYID" + uuid.uuid4().hex[:12].upper()
    if wrong == "secret":
        key_id = seaweedfs_server.access_key_id
    caplog.set_level(logging.DEBUG)
    refused = seaweedfs_server.store(bucket, aws_access_key_id=key_id, aws_secret_access_key=secret)
    try:
        for operation in OPERATIONS:
            with pytest.raises(StoreAccessError) as caught:
                _run(refused, operation, "doc", '"0"')
            said = _everything_said(caught.value)
            assert code in str(caught.value), str(caught.value)
            assert bucket in str(caught.value), str(caught.value)
            assert secret not in said
            assert seaweedfs_server.secret_access_key not in said
        assert secret not in repr(refused)
        assert secret not in caplog.text
        trusted = seaweedfs_server.store(bucket)
        assert trusted.read("doc") is None, "a refused create must not have written"
        trusted.close()
    finally:
        refused.close()
        seaweedfs_server.remove_bucket(bucket)


@needs_moto
def test_repr_and_errors_never_show_credentials(moto_server: S3Server, moto_bucket: str) -> None:
    secret = "plk-secret-" + uuid.uuid4().hex
    token = "plk-token-" + uuid.uuid4().hex
    secretive = moto_server.store(
        moto_bucket,
        aws_access_key_id="AKIDPLK",
        aws_secret_access_key=secret,
        aws_session_token=token,
    )
    try:
        assert moto_bucket in repr(secretive)
        for text in (repr(secretive), str(vars(secretive))):
            assert secret not in text
            assert token not in text

        def refuse(request: Any, **_kwargs: Any) -> botocore.awsrequest.AWSResponse:
            return _error_response(request, 403, "AccessDenied")

        with (
            _hooked(secretive.client, "before-send.s3", refuse),
            pytest.raises(StoreAccessError, match="s3:PutObject") as caught,
        ):
            secretive.create("doc", b"x")
        said = _everything_said(caught.value)
        assert secret not in said
        assert token not in said
    finally:
        secretive.close()


@needs_moto
def test_no_credentials_is_an_access_error(
    moto_server: S3Server, moto_bucket: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    import boto3

    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    client = boto3.session.Session().client(
        "s3", endpoint_url=moto_server.endpoint_url, region_name="us-east-1"
    )
    anonymous = S3Store(moto_bucket, client=client)
    try:
        with pytest.raises(StoreAccessError, match="no AWS credentials") as caught:
            anonymous.read("doc")
        assert moto_bucket in str(caught.value)
    finally:
        anonymous.close()
        client.close()


def test_unknown_profile_is_a_config_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    config = tmp_path / "config"
    config.write_text("[profile known]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    with pytest.raises(ConfigError, match="'plk-unknown-profile'"):
        S3Store("bucket", profile="plk-unknown-profile")


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"addressing_style": "sideways"}, "addressing style"),
        ({"endpoint_url": "ftp://127.0.0.1"}, "endpoint"),
        ({"endpoint_url": "http://user:pw@127.0.0.1"}, "must not carry credentials"),
        ({"read_timeout": 0}, "read_timeout"),
        ({"aws_access_key_id": "AKID"}, "both"),
        ({"aws_session_token": "token"}, "both"),
    ],
)
def test_bad_client_options_are_config_errors(options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        S3Store("bucket", **options)
    assert "pw" not in str(caught.value)


@pytest.mark.parametrize("name", ["", "a", "with/slash", "white space", "-leading"])
def test_bad_bucket_names_are_config_errors(name: str) -> None:
    with pytest.raises(ConfigError, match="bucket name"):
        S3Store(name)


def test_client_and_client_options_are_exclusive() -> None:
    with pytest.raises(ConfigError, match=r"\['region'\]"):
        S3Store("bucket", client=object(), region="us-east-1")


# -- s3:// URLs -----------------------------------------------------------------------------------


def test_url_with_every_option(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    config = tmp_path / "config"
    config.write_text("[profile plk-test]\nregion = us-west-2\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    opened = open_store(
        "s3://my-bucket/team/locks?endpoint=http://127.0.0.1:9&region=eu-west-1"
        "&profile=plk-test&addressing=path&connect_timeout=1.5&read_timeout=4"
    )
    try:
        assert isinstance(opened, S3Store)
        assert (opened.bucket, opened.prefix) == ("my-bucket", "team/locks/")
        assert opened.client.meta.region_name == "eu-west-1"
        assert opened.client.meta.endpoint_url == "http://127.0.0.1:9"
        assert opened.client.meta.config.s3 == {"addressing_style": "path"}
        assert opened.client.meta.config.connect_timeout == 1.5
        assert opened.client.meta.config.read_timeout == 4.0
        assert opened.client.meta.config.retries["total_max_attempts"] == 1
        assert repr(opened) == (
            "S3Store(bucket='my-bucket', prefix='team/locks/', endpoint='http://127.0.0.1:9')"
        )
    finally:
        opened.close()


def test_url_without_prefix_or_options() -> None:
    opened = open_store("s3://my-bucket")
    try:
        assert isinstance(opened, S3Store)
        assert (opened.bucket, opened.prefix) == ("my-bucket", "")
    finally:
        opened.close()


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("s3:///locks", "needs a bucket name"),
        ("s3://?region=us-east-1", "needs a bucket name"),
        ("s3://bucket/locks?endpoitn=http://127.0.0.1:9", "'endpoitn'"),
        ("s3://bucket?region=", "'region' is empty"),
        ("s3://bucket?addressing=sideways", "addressing style"),
        ("s3://bucket?endpoint=127.0.0.1:9", "endpoint must be"),
        ("s3://bucket?read_timeout=soon", "'read_timeout'"),
        ("s3://bucket:9000/locks", "not host:port"),
        ("s3://AKIDPLK:hunter2secret@bucket/locks", "must not carry credentials"),
        ("s3://bucket/a/../b", "'..'"),
        ("s3://bucket/locks#frag", "fragment"),
    ],
)
def test_bad_urls_are_config_errors(url: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as caught:
        open_store(url)
    assert "hunter2secret" not in _everything_said(caught.value)


def test_url_round_trip(server: S3Server, bucket: str) -> None:
    if server.name == "seaweedfs":  # credentials come from boto3's chain: give them as env
        env = {
            "AWS_ACCESS_KEY_ID": server.access_key_id,
            "AWS_SECRET_ACCESS_KEY": server.secret_access_key,
        }
    else:
        env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    client = server.client()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        opened = open_store(
            f"s3://{bucket}/url/locks?endpoint={server.endpoint_url}&region=us-east-1"
            "&addressing=path"
        )
        try:
            version = opened.create("doc", b"via url")
            assert opened.read("doc") == Versioned(b"via url", version)
            head = client.head_object(Bucket=bucket, Key="url/locks/doc")
            assert head["ETag"] == version
        finally:
            opened.close()
            client.close()


# -- moto as tools.emulators starts it ----------------------------------------------------------

MOTO_RACERS = 8
MOTO_ROUNDS = 30


@needs_moto
@pytest.mark.timeout(120)
def test_moto_as_we_start_it_lets_one_racing_write_win(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto alone checks a condition and stores with nothing between: with its keys buffered on
    disk, 11 of 50 8-way rounds had two or more winners. tools.emulators serialises its writes."""
    monkeypatch.setenv("MOTO_S3_DEFAULT_KEY_BUFFER_SIZE", "1")  # widens moto's window
    with emulator("s3-moto", tmp_path) as running:
        server = s3_server("moto", running)
        bucket = server.create_bucket()
        stores = [server.store(bucket) for _ in range(MOTO_RACERS)]
        version = stores[0].create("doc", b"round -1")
        try:
            with concurrent.futures.ThreadPoolExecutor(MOTO_RACERS) as pool:
                for round_ in range(MOTO_ROUNDS):

                    def write(index: int, seen: str = version, now: int = round_) -> str | None:
                        with contextlib.suppress(ConditionFailed):
                            return stores[index].replace("doc", f"{now}/{index}".encode(), seen)
                        return None

                    won = [v for v in pool.map(write, range(MOTO_RACERS)) if v is not None]
                    assert len(won) == 1, f"round {round_}: {len(won)} racing writes won"
                    version = won[0]
        finally:
            for store in stores:
                store.close()


# -- faults at the SDK boundary (moto) ------------------------------------------------------------


@needs_moto
@pytest.mark.parametrize("operation", WRITES)
def test_conditional_request_conflict_is_condition_failed(
    moto_store: S3Store, operation: str
) -> None:
    """Real S3 answers 409 to conditional writes racing on one key."""
    key, version, _before = _target(moto_store, operation)

    def conflict(request: Any, **_kwargs: Any) -> botocore.awsrequest.AWSResponse:
        return _error_response(request, 409, "ConditionalRequestConflict")

    with (
        _hooked(moto_store.client, "before-send.s3", conflict),
        pytest.raises(ConditionFailed, match="conflicting") as caught,
    ):
        _run(moto_store, operation, key, version)
    assert caught.value.key == key


@needs_moto
@pytest.mark.parametrize("operation", OPERATIONS)
@pytest.mark.parametrize(
    ("error", "unknown_if_write"),
    [
        (botocore.exceptions.EndpointConnectionError, False),
        (botocore.exceptions.ConnectTimeoutError, False),
    ],
    ids=["connect-refused", "connect-timeout"],
)
def test_connect_errors_are_store_unavailable_with_a_known_outcome(
    moto_store: S3Store, operation: str, error: Callable[..., Exception], unknown_if_write: bool
) -> None:
    """A connect failure never sent the request. (A read timeout or a reset might have: that,
    throttling, 5xx and lost answers are the cross-store suite, ``test_faults.py``.)"""
    key, version, before = _target(moto_store, operation)

    def fail(request: Any, **_kwargs: Any) -> None:
        raise error(endpoint_url=request.url, error="injected by the test")

    with (
        _hooked(moto_store.client, "before-send.s3", fail),
        pytest.raises(StoreUnavailable) as caught,
    ):
        _run(moto_store, operation, key, version)
    assert caught.value.outcome_unknown is (unknown_if_write and operation in WRITES)
    assert type(caught.value.__cause__) is error
    assert moto_store.read(key) == before


@needs_moto
def test_condition_failed_after_an_sdk_retry_is_outcome_unknown(
    moto_server: S3Server, moto_bucket: str
) -> None:
    """A caller's client that retries: its retry of a landed create comes back 412."""
    client = moto_server.client(retries={"total_max_attempts": 2, "mode": "standard"})
    retrying = S3Store(moto_bucket, "locks", client=client)
    attempts: list[int] = []

    def lose_first_response(request: Any, **_kwargs: Any) -> None:
        attempts.append(len(attempts) + 1)
        if len(attempts) == 1:
            _deliver(request)
            raise botocore.exceptions.ReadTimeoutError(endpoint_url=request.url)

    try:
        with (
            _hooked(client, "before-send.s3.PutObject", lose_first_response),
            pytest.raises(StoreUnavailable, match="after 1 SDK retry") as caught,
        ):
            retrying.create("doc", b"after")
        assert caught.value.outcome_unknown is True
        assert attempts == [1, 2]
        assert retrying.stats.creates == 2, "every attempt counts"
        found = retrying.read("doc")
        assert found is not None
        assert found.data == b"after"
    finally:
        retrying.close()
        client.close()


def test_a_write_is_sent_whole_not_after_a_100_continue(moto_store: S3Store) -> None:
    """botocore's ``Expect: 100-continue`` costs a write a round trip more (issue 29): off."""
    sent: list[str | None] = []
    hook = lambda request, **_: sent.append(request.headers.get("Expect"))  # noqa: E731
    with _hooked(moto_store.client, "before-send.s3", hook):
        version = moto_store.create("expect", b"x" * 300)
        moto_store.replace("expect", b"y" * 300, version)
    assert sent == [None, None]
