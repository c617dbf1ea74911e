"""The Hudi tests' fixtures: ``driver``, each test that takes it run on both drivers."""

from __future__ import annotations

import pytest

from tests.hudi.drivers import DRIVERS


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest) -> str:
    """ "sync" (``HudiTableLock``) or "async" (``AsyncHudiTableLock`` behind ``AsyncFace``)."""
    return str(request.param)
