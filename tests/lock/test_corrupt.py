"""Corrupt or foreign lease documents: a typed error naming the key, and nothing overwritten.

Every kind of bad document runs on the stores of one machine (memory, local). Past the store's
read, a kind takes the same path through the lease decoder on every store, so the others (those
of tests/lock/conftest.py) run the kinds whose bytes a store itself could change or refuse (not
UTF-8, over the size bound, 60 KB of nesting) and one well-formed document of another schema:
:data:`ON_EVERY_STORE`.
"""

from __future__ import annotations

import json

import pytest

from prioritylock import CorruptLease
from prioritylock._lease import MAX_DOCUMENT_BYTES, decode
from prioritylock.stores import ObjectStore
from tests.conftest import LOCAL_KINDS, selected_kinds
from tests.lock.conftest import LOCK_KINDS
from tests.lock.helpers import make

pytestmark = [pytest.mark.timeout(60), pytest.mark.usefixtures("driver")]

_GOOD = {
    "schema": 1,
    "name": "v1/path/jobs/test",
    "fence": 3,
    "nonce": "abc",
    "holder": None,
    "requestor": None,
    "event": None,
}

_HOLDER = {
    "lock_id": "id",
    "owner": "o",
    "message": "",
    "priority": 1,
    "lease_timeout": 30,
    "cleanup_timeout": 0,
    "forceful": False,
    "acquired_at": 0,
    "renewed_at": 0,
    "beat": 0,
}

BAD_DOCUMENTS = {
    "not-json": b"{this is not json",
    "not-utf8": b"\xff\xfe\x00",
    "not-an-object": b"[1, 2, 3]",
    "unknown-schema": json.dumps({**_GOOD, "schema": 99}).encode(),
    "no-schema": json.dumps({k: v for k, v in _GOOD.items() if k != "schema"}).encode(),
    "foreign-name": json.dumps({**_GOOD, "name": "v1/path/other"}).encode(),
    "missing-fence": json.dumps({k: v for k, v in _GOOD.items() if k != "fence"}).encode(),
    "string-fence": json.dumps({**_GOOD, "fence": "3"}).encode(),
    "holder-not-object": json.dumps({**_GOOD, "holder": "me"}).encode(),
    "holder-missing-fields": json.dumps({**_GOOD, "holder": {"lock_id": "x"}}).encode(),
    "nan": b'{"schema": 1, "fence": NaN}',
    "too-large": json.dumps({**_GOOD, "pad": "x" * MAX_DOCUMENT_BYTES}).encode(),
    # Issue 15: a recursion error escaped, untyped, from every entry point.
    "nested-arrays": b"[" * 30_000 + b"]" * 30_000,
    "nested-objects": b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    "nested-in-holder": b'{"schema":1,"name":"v1/path/jobs/test","fence":3,"nonce":"n",'
    + b'"holder":'
    + b"[" * 30_000
    + b"]" * 30_000
    + b"}",
    # Issue 15: fence + 1 could not be written, and every force_unlock raised ValueError.
    "fence-beyond-bigint": json.dumps({**_GOOD, "fence": 2**63}).encode(),
    "fence-of-4000-digits": json.dumps({**_GOOD, "fence": 10**3999}).encode(),
    "fence-at-bigint-max": json.dumps({**_GOOD, "fence": 2**63 - 1}).encode(),
    "reserve-beyond-bigint": json.dumps(
        {**_GOOD, "reserve": {"fence": 2**64, "boot": "b"}}
    ).encode(),
    # Issue 15: the strict reader let these through, then overwrote the document.
    "schema-true": json.dumps({**_GOOD, "schema": True}).encode(),
    "schema-float": json.dumps({**_GOOD, "schema": 1.0}).encode(),
    "fence-float": json.dumps({**_GOOD, "fence": 3.0}).encode(),
    "fence-true": json.dumps({**_GOOD, "fence": True}).encode(),
    "negative-beat": json.dumps({**_GOOD, "holder": {**_HOLDER, "beat": -1}}).encode(),
    "priority-true": json.dumps({**_GOOD, "holder": {**_HOLDER, "priority": True}}).encode(),
    "forceful-zero": json.dumps({**_GOOD, "holder": {**_HOLDER, "forceful": 0}}).encode(),
    "timeout-true": json.dumps({**_GOOD, "holder": {**_HOLDER, "lease_timeout": True}}).encode(),
}


