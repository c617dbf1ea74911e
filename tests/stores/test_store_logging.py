"""Each store request and its outcome is logged at DEBUG on ``prioritylock.stores``, on every
store, and no credential ever appears in those lines."""

from __future__ import annotations

import logging
import uuid

import pytest

from prioritylock._errors import ConditionFailed
from prioritylock.stores import NOT_MODIFIED, ConditionalReader, ObjectStore
from tests._servers.azure import ACCOUNT_KEY

pytestmark = [pytest.mark.timeout(60)]


def _secrets(request: pytest.FixtureRequest, kind: str) -> list[str]:
    secrets = [ACCOUNT_KEY]
    if kind.startswith("s3-"):
        server = request.getfixturevalue(f"{kind.removeprefix('s3-')}_server")
        secrets.append(server.secret_access_key)
    if kind == "redis":
        secrets.append(request.getfixturevalue("redis_server").password)
    return secrets


def test_each_request_and_its_outcome_is_logged_at_debug(
    store: ObjectStore,
    store_kind: str,
    request: pytest.FixtureRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    base = f"logging-{uuid.uuid4().hex[:8]}/"
    key = base + "doc"
    first = store.create(key, b"one")
    assert store.read(key) is not None
    assert isinstance(store, ConditionalReader)
    assert store.read_if_changed(key, first) is NOT_MODIFIED
    second = store.replace(key, b"two", first)
    with pytest.raises(ConditionFailed):
        store.replace(key, b"three", first)
    assert store.list(base) == [key]
    store.delete(key, second)
    assert store.read(key) is None

    ours = [r for r in caplog.records if r.name == "prioritylock.stores"]
    assert all(r.levelno == logging.DEBUG for r in ours)
    lines = [r.getMessage() for r in ours]
    wanted = [
        f"create {key!r}: version {first}",
        f" {key!r}: version {first}",  # the read
        f" {key!r}: not modified",
        f"replace {key!r}: version {second}",
        f"replace {key!r}: condition failed",
        f"list {base!r}: 1 keys",
        f"delete {key!r}: ",
        f" {key!r}: absent",
    ]
    at = 0
    for line in lines:  # in this order; a line may be several requests (an empty blob's read)
        if at < len(wanted) and wanted[at] in line:
            at += 1
    assert at == len(wanted), f"missing {wanted[at:]!r} in {lines!r}"
    everything = "\n".join(
        caplog.handler.format(record) for record in caplog.records
    )  # the SDKs' own lines too
    for secret in _secrets(request, store_kind):
        assert secret not in everything, f"a credential was logged ({store_kind})"


def test_nothing_is_formatted_with_debug_off(
    store: ObjectStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="prioritylock.stores")
    store.create(f"logging-{uuid.uuid4().hex[:8]}/doc", b"one")
    assert not [r for r in caplog.records if r.name == "prioritylock.stores"]
