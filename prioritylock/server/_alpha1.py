"""Dapr's alpha1 lock API (TryLock / Unlock) over ``AsyncLock``: one semantics, two front ends.

An alpha1 lock is a lease of ``expiryInSeconds`` that is never renewed: its locks are built with
a scheduler that never runs anything (:class:`_NoRenewals`), so the lease in the store simply
runs out. The lease's owner field is the caller's ``lockOwner``, and that name is the proof of
ownership on unlock, as in Dapr: the service may have restarted, or another replica may have
taken the lock, so the lock id the library makes cannot be asked for.

- A lock this process took is released through its own lock object (a plain release).
- Any other lease naming ``lockOwner`` is freed with a force unlock guarded by that owner and
  the fence read just before (so a newer holding is never freed by mistake).

Expiry is judged as the protocol judges it, on this process's monotonic clock: a lease this
process wrote ends ``expiryInSeconds`` after its write started, and it is then cleared (guarded
by owner and fence) before the next owner tries. A lease written by another process (or before
a restart) is taken over by the protocol's waiter rule: ``expiryInSeconds`` plus the drift
allowance after this process first saw it, which is why the lock objects that saw a lease are
kept (:data:`MAX_WAITERS` of them) between requests.

Each call is reported to :class:`~prioritylock.server._metrics.Metrics` (api ``alpha1``). Nothing
watches an alpha1 lease, so one that runs out is counted off when a request on it, or a scrape
of the metrics (:meth:`Alpha1Locks.count_expired`), finds its time is up.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping

import attrs

from prioritylock._alock import AsyncLock
from prioritylock._ascheduler import AsyncScheduler, AsyncTask, ScheduledAsyncTask
from prioritylock._builder import LockBuilder
from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._errors import ConditionFailed, ConfigError, NotLockOwner, PriorityLockError
from prioritylock.server._metrics import API_ALPHA1, Metrics
from prioritylock.server._names import BadRequest, Names, StoreNotFound
from prioritylock.stores._base import ObjectStore

__all__ = [
    "LOCK_BELONGS_TO_OTHERS",
    "LOCK_DOES_NOT_EXIST",
    "MAX_WAITERS",
    "SUCCESS",
    "Alpha1Locks",
    "BadRequest",
    "StoreNotFound",
    "check_fields",
]

log = logging.getLogger("prioritylock.server")

#: Unlock statuses, as Dapr numbers them.
SUCCESS = 0
LOCK_DOES_NOT_EXIST = 1
LOCK_BELONGS_TO_OTHERS = 2

#: Lock objects kept between requests only to remember when this process first saw a lease.
MAX_WAITERS = 4096

#: Dapr's expiryInSeconds is an int32.
MAX_EXPIRY = 2**31 - 1


class _NoRenewals(AsyncScheduler):
    """A scheduler that never runs what it is given: alpha1 leases are not renewed or watched."""

    def schedule(
        self,
        task: AsyncTask,
        when: float,
        name: str = "task",
        *,
        inline: bool = False,
        tolerance: float = 0.0,
    ) -> ScheduledAsyncTask:
        entry = ScheduledAsyncTask(task, when, name, inline, tolerance)
        entry.cancelled = True
        return entry

    def cancel(self, entry: ScheduledAsyncTask) -> None:
        entry.cancelled = True


@attrs.define
class _Held:
    lock: AsyncLock
    fence: int
    #: Its end was reported to the metrics already.
    counted_off: bool = False


class Alpha1Locks:
    """TryLock and Unlock on named stores, for one app id.

    A resource's key is ``v1/path/PREFIX/RESOURCE``: the prefix is the app id unless
    ``key_prefixes`` gives a store another one, or None for no prefix (Dapr's ``keyPrefix``).
    """

    def __init__(
        self,
        stores: Mapping[str, ObjectStore],
        app_id: str,
        *,
        key_prefixes: Mapping[str, str | None] | None = None,
        clock: Clock = SYSTEM_CLOCK,
        metrics: Metrics | None = None,
    ) -> None:
        self.names = Names(stores, app_id, key_prefixes=key_prefixes)
        self._app_id = app_id
        self._clock = clock
        self._scheduler = _NoRenewals(clock, manual=True)
        self._held: dict[tuple[str, str], _Held] = {}
        self._waiters: collections.OrderedDict[tuple[str, str, str, int], AsyncLock] = (
            collections.OrderedDict()
        )
        self._mutexes: dict[tuple[str, str], tuple[asyncio.Lock, int]] = {}
        self.metrics = metrics or Metrics()
        for name in self.names.store_names:
            self.metrics.prepare(name, API_ALPHA1)
        self.metrics.on_scrape(self.count_expired)

    @property
    def store_names(self) -> list[str]:
        return self.names.store_names

    async def try_lock(self, store_name: str, resource_id: str, owner: str, expiry: int) -> bool:
        """Take the lock for ``expiry`` seconds if it is free; False if anyone holds it, even
        ``owner`` itself (not reentrant).

        :raises StoreNotFound: no such store.
        :raises BadRequest: an empty or invalid field, or ``expiry`` not in 1..2**31-1.
        :raises StoreError: the store failed (so did CorruptLease: a document it can't trust).
        """
        started = self._clock.monotonic()
        try:
            got = await self._try_lock(store_name, resource_id, owner, expiry)
        except PriorityLockError:
            self.metrics.failed(store_name, API_ALPHA1, latency=self._clock.monotonic() - started)
            raise
        latency = self._clock.monotonic() - started
        if got:
            self.metrics.acquired(store_name, API_ALPHA1, latency=latency)
        else:
            self.metrics.refused(store_name, API_ALPHA1, latency=latency)
        return got

    async def _try_lock(self, store_name: str, resource_id: str, owner: str, expiry: int) -> bool:
        self._store(store_name)
        check_fields(store_name, resource_id, owner)
        if isinstance(expiry, bool) or not isinstance(expiry, int) or expiry <= 0:
            raise BadRequest(f"ExpiryInSeconds is not positive in lock store {store_name}")
        if expiry > MAX_EXPIRY:
            raise BadRequest(f"ExpiryInSeconds is too large in lock store {store_name}")
        key = self._key(store_name, resource_id)
        async with self._mutex(store_name, key):
            held = self._held.get((store_name, key))
            if held is not None and not held.lock.is_current_owner():
                await self._clear(store_name, key, held, "expired")
            # Even while this process holds the lock, the store decides: another replica may
            # have freed it (an unlock by its owner there) since.
            waiter = (store_name, key, owner, expiry)
            lock = self._waiters.pop(waiter, None)
            if lock is None:
                lock = self._build(store_name, resource_id, owner, expiry)
            if await lock.try_lock():
                previous = self._held.get((store_name, key))
                if previous is not None:  # its lease was freed by an unlock elsewhere
                    self._count_off(store_name, previous, "forced")
                self._held[(store_name, key)] = _Held(lock, lock.fencing_token)
                return True
            self._waiters[waiter] = lock
            while len(self._waiters) > MAX_WAITERS:
                self._waiters.popitem(last=False)
            return False

    async def unlock(self, store_name: str, resource_id: str, owner: str) -> int:
        """Release the lock that ``owner`` holds; return SUCCESS, LOCK_DOES_NOT_EXIST or
        LOCK_BELONGS_TO_OTHERS.

        :raises StoreNotFound: no such store.
        :raises BadRequest: an empty or invalid field.
        :raises StoreError: the store failed.
        """
        self._store(store_name)
        check_fields(store_name, resource_id, owner)
        key = self._key(store_name, resource_id)
        async with self._mutex(store_name, key):
            held = self._held.get((store_name, key))
            if held is not None:
                if not held.lock.is_current_owner():
                    await self._clear(store_name, key, held, "expired")
                    return LOCK_DOES_NOT_EXIST
                if held.lock.config.owner != owner:
                    return await self._unlock_in_store(store_name, resource_id, owner)
                try:
                    await held.lock.unlock()
                except NotLockOwner as exc:  # lost meanwhile (LockLost): judge by the store below
                    self._count_off(store_name, held, getattr(exc, "reason", "") or "other")
                else:
                    del self._held[(store_name, key)]
                    self._count_off(store_name, held, "released")
                    return SUCCESS
                self._held.pop((store_name, key), None)
            return await self._unlock_in_store(store_name, resource_id, owner)

    async def _unlock_in_store(self, store_name: str, resource_id: str, owner: str) -> int:
        """A lease this process does not hold: free it if it names ``owner``."""
        probe = self._build(store_name, resource_id, owner, 1)
        for _ in range(3):
            info = await probe.info()
            if info is None or not info.held:
                return LOCK_DOES_NOT_EXIST
            if info.owner != owner:
                return LOCK_BELONGS_TO_OTHERS
            try:
                await probe.force_unlock(
                    f"alpha1 unlock by its owner {owner}",
                    by=owner,
                    if_owner=owner,
                    if_fence=info.fence,
                )
            except ConditionFailed:
                continue  # changed between the read and the write: judge again
            return SUCCESS
        return LOCK_BELONGS_TO_OTHERS

    async def _clear(self, store_name: str, key: str, held: _Held, why: str) -> None:
        """Free a lease this process wrote and whose time ran out on its clock, unless the
        lease shows another holding by now."""
        del self._held[(store_name, key)]
        self._count_off(store_name, held, "expired")
        with contextlib.suppress(ConditionFailed):
            await held.lock.force_unlock(
                f"alpha1 lease {why}",
                by=held.lock.config.owner,
                if_owner=held.lock.config.owner,
                if_fence=held.fence,
            )

    def count_expired(self) -> None:
        """Count off the metrics the holdings whose time is up on this process's clock (no
        request: their leases are cleared by the next request on them)."""
        for (store_name, _), held in list(self._held.items()):
            if not held.counted_off and not held.lock.is_current_owner():
                self._count_off(store_name, held, "expired")

    def _count_off(self, store_name: str, held: _Held, how: str) -> None:
        """Report the end of a holding to the metrics, once: released, expired, or a loss
        reason."""
        if held.counted_off:
            return
        held.counted_off = True
        if how == "released":
            self.metrics.released(store_name, API_ALPHA1)
        elif how == "expired":
            self.metrics.expired(store_name, API_ALPHA1)
        else:
            self.metrics.lost(store_name, API_ALPHA1, how)

    def _store(self, store_name: str) -> ObjectStore:
        return self.names.store(store_name)

    def _key(self, store_name: str, resource_id: str) -> str:
        return self.names.key(store_name, resource_id)

    def _build(self, store_name: str, resource_id: str, owner: str, expiry: int) -> AsyncLock:
        try:
            return (
                LockBuilder()
                .store(self.names.store(store_name))
                .path(*self.names.path(store_name, resource_id))
                .owner(owner)
                .message(f"dapr alpha1 lock of app {self._app_id}")
                .lease_timeout(expiry)
                .cleanup_timeout(0)
                .clock(self._clock)
                .build_async(scheduler=self._scheduler)
            )
        except ConfigError as exc:
            raise BadRequest(str(exc)) from None

    @contextlib.asynccontextmanager
    async def _mutex(self, store_name: str, key: str) -> AsyncIterator[None]:
        """One operation at a time per lock in this process; the entry goes when unused."""
        name = (store_name, key)
        mutex, users = self._mutexes.get(name, (asyncio.Lock(), 0))
        self._mutexes[name] = (mutex, users + 1)
        try:
            async with mutex:
                yield
        finally:
            mutex, users = self._mutexes[name]
            if users == 1:
                del self._mutexes[name]
            else:
                self._mutexes[name] = (mutex, users - 1)


def check_fields(store_name: str, resource_id: str, owner: str) -> None:
    """Dapr's checks, in Dapr's words.

    :raises BadRequest: an empty resource id or owner.
    """
    if not resource_id:
        raise BadRequest(f"ResourceId is empty in lock store {store_name}")
    if not owner:
        raise BadRequest(f"LockOwner is empty in lock store {store_name}")
