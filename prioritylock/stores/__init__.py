"""The store seam and the stores: where lease documents live.

Every store offers the same five conditional operations (:class:`ObjectStore`) and counts its
requests in ``store.stats``. ``open_store(url)`` picks one from a URL. The cloud stores
(``S3Store``, ``GCSStore``, ``AzureBlobStore``) and ``RedisStore`` load their SDK only when first
used.
"""

from typing import TYPE_CHECKING, Any

from prioritylock._public import publish
from prioritylock.stores._base import (
    NOT_MODIFIED,
    ConditionalReader,
    NotModified,
    ObjectStore,
    ReadResult,
    StoreCapabilities,
    StoreStats,
    UnsyncedWriter,
    Versioned,
)
from prioritylock.stores._cas import replace_if_unchanged
from prioritylock.stores._local import LocalStore
from prioritylock.stores._memory import MemoryStore
from prioritylock.stores._registry import SCHEMES
from prioritylock.stores._url import open_store

if TYPE_CHECKING:
    from prioritylock.stores._azure import AzureBlobStore
    from prioritylock.stores._etcd import EtcdStore
    from prioritylock.stores._gcs import GCSStore
    from prioritylock.stores._redis import RedisStore
    from prioritylock.stores._s3 import S3Store
    from prioritylock.stores._zookeeper import ZooKeeperStore

_LAZY = {scheme.store: scheme for scheme in SCHEMES.values() if scheme.store}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    scheme = _LAZY[name]
    try:
        module = importlib.import_module(scheme.module)
    except ImportError as exc:
        raise ImportError(
            f"{name} needs {exc.name or 'an optional dependency'}:"
            f" pip install 'prioritylock[{scheme.extra}]'",
            name=exc.name,
        ) from None
    store = getattr(module, name)
    publish(__name__, {name: store}, [name])
    return store


__all__ = [
    "AzureBlobStore",
    "ConditionalReader",
    "EtcdStore",
    "GCSStore",
    "LocalStore",
    "MemoryStore",
    "NOT_MODIFIED",
    "NotModified",
    "ObjectStore",
    "ReadResult",
    "RedisStore",
    "S3Store",
    "StoreCapabilities",
    "StoreStats",
    "UnsyncedWriter",
    "Versioned",
    "ZooKeeperStore",
    "open_store",
    "replace_if_unchanged",
]

publish(__name__, globals(), __all__)
