"""The scheme registry: a new store is one module and one registry line; URLs that are not
URLs get the file URL they may mean; a missing extra is said once."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import prioritylock.stores
from prioritylock import LockBuilder
from prioritylock._errors import ConfigError
from prioritylock.stores import ObjectStore, open_store
from prioritylock.stores._registry import SCHEMES, Scheme
from prioritylock.testing import StoreContract
from tests.stores._toy_store import ToyStore

pytestmark = [pytest.mark.timeout(60)]


@pytest.fixture
def toy_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    # The one registry line a new store needs (here for this test only).
    monkeypatch.setitem(SCHEMES, "toy", Scheme("tests.stores._toy_store"))


def test_a_store_added_with_one_registry_line_opens_by_url(toy_scheme: None) -> None:
    store = open_store("toy://box")
    assert type(store) is ToyStore
    lock = LockBuilder().store("toy://box").path("jobs/a").owner("me").build()
    try:
        assert lock.try_lock()
        assert lock.is_current_owner()
        lock.unlock()
    finally:
        lock.close()
    with pytest.raises(ConfigError) as caught:
        open_store("nope://x")
    assert "toy://" in str(caught.value), "the known schemes come from the registry"


def test_without_its_registry_line_the_scheme_is_unknown() -> None:
    with pytest.raises(ConfigError, match="unknown store URL scheme 'toy'"):
        open_store("toy://box")


class TestToyStoreContract(StoreContract):
    """The new store passes the whole store contract, opened through its URL."""

    @pytest.fixture
    def store_factory(self, toy_scheme: None) -> Callable[[], ObjectStore]:
        return lambda: open_store(f"toy://contract-{os.getpid()}")

    @pytest.fixture
    def store(self, store_factory: Callable[[], ObjectStore]) -> Iterator[ObjectStore]:
        store = store_factory()
        assert isinstance(store, ToyStore)
        yield store
        store.close()


# -- a missing extra: one message, nothing chained ------------------------------------------------


def _shown(error: BaseException) -> str:
    return "".join(traceback.format_exception(error))


def _assert_said_once(error: BaseException, extra: str) -> None:
    assert error.__cause__ is None and error.__suppress_context__, "nothing chained"
    shown = _shown(error)
    assert shown.count(f"pip install 'prioritylock[{extra}]'") == 1, shown
    assert "During handling" not in shown and "direct cause" not in shown, shown


def test_a_registered_store_whose_module_is_missing_names_its_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(SCHEMES, "toy", Scheme("tests.stores._no_such_store", extra="toy"))
    with pytest.raises(ConfigError) as caught:
        open_store("toy://box")
    _assert_said_once(caught.value, "toy")


@pytest.fixture
def without_botocore(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if boto3 (and so botocore) were not installed."""
    for name in ("botocore", "botocore.config", "botocore.exceptions", "botocore.session"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "prioritylock.stores._s3", raising=False)


def test_open_store_without_the_s3_extra_says_so_once(without_botocore: None) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("s3://bucket/locks")
    assert "'botocore'" in str(caught.value)
    _assert_said_once(caught.value, "s3")


@pytest.fixture
def without_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if google-cloud-storage's dependency requests were not installed."""
    for name in ("requests", "requests.adapters"):
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "prioritylock.stores._gcs", raising=False)


def test_open_store_without_the_gcs_extra_names_the_sdk_and_the_extra(
    without_requests: None,
) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store("gs://bucket/locks")
    said = str(caught.value)
    assert "Google Cloud Storage SDK, google-cloud-storage" in said, said
    assert "'requests'" in said, "and what was found missing"
    _assert_said_once(caught.value, "gcs")


def test_importing_s3store_without_the_extra_says_so_once(without_botocore: None) -> None:
    with pytest.raises(ImportError) as caught:
        prioritylock.stores.S3Store  # noqa: B018
    assert caught.value.name == "botocore"
    _assert_said_once(caught.value, "s3")


# -- paths where URLs belong ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/var/locks", "/srv/team locks"])
def test_an_absolute_path_is_refused_with_its_file_url(path: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(path)
    assert f"'file://{path.replace(' ', '%20')}'" in str(caught.value), caught.value


def test_a_relative_path_is_refused_with_the_absolute_file_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for given in ("locks", "file://locks"):
        with pytest.raises(ConfigError) as caught:
            open_store(given)
        assert f"'file://{tmp_path}/locks'" in str(caught.value), caught.value
    assert not (tmp_path / "locks").exists(), "nothing was created"


def test_the_builder_refuses_a_path_the_same_way() -> None:
    with pytest.raises(ConfigError, match="'file:///var/locks'"):
        LockBuilder().store("/var/locks")


def test_the_cli_refuses_a_path_the_same_way(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "prioritylock", "info", "locks", "jobs/a"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode != 0
    assert f"'file://{tmp_path}/locks'" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "locks").exists()


@pytest.mark.parametrize("url", ["user:hunter2@bucket", "a?token=hunter2", "file://u:hunter2@x/y"])
def test_a_path_suggestion_never_repeats_a_secret(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert "hunter2" not in _shown(caught.value)
