"""The store contract, run against every store kind of tests/conftest.py (``store_kind``)."""

from __future__ import annotations

from prioritylock.testing import StoreContract


class TestStoreContract(StoreContract):
    """Every :class:`~prioritylock.testing.StoreContract` test, once per store kind."""
