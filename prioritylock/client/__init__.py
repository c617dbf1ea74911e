"""A Python client of ``prioritylock serve``, over its gRPC lock API (``prioritylock.v1``).

For an app that takes its locks from the service rather than from a store (a fleet in many
languages, the store's credentials only in the service)::

    from prioritylock.client import Client

    with Client("127.0.0.1:50001") as client:
        with client.lock("lockstore", "nightly-report", owner="batch", timeout=30) as held:
            write_report(fence=held.fence)

:class:`Client` blocks; :class:`AsyncClient` is the same, awaited. A lock held with ``lock()``
lasts as long as its ``with`` block (the service renews it); its events (a cleanup request, its
withdrawal, the loss of the lock) reach callbacks, or ``held.events()`` with ``AsyncClient``.
Errors are the library's (:class:`~prioritylock.LockTimeout`, :class:`~prioritylock.LockLost`,
...), and :class:`~prioritylock.ServiceError` for what only a service can answer. Needs
``pip install 'prioritylock[client]'``.
"""

from prioritylock._errors import ServiceError
from prioritylock._public import publish
from prioritylock.client._async import AsyncClient, AsyncHeld
from prioritylock.client._base import (
    CleanupRequested,
    Event,
    Held,
    Lost,
    Requestor,
    RequestWithdrawn,
)
from prioritylock.client._sync import Client

__all__ = [
    "AsyncClient",
    "AsyncHeld",
    "CleanupRequested",
    "Client",
    "Event",
    "Held",
    "Lost",
    "RequestWithdrawn",
    "Requestor",
    "ServiceError",
]

publish(__name__, globals(), __all__)
