"""The one list of store URL schemes: adding a store is its module and one line here.

A store module offers ``store_from_url(parts, options)``: the store for a URL split by
:func:`urllib.parse.urlsplit`, with its query options (each given once). It is imported the first
time a URL of its scheme is opened, so an optional SDK is loaded only by those who use it.
"""

from __future__ import annotations

import importlib
import urllib.parse
from typing import Protocol

import attrs

from prioritylock._errors import ConfigError
from prioritylock.stores._base import ObjectStore

__all__ = ["SCHEMES", "Scheme", "missing_extra"]


class _FromUrl(Protocol):
    def __call__(self, url: urllib.parse.SplitResult, options: dict[str, str]) -> ObjectStore: ...


@attrs.frozen
class Scheme:
    """Where the store for one URL scheme lives.

    :ivar module: the module with ``store_from_url``, imported on first use.
    :ivar extra: the pip extra that brings its SDK, if it needs one.
    :ivar store: the store's class, exported lazily from :mod:`prioritylock.stores`.
    """

    module: str
    extra: str | None = None
    store: str | None = None

    def opener(self, scheme: str) -> _FromUrl:
        """The module's ``store_from_url``.

        :raises ConfigError: its optional dependency is missing (said once, nothing chained).
        """
        try:
            module = importlib.import_module(self.module)
        except ImportError as exc:
            if self.extra is None:
                raise
            raise ConfigError(
                f"{scheme}:// stores need {_missing(exc, self.extra)}:"
                f" pip install 'prioritylock[{self.extra}]'"
            ) from None
        from_url: _FromUrl = module.store_from_url
        return from_url


SCHEMES: dict[str, Scheme] = {
    "memory": Scheme("prioritylock.stores._memory"),
    "file": Scheme("prioritylock.stores._local"),
    "s3": Scheme("prioritylock.stores._s3", extra="s3", store="S3Store"),
    "gs": Scheme("prioritylock.stores._gcs", extra="gcs", store="GCSStore"),
    "az": Scheme("prioritylock.stores._azure", extra="azure", store="AzureBlobStore"),
    "redis": Scheme("prioritylock.stores._redis", extra="redis", store="RedisStore"),
    "rediss": Scheme("prioritylock.stores._redis", extra="redis"),
    "etcd": Scheme("prioritylock.stores._etcd", extra="etcd", store="EtcdStore"),
    "etcds": Scheme("prioritylock.stores._etcd", extra="etcd"),
    "zk": Scheme("prioritylock.stores._zookeeper", extra="zookeeper", store="ZooKeeperStore"),
    "zks": Scheme("prioritylock.stores._zookeeper", extra="zookeeper"),
}


#: The SDK each extra brings, as a user would look it up (by its distribution's name).
_SDKS = {
    "s3": "the AWS SDK, boto3",
    "gcs": "the Google Cloud Storage SDK, google-cloud-storage",
    "azure": "the Azure Blob Storage SDK, azure-storage-blob",
    "redis": "the Redis client, redis-py",
    "zookeeper": "the ZooKeeper client, kazoo",
    "etcd": "the HTTP client for etcd's JSON gateway, urllib3",
}


def missing_extra(stores: str, extra: str, exc: ImportError) -> ImportError:
    """What a store module raises when its SDK is missing (``raise ... from None``)."""
    return ImportError(
        f"{stores} need {_missing(exc, extra)}: pip install 'prioritylock[{extra}]'",
        name=_package(exc),
    )


def _missing(exc: ImportError, extra: str) -> str:
    """The SDK the extra brings, and the package found missing (a dependency of it, perhaps)."""
    package = _package(exc)
    missing = f"the package {package!r}" if package else "an optional dependency"
    sdk = _SDKS.get(extra)
    return f"{sdk} ({missing} is not installed)" if sdk else missing


def _package(exc: ImportError) -> str | None:
    """The top-level package that is missing (``botocore`` for ``botocore.config``)."""
    return exc.name.partition(".")[0] if exc.name else None
