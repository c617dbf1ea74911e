"""The store seam and the stores: where lease documents live.

Every store offers the same five conditional operations (:class:`ObjectStore`) and counts its
requests in ``store.stats``. ``open_store(url)`` picks one from a URL.
"""

from prioritylock.stores._base import ObjectStore, StoreCapabilities, StoreStats, Versioned
from prioritylock.stores._cas import replace_if_unchanged
from prioritylock.stores._local import LocalStore
from prioritylock.stores._memory import MemoryStore
from prioritylock.stores._url import open_store

__all__ = [
    "LocalStore",
    "MemoryStore",
    "ObjectStore",
    "StoreCapabilities",
    "StoreStats",
    "Versioned",
    "open_store",
    "replace_if_unchanged",
]
