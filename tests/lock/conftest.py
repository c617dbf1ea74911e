"""The ``driver`` fixture: a lock test module that uses it runs once per driver."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from prioritylock._wake import NOTICES
from tests.lock import helpers


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
