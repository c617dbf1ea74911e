"""Helix-style lock scopes: what a lock protects, and the one store key that names it.

>>> from scopes import LockScope
>>> scope = LockScope.resource("prod", "orders-db")
>>> scope.key
'v1/resource/prod/orders-db'
>>> LockScope.from_key(scope.key) == scope
True

Pure naming: no I/O, and no dependency on ``prioritylock``.
"""

from scopes._scope import LockScope, ScopeKind

__all__ = ["LockScope", "ScopeKind"]

# Shown at their public path (scopes.LockScope) in repr, tracebacks and the API reference.
for _public in (LockScope, ScopeKind):
    _public.__module__ = __name__
del _public
