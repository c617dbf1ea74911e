"""The store contract, run against every store kind of tests/conftest.py (``store_kind``).

The contract skips its conditional-read cases for a store that is not a ``ConditionalReader``
(the operation is optional); every built-in store is one, which this module checks so that those
skips can't hide a missing feature. What crosses the wire (304s, no body) is checked per store in
``test_s3.py``, ``test_gcs.py`` and ``test_azure.py``.
"""

from __future__ import annotations

import pytest

from prioritylock.stores import NOT_MODIFIED, ConditionalReader, Versioned
from prioritylock.testing import StoreContract
from tests.conftest import ALL_KINDS, StoreFactory, selected_kinds

CONDITIONAL_KINDS = selected_kinds(ALL_KINDS)


class TestStoreContract(StoreContract):
    """Every :class:`~prioritylock.testing.StoreContract` test, once per store kind."""


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", CONDITIONAL_KINDS)
def test_built_in_stores_read_conditionally(request: pytest.FixtureRequest, kind: str) -> None:
    factory: StoreFactory = request.getfixturevalue(f"{kind.replace('-', '_')}_store_factory")
    store = factory()
    try:
        assert isinstance(store, ConditionalReader), f"{store!r} has no read_if_changed"
        first = store.create("doc", b"one")
        store.stats.reset()
        assert store.read_if_changed("doc", first) is NOT_MODIFIED
        assert (store.stats.reads, store.stats.total, store.stats.not_modified) == (1, 1, 1)
        second = store.replace("doc", b"two", first)
        store.stats.reset()
        assert store.read_if_changed("doc", first) == Versioned(b"two", second)
        assert (store.stats.reads, store.stats.total, store.stats.not_modified) == (1, 1, 0)
    finally:
        store.close()
