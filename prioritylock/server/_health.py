"""Whether the served stores answer: the check at start-up, the outbound health that reports it
while they don't (``--no-store-check``), and what a client is told of a store failure.

A store is checked with one read (of a key no lock uses). At start-up a store that fails it stops
the service (:class:`StoreCheckFailed`: the CLI exits 4 with the store's name and the fix).
Started with ``--no-store-check``, the service serves anyway: ``GET /v1.0/healthz/outbound``
answers 500 and the gRPC health service NOT_SERVING until every store has answered once
(:class:`StoreHealth` reads again, backing off, until then); ``GET /v1.0/healthz`` says only that
the process is up, as Dapr's does.

What a client hears of a store failure (:func:`store_failure`) is the error's class and its
message: the stores' messages name the bucket, key, endpoint and the fix, never a credential (the
store modules keep SDK messages and request URLs out of them). :func:`redact` strips the
user-info and query of any URL left in a message, as a second guard.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Mapping

from prioritylock._errors import PriorityLockError, StoreError
from prioritylock.stores._base import ObjectStore

__all__ = [
    "CHECK_KEY",
    "StoreCheckFailed",
    "StoreHealth",
    "check_stores",
    "redact",
    "store_failure",
]

log = logging.getLogger("prioritylock.server")

#: The key a store check reads: outside the lock keys (``v1/...``), so no lease is ever read.
CHECK_KEY = "prioritylock-store-check"
#: Seconds before the first read again of a store that did not answer, and the longest wait.
RECHECK_FIRST = 0.25
RECHECK_MAX = 2.0

# scheme://user:secret@host -> scheme://***@host; and a URL's query (it may carry a SAS or key).
_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s'\"@]*@")
_QUERY = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^\s'\"?]*)\?[^\s'\"]*")


def redact(text: str) -> str:
    """``text`` with the user-info and the query of every URL in it hidden."""
    return _QUERY.sub(r"\1?***", _USERINFO.sub(r"\1***@", text))


def store_failure(what: str, store: str, exc: PriorityLockError) -> str:
    """What a client is told (and the log says) of a store failure: ``what`` failed, the
    error's class, the store's name, and the store's own message (which says the fix)."""
    return f"{what}: {type(exc).__name__} in lock store {store}: {redact(str(exc))}"


class StoreCheckFailed(Exception):
    """A store did not answer its check at start-up; the message names it and the fix."""

    def __init__(self, store: str, shown: str, error: StoreError) -> None:
        super().__init__(
            f"lock store {store} ({shown}) failed its first read: {redact(str(error))}. Fix "
            "the store (or its URL), or start with --no-store-check to serve while it is "
            "unreachable (GET /v1.0/healthz/outbound then answers 500 until it answers)"
        )
        self.store = store
        self.error = error


def check_stores(stores: Mapping[str, ObjectStore], shown: Mapping[str, str]) -> None:
    """One read of each store (``shown``: what to call each, without secrets).

    :raises StoreCheckFailed: a store failed its read (the first one, in name order).
    """
    for name in sorted(stores):
        try:
            stores[name].read(CHECK_KEY)
        except StoreError as exc:
            raise StoreCheckFailed(name, shown[name], exc) from exc


class StoreHealth:
    """Which served stores have answered; until all have, ``healthy`` is False and
    :meth:`run` reads the others again (backing off to :data:`RECHECK_MAX` seconds)."""

    def __init__(self, stores: Mapping[str, ObjectStore], *, checked: bool) -> None:
        self._stores = dict(stores)
        self._waiting = set() if checked else set(stores)

    @property
    def healthy(self) -> bool:
        return not self._waiting

    @property
    def waiting(self) -> list[str]:
        """The stores that have not answered yet, by name."""
        return sorted(self._waiting)

    async def run(self, on_healthy: Callable[[], Awaitable[None]]) -> None:
        """Read each store that has not answered until it does; then ``on_healthy()``."""
        delay = RECHECK_FIRST
        said: dict[str, str] = {}
        while self._waiting:
            for name in self.waiting:
                try:
                    await asyncio.to_thread(self._stores[name].read, CHECK_KEY)
                except StoreError as exc:
                    text = redact(str(exc))
                    if said.get(name) != text:  # once per distinct failure, not every read
                        log.warning(
                            "prioritylock serve: lock store %s does not answer: %s %s",
                            name,
                            type(exc).__name__,
                            text,
                        )
                        said[name] = text
                    continue
                self._waiting.discard(name)
                log.info("prioritylock serve: lock store %s answers", name)
            if self._waiting:
                await asyncio.sleep(delay)
                delay = min(delay * 2, RECHECK_MAX)
        await on_healthy()
