"""open_store(url): which store a URL gives, and the ConfigError each bad URL gives."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from prioritylock._errors import ConfigError
from prioritylock.stores import LocalStore, MemoryStore, open_store

SECRET = "hunter2"


def test_named_memory_store_is_shared_by_name() -> None:
    name = f"open-store-{uuid.uuid4().hex}"
    first = open_store(f"memory://{name}")
    assert isinstance(first, MemoryStore)
    assert open_store(f"memory://{name}") is first
    assert open_store(f"memory://{name}/") is first
    assert open_store(f"memory://{name}-other") is not first


def test_unnamed_memory_store_is_new_each_time() -> None:
    first = open_store("memory://")
    assert isinstance(first, MemoryStore)
    assert open_store("memory://") is not first


def test_file_url_opens_a_local_store_in_that_directory(tmp_path: Path) -> None:
    directory = tmp_path / "a store"
    store = open_store(f"file://{tmp_path}/a%20store")
    assert isinstance(store, LocalStore)
    assert store.directory == str(directory)
    assert directory.is_dir()
    with_host = open_store(f"file://localhost{directory}")
    assert isinstance(with_host, LocalStore)
    assert with_host.directory == str(directory)


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("zz://bucket/prefix", "unknown store URL scheme 'zz'"),
        ("ZZ://bucket", "unknown store URL scheme"),
        ("just/a/path", "has no scheme"),
        ("/abs/path", "has no scheme"),
        ("", "non-empty"),
        ("   ", "non-empty"),
        ("file://host/x", "no host"),
        ("file://relative", "no host"),
        ("file:///", "absolute directory path"),
        ("file:///tmp/x?mode=1", "takes only the option durable"),
        ("memory://x/path", "takes only a name"),
        ("memory://x?size=1", "takes only a name"),
        ("zz://b?key=1&key=2", "option 'key' is given 2 times"),
        ("zz://[bucket", "malformed store URL"),
    ],
)
def test_bad_urls_are_config_errors_naming_the_problem(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert problem in str(caught.value), f"{url!r}: {caught.value}"
    assert isinstance(caught.value, ValueError)


def test_a_non_string_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="non-empty string"):
        open_store(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "url",
    [
        f"zz://user:{SECRET}@bucket?key={SECRET}",
        f"zz://bucket/prefix?token={SECRET}&region=eu",
        f"zz://bucket?key={SECRET}&key={SECRET}",
        f"zz://[{SECRET}",
        f"file:///tmp/x?token={SECRET}",
        f"memory://x?secret={SECRET}",
        f"memory://user:{SECRET}@x/path",
        f"file://user:{SECRET}@host/x",
        f"user:{SECRET}@bucket",
    ],
)
def test_errors_never_show_secrets_from_the_url(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    error: BaseException | None = caught.value
    while error is not None:  # nor does anything chained to it
        assert SECRET not in str(error), f"secret shown in {type(error).__name__}: {error}"
        error = error.__cause__ or error.__context__


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("file:/tmp/locks", "file:///tmp/locks"),
        ("memory:/x", "memory://x"),
        ("memory:x", "memory://x"),
        ("s3//bucket/locks", "s3://bucket/locks"),
        ("S3:bucket/locks", "s3://bucket/locks"),
        ("gs//bucket", "gs://bucket"),
    ],
)
def test_a_mistyped_separator_shows_what_was_typed_and_the_url_meant(
    typed: str, meant: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(typed)
    said = str(caught.value)
    assert repr(typed) in said and f"did you mean {meant!r}?" in said, said


@pytest.mark.parametrize(
    ("typed", "meant"),
    [
        ("fiel:///tmp/x", "file:///tmp/x"),
        ("memroy://x", "memory://x"),
        ("s3a://bucket/locks", "s3://bucket/locks"),
        ("gcs://bucket/locks", "gs://bucket/locks"),
    ],
)
def test_a_near_miss_of_a_known_scheme_suggests_that_scheme(typed: str, meant: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(typed)
    assert f"did you mean {meant!r}?" in str(caught.value), caught.value


def test_a_far_miss_suggests_nothing() -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("zz://bucket")
    assert "did you mean" not in str(caught.value)


@pytest.mark.parametrize("typed", [f"s3:user:{SECRET}@bucket", f"s3//bucket?token={SECRET}"])
def test_a_suggested_url_never_repeats_a_secret(typed: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(typed)
    assert "did you mean 's3://" in str(caught.value)
    assert SECRET not in str(caught.value)
