"""The ``driver`` fixture: a lock test module that uses it runs once per driver. The stores the
lock suites run on: ``store_kind`` here is every kind but SeaweedFS (:data:`LOCK_KINDS`)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from prioritylock._wake import NOTICES
from tests.conftest import ALL_KINDS, selected_kinds
from tests.lock import helpers

#: The stores the lock suites run on. Both S3 emulators run the same S3Store, whose answers
#: tests/stores pins on each (the contract and its faults, the racing writes); the lock suites
#: run it once, on moto (S3's behaviour, and the cheaper of the two per test). SeaweedFS stays in
#: the suites that choose their own stores: the contention and SDK-fault tests here.
LOCK_KINDS = [kind for kind in ALL_KINDS if kind != "s3-seaweedfs"]


@pytest.fixture(params=selected_kinds(LOCK_KINDS))
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> Iterator[str]:
    """Build the test's locks (``helpers.make``) as ``Lock`` or as ``AsyncLock``."""
    helpers.DRIVER[0] = str(request.param)
    try:
        yield helpers.DRIVER[0]
    finally:
        helpers.DRIVER[0] = "sync"


#: ``PRIORITYLOCK_NOTICES=off`` runs the lock suites with in-process notices dropped (``_wake``):
#: notices are hints, so every behaviour must hold without them, only slower.
NOTICES_OFF = os.environ.get("PRIORITYLOCK_NOTICES", "").strip().lower() == "off"
#: ``PRIORITYLOCK_NOTICES=faults:SEED`` drops, duplicates and delays them (``_wake.Faults``).
NOTICES_FAULTY = NOTICES.faults is not None


@pytest.fixture(autouse=True)
def _notices_mode() -> Iterator[None]:
    NOTICES.enabled = not NOTICES_OFF
    try:
        yield
    finally:
        NOTICES.enabled = True


@pytest.fixture
def notices() -> None:
    """For a test that measures how fast a notice arrives: skipped when notices are dropped."""
    if NOTICES_OFF or NOTICES_FAULTY:
        pytest.skip("notices are dropped or faulty (PRIORITYLOCK_NOTICES)")
