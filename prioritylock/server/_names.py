"""Where a resource of an app lives: the served stores by name, and each store's key prefix.

Both lock APIs (alpha1 and alpha2) name locks the same way, so a resource locked through one is
the same lease document as through the other: ``v1/path/PREFIX/RESOURCE``, with the prefix the
app id unless the store's component says otherwise (Dapr's ``keyPrefix``).
"""

from __future__ import annotations

from collections.abc import Mapping

from prioritylock._errors import ConfigError
from prioritylock.stores._base import ObjectStore
from scopes import LockScope, ScopeKind

__all__ = ["BadRequest", "Names", "StoreNotFound"]


class BadRequest(ValueError):
    """The request is malformed (Dapr's ERR_MALFORMED_REQUEST); the message says why."""


class StoreNotFound(LookupError):
    """No store of that name is served (Dapr's ERR_LOCK_STORE_NOT_FOUND)."""


class Names:
    """The stores one service serves for one app id, and how resource ids become lock paths."""

    def __init__(
        self,
        stores: Mapping[str, ObjectStore],
        app_id: str,
        *,
        key_prefixes: Mapping[str, str | None] | None = None,
    ) -> None:
        self.app_id = app_id
        self._stores = dict(stores)
        self._prefixes: dict[str, tuple[str, ...]] = {}
        for name in stores:
            prefix = (key_prefixes or {}).get(name, app_id)
            try:
                self._prefixes[name] = () if prefix is None else LockScope.path(prefix).parts
            except ValueError as exc:
                raise ConfigError(f"key prefix of {name}: {exc}", option="app_id") from exc

    @property
    def store_names(self) -> list[str]:
        return sorted(self._stores)

    def store(self, store_name: str) -> ObjectStore:
        """:raises StoreNotFound: no such store."""
        try:
            return self._stores[store_name]
        except KeyError:
            raise StoreNotFound(f"lock store {store_name} not found") from None

    def prefix(self, store_name: str) -> tuple[str, ...]:
        """The path parts every resource of ``store_name`` sits under."""
        self.store(store_name)
        return self._prefixes[store_name]

    def path(self, store_name: str, resource_id: str) -> tuple[str, ...]:
        """The lock path of a resource (what ``LockBuilder.path`` takes).

        :raises StoreNotFound: no such store.
        :raises BadRequest: the resource id is not a valid lock path.
        """
        parts = (*self.prefix(store_name), resource_id)
        try:
            LockScope.path(*parts)
        except ValueError as exc:
            raise BadRequest(f"ResourceId is not valid: {exc}") from None
        return parts

    def key(self, store_name: str, resource_id: str) -> str:
        """The store key of a resource's lease document."""
        return LockScope.path(*self.path(store_name, resource_id)).key

    def resource_id(self, store_name: str, scope: LockScope) -> str | None:
        """The resource id whose lock ``scope`` is, or None when it is not under the prefix."""
        prefix = self.prefix(store_name)
        if scope.kind is not ScopeKind.PATH or scope.parts[: len(prefix)] != prefix:
            return None
        rest = scope.parts[len(prefix) :]
        return "/".join(rest) if rest else None
