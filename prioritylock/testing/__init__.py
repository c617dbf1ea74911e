"""Helpers for testing code that uses prioritylock, and stores written for it.

- :class:`StoreContract`: the tests every :class:`~prioritylock.stores.ObjectStore` must pass;
  subclass it to check your own store. It needs pytest: ``pip install 'prioritylock[testing]'``.
  It is loaded on first use, so the other helpers here work without pytest.
- :class:`DelegatingStore`: forwards the whole store seam to another store; a wrapper that
  times, counts or fails requests overrides one method.
- :class:`~prioritylock.testing.faults.FaultyStore`: wrap a store and make chosen requests fail
  the ways real stores fail.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from prioritylock.stores._delegate import DelegatingStore

if TYPE_CHECKING:
    from prioritylock.testing.contract import StoreContract

__all__ = ["DelegatingStore", "StoreContract"]

_CONTRACT = "prioritylock.testing.contract"


def __getattr__(name: str) -> Any:
    if name == "StoreContract":
        # Imported on first use, so that the other helpers here don't need pytest.
        if _CONTRACT not in sys.modules:
            try:
                import pytest
            except ModuleNotFoundError as exc:
                if exc.name != "pytest":
                    raise
                raise ModuleNotFoundError(
                    "prioritylock.testing.StoreContract runs under pytest, which is not "
                    "installed: pip install 'prioritylock[testing]'",
                    name="pytest",
                ) from None

            # Let pytest rewrite the contract's asserts, as it does for test modules.
            pytest.register_assert_rewrite(_CONTRACT)
        from prioritylock.testing.contract import StoreContract

        return StoreContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
