"""The ``driver`` fixture: a lock test module that uses it runs once per driver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.lock import helpers


@pytest.fixture(params=["sync", "async"])
def driver(request: pytest.FixtureRequest) -> Iterator[str]:
    """Build the test's locks (``helpers.make``) as ``Lock`` or as ``AsyncLock``."""
    helpers.DRIVER[0] = str(request.param)
    try:
        yield helpers.DRIVER[0]
    finally:
        helpers.DRIVER[0] = "sync"