#: The kinds that run on every store (the others run on memory and local only).
ON_EVERY_STORE = ("not-utf8", "too-large", "nested-arrays", "unknown-schema")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """(store kind, document kind) for the tests that take ``kind``: every document on the
    stores of one machine, :data:`ON_EVERY_STORE` on the others."""
    if "kind" not in metafunc.fixturenames:
        return
    pairs = [
        (store, kind)
        for store in selected_kinds(LOCK_KINDS)
        for kind in sorted(BAD_DOCUMENTS)
        if store in LOCAL_KINDS or kind in ON_EVERY_STORE
    ]
    metafunc.parametrize(("store_kind", "kind"), pairs, ids=[f"{s}-{k}" for s, k in pairs])


def test_corrupt_document_is_refused_and_left_alone(store: ObjectStore, kind: str) -> None:
    lock = make(store)
    key = lock.key
    store.create(key, BAD_DOCUMENTS[kind])
    before = store.read(key)
    for call in (lock.try_lock, lock.info, lambda: lock.lock(timeout=0.1)):
        with pytest.raises(CorruptLease) as caught:
            call()
        assert caught.value.key == key
    assert store.read(key) == before  # same bytes, same version: nothing overwritten


def test_force_unlock_refuses_a_corrupt_document_too(store: ObjectStore) -> None:
    lock = make(store)
    store.create(lock.key, b"garbage")
    with pytest.raises(CorruptLease):
        lock.force_unlock("clean up")
    found = store.read(lock.key)
    assert found is not None and found.data == b"garbage"


def test_force_unlock_can_overwrite_a_corrupt_document_with_a_higher_fence(
    store: ObjectStore,
) -> None:
    lock = make(store)
    store.create(lock.key, b'{"schema": 99, "fence": 41}')
    assert lock.force_unlock("repair", overwrite_corrupt=True) is None
    info = lock.info()
    assert info is not None and not info.held and info.last_event == "force_unlock"
    assert info.fence > 1_600_000_000_000  # wall-clock milliseconds: beyond any counted fence
    assert lock.try_lock() and lock.fencing_token == info.fence + 1
    lock.unlock()


def test_the_documented_recovery_works_on_every_corrupt_document(
    store: ObjectStore, kind: str
) -> None:
    """``force_unlock(..., overwrite_corrupt=True)`` frees the lock, whatever the document held,
    with a fence above the old one when it can be read, and a fence that can still count."""
    lock = make(store)
    store.create(lock.key, BAD_DOCUMENTS[kind])
    with pytest.raises(CorruptLease):
        lock.force_unlock("clean up")
    assert lock.force_unlock("repair", overwrite_corrupt=True) is None
    info = lock.info()
    assert info is not None and not info.held and info.last_event == "force_unlock"
    assert 1_600_000_000_000 < info.fence < 2**63 - 2**20
    assert lock.try_lock() and lock.fencing_token == info.fence + 1
    lock.unlock()


def test_recovery_near_the_fence_bound_keeps_counting_then_refuses(store: ObjectStore) -> None:
    """A corrupt document whose fence is just below the readable bound is replaced with its
    fence + 1, and counting goes on; a fence past the bound is written (never beyond 2**63 - 1)
    but other readers refuse it, as corrupt."""
    bound = 2**63 - 1 - 2**16  # the largest fence a reader accepts
    lock = make(store)
    store.create(lock.key, json.dumps({"schema": 99, "fence": bound - 2}).encode())
    lock.force_unlock("repair", overwrite_corrupt=True)
    info = lock.info()
    assert info is not None and info.fence == bound - 1
    assert lock.try_lock() and lock.fencing_token == bound
    lock.unlock()
    assert lock.try_lock() and lock.fencing_token == bound + 1  # written: below 2**63 - 1
    lock.unlock()
    found = store.read(lock.key)
    assert found is not None
    with pytest.raises(CorruptLease, match="fence"):
        decode(lock.key, found.data)  # beyond the readable bound: other clients refuse it
    # ... and recover as from any corrupt document (BAD_DOCUMENTS["fence-at-bigint-max"]).
