"""replace_if_unchanged: compare-and-swap for your own objects (the Ozone pattern)."""

from __future__ import annotations

from prioritylock.stores._base import ObjectStore, Versioned

__all__ = ["replace_if_unchanged"]


def replace_if_unchanged(store: ObjectStore, key: str, data: bytes, seen: Versioned | None) -> str:
    """Write ``data`` at ``key`` only if the object is still what ``seen`` was.

    ``seen`` is what you read (``store.read(key)``): ``None`` means "only if it is still absent".
    On stores whose versions are content hashes (S3 ETags: ``store.capabilities.unique_versions``
    is false), writing the same bytes twice gives the same version: put something that changes on
    every write (a counter, the fencing token) into the object.

    Pair it with the lock's fencing token — write the token into the object and refuse to
    replace an object that carries a higher one — and a holder that lost its lock can never
    overwrite its successor's work.

    :returns: the object's new version.
    :raises ConditionFailed: somebody changed (or created, or deleted) the object since you read it.
    :raises StoreError: the store failed.
    """
    if seen is None:
        return store.create(key, data)
    return store.replace(key, data, seen.version)
