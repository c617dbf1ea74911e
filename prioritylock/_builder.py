"""The builders: options in, a lock out.

:class:`LockBuilder` validates its options into a frozen ``LockConfig`` and builds a ``Lock`` (or
an ``AsyncLock``) on it; :class:`HudiTableBuilder` builds Hudi's own table lock
(``_hudi_lock``). Both take the options they share (``_Options``); each has only the setters it
uses. This module imports the Hudi lock modules, never the other way round.
"""

from __future__ import annotations

import hashlib
import math
import unicodedata
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from prioritylock._alock import AsyncLock
from prioritylock._ascheduler import AsyncScheduler
from prioritylock._clock import SYSTEM_CLOCK, Clock
from prioritylock._config import (
    DEFAULT_CLEANUP_TIMEOUT,
    DEFAULT_LEASE_TIMEOUT,
    DEFAULT_MAX_CLOCK_DRIFT,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_STORE_TIMEOUT,
    LockConfig,
    default_owner,
    default_watch_interval,
)
from prioritylock._errors import ConfigError
from prioritylock._hints import HINTS
from prioritylock._hudi_config import (
    DEFAULT_RENEW,
    DEFAULT_VALIDITY,
    HudiSettings,
    open_base_store,
    read_hudi,
    store_url,
)
from prioritylock._hudi_lock import KEY, AsyncHudiTableLock, HudiTableLock
from prioritylock._lease import MAX_MESSAGE_CHARS, MAX_OWNER_CHARS, MAX_PRIORITY, OVERRIDE_PRIORITY
from prioritylock._listener import LockListener
from prioritylock._lock import Lock
from prioritylock.stores._base import ObjectStore
from prioritylock.stores._url import open_store
from scopes import LockScope

if TYPE_CHECKING:
    from prioritylock._scheduler import Scheduler

__all__ = ["HudiTableBuilder", "LockBuilder", "LockConfig"]

B = TypeVar("B", bound="_Options")


class _Options:
    """The options both builders take (:class:`LockBuilder`, :class:`HudiTableBuilder`); every
    setter returns the builder it is called on."""

    def __init__(self) -> None:
        self._opts: dict[str, Any] = {}

    # -- who ---------------------------------------------------------------------------------

    def owner(self: B, owner: str) -> B:
        """The client's name, shown to others (default ``user@host:pid``)."""
        self._opts["owner"] = _text("owner", owner, MAX_OWNER_CHARS, empty=False)
        return self

    def priority(self: B, priority: int) -> B:
        """0..2147483646 (higher wins; 2147483647 is the emergency override's)."""
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ConfigError(f"priority: must be an integer, got {priority!r}", option="priority")
        if priority == OVERRIDE_PRIORITY:
            raise ConfigError(
                "priority: 2147483647 is reserved for the operators' emergency override; "
                "use LockBuilder.emergency_override(message=...)",
                option="priority",
            )
        if not 0 <= priority <= MAX_PRIORITY:
            raise ConfigError(
                f"priority: must be in 0..{MAX_PRIORITY}, got {priority}", option="priority"
            )
        self._opts["priority"] = priority
        return self

    def forceful(self: B, forceful: bool = True) -> B:
        """Take the lock when the wait runs out, cleanup finished or not."""
        if not isinstance(forceful, bool):
            raise ConfigError(
                f"forceful: must be True or False, got {forceful!r}", option="forceful"
            )
        self._opts["forceful"] = forceful
        return self

    # -- time --------------------------------------------------------------------------------

    def lease_timeout(self: B, seconds: float) -> B:
        """How long a lease lives without renewal (default 30 s)."""
        self._opts["lease_timeout"] = _seconds("lease_timeout", seconds, zero=False)
        return self

    def renew_interval(self: B, seconds: float) -> B:
        """How often the heartbeat renews (default a third of the lease timeout)."""
        self._opts["renew_interval"] = _seconds("renew_interval", seconds, zero=False)
        return self

    def max_clock_drift(self: B, seconds: float) -> B:
        """Slack added to a waiter's wait before it takes over an expired lease (default 0.5 s)."""
        self._opts["max_clock_drift"] = _seconds("max_clock_drift", seconds, zero=True)
        return self

    def poll_interval(self: B, seconds: float) -> B:
        """How long a blocked waiter sleeps between reads once backed off, on average (default
        1 s, about Hudi's 1 read per second; each pause is drawn from 0.5-1.5x it; each read is a
        request you pay for). A write to the lease wakes a waiter at once where a notice reaches
        it: the same process, or another process on the same local directory."""
        self._opts["poll_interval"] = _seconds("poll_interval", seconds, zero=False)
        return self

    def store_timeout(self: B, seconds: float) -> B:
        """How long one store call is retried on throttling or 5xx (default 10 s)."""
        self._opts["store_timeout"] = _seconds("store_timeout", seconds, zero=False)
        return self

    # -- plumbing ----------------------------------------------------------------------------

    def clock(self: B, clock: Clock) -> B:
        """The clock to read (tests pass a fake clock)."""
        if not isinstance(clock, Clock):
            raise ConfigError("clock: expected a Clock", option="clock")
        self._opts["clock"] = clock
        return self

    def scheduler(self: B, scheduler: Scheduler) -> B:
        """The threaded scheduler that renews and watches this ``Lock``'s lease (default: the
        process-wide one; tests step a manual one). An ``AsyncLock`` takes its scheduler in
        :meth:`build_async`."""
        self._opts["heartbeat"] = scheduler
        return self

    def heartbeat(self: B, heartbeat: Scheduler) -> B:
        """The former name of :meth:`scheduler`."""
        return self.scheduler(heartbeat)


class LockBuilder(_Options):
    """Builds a :class:`~prioritylock.Lock`; every setter returns the builder.

    ::

        lock = (LockBuilder().store("file:///var/lib/locks").path("jobs/nightly")
                .owner("worker-1").message("nightly compaction").lease_timeout(30).build())

    :raises ConfigError: from a setter given an invalid value, or from :meth:`build` when a
        store or a scope is missing or options contradict each other; the message names the option.
    """

    def __init__(self) -> None:
        super().__init__()
        self._watch_chosen = False  # watch_interval set by the caller, not derived

    # -- where -------------------------------------------------------------------------------

    def store(self, store: ObjectStore | str) -> LockBuilder:
        """The store (an object, or a URL for :func:`~prioritylock.stores.open_store`)."""
        if isinstance(store, str):
            store = open_store(store)
        elif not isinstance(store, ObjectStore):
            raise ConfigError(
                f"store: expected an ObjectStore or a URL, got {type(store).__name__}",
                option="store",
            )
        self._opts["store"] = store
        return self

    def path(self, path: str, *more: str) -> LockBuilder:
        """Name the lock by a plain path, e.g. ``"jobs/nightly"``."""
        try:
            self._opts["scope"] = LockScope.path(path, *more)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"path: {exc}", option="path") from exc
        return self

    def scope(self, scope: LockScope) -> LockBuilder:
        """Name the lock by a :class:`scopes.LockScope`."""
        if not isinstance(scope, LockScope):
            raise ConfigError(
                f"scope: expected a LockScope, got {type(scope).__name__}", option="scope"
            )
        self._opts["scope"] = scope
        return self

    # -- who ---------------------------------------------------------------------------------

    def message(self, message: str) -> LockBuilder:
        """Why this client holds the lock, shown to others."""
        self._opts["message"] = _text("message", message, MAX_MESSAGE_CHARS, empty=True)
        return self

    def listener(self, listener: LockListener) -> LockBuilder:
        if not isinstance(listener, LockListener):
            raise ConfigError(
                f"listener: expected a LockListener, got {type(listener).__name__}",
                option="listener",
            )
        self._opts["listener"] = listener
        return self

    # -- priority ----------------------------------------------------------------------------

    def keep_waiting(self, keep: bool = True) -> LockBuilder:
        """What a blocking ``lock()`` does when its non-forceful request runs out (the holder did
        not hand over within the wait): the request is withdrawn, then it waits on as any other
        contender until its own timeout (True, the default), or raises ``PreemptionTimeout``
        at once, as ``try_lock()`` does (False)."""
        if not isinstance(keep, bool):
            raise ConfigError(
                f"keep_waiting: must be True or False, got {keep!r}", option="keep_waiting"
            )
        self._opts["keep_waiting"] = keep
        return self

    def fair(self, fair: bool = True) -> LockBuilder:
        """Whether a blocking ``lock()`` joins the lock's line of waiters while it waits (True,
        the default): waiters of one priority then take the lock in the order they joined.
        False: this client does not join (no join writes; it waits by polling), but it still
        never takes the lock ahead of a live waiter at the head of the line."""
        if not isinstance(fair, bool):
            raise ConfigError(f"fair: must be True or False, got {fair!r}", option="fair")
        self._opts["fair"] = fair
        return self

    def emergency_override(
        self, message: str, *, if_fence: int | None = None, if_owner: str | None = None
    ) -> LockBuilder:
        """The operators' override: priority 2147483647, forceful, no wait; needs a message.

        :param if_fence: act only while the lease still shows this fence (what the operator saw).
        :param if_owner: act only while the lease is still held by this owner.

        With either guard, acquiring raises :class:`~prioritylock.ConditionFailed` (nothing
        written) when the lease shows something else; the check and the takeover are one
        compare-and-swap.
        """
        text = _text("message", message, MAX_MESSAGE_CHARS, empty=False)
        self._opts.update(
            priority=OVERRIDE_PRIORITY,
            forceful=True,
            waiting_timeout=0.0,
            message=text,
            if_fence=_guard_fence(if_fence),
            if_owner=None
            if if_owner is None
            else _text("if_owner", if_owner, MAX_OWNER_CHARS, empty=False),
        )
        return self

    # -- time --------------------------------------------------------------------------------

    def cleanup_timeout(self, seconds: float) -> LockBuilder:
        """How long this client, as holder, may take to clean up when preempted (0: no cleanup)."""
        self._opts["cleanup_timeout"] = _seconds("cleanup_timeout", seconds, zero=True)
        return self

    def waiting_timeout(self, seconds: float) -> LockBuilder:
        """How long this client, as requestor, waits for a holder's cleanup (0: take it now)."""
        self._opts["waiting_timeout"] = _seconds("waiting_timeout", seconds, zero=True)
        return self

    def watch_interval(self, seconds: float) -> LockBuilder:
        """How often a holder reads its lease to hear of requests (default: the renew interval,
        half the cleanup timeout, or two thirds of the cleanup timeout less the clock drift
        allowance, whichever is shortest: :func:`default_watch_interval`).

        On a store other hosts share (S3, GCS, Azure), :meth:`build` warns (``UserWarning``)
        when it is not shorter than the cleanup timeout less ``max_clock_drift``: a holder there
        could then hear of a request only once its cleanup window had closed, and so is never
        told of it. Not when this process's hints record an address other hosts reach
        (``PRIORITYLOCK_HINTS``, docs/hints.md): a request then tells the holder at once, and
        the watch read is only the fallback for a hint that can't pass."""
        self._opts["watch_interval"] = _seconds("watch_interval", seconds, zero=False)
        self._watch_chosen = True
        return self

    # -- from configuration files ------------------------------------------------------------

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> LockBuilder | HudiTableBuilder:
        """A builder from flat ``prioritylock.*`` keys, or from an Apache Hudi writer's keys.

        ``prioritylock.store`` (URL), ``prioritylock.path`` or ``prioritylock.scope`` (a scope
        key such as ``v1/resource/prod/orders-db``), ``prioritylock.owner``, ``.message``,
        ``.priority``, ``.forceful``, and the timings in seconds: ``.lease_timeout``,
        ``.cleanup_timeout``, ``.waiting_timeout``, ``.renew_interval``, ``.watch_interval``,
        ``.max_clock_drift``, ``.poll_interval``, ``.store_timeout``.

        Hudi's keys (a whole writer configuration can be passed; other ``hoodie.*`` keys are
        ignored): ``hoodie.base.path`` names the table;
        ``hoodie.write.lock.storage.validity.timeout.secs`` (default 300) is the lease timeout
        and ``hoodie.write.lock.storage.renew.interval.secs`` (default 30; Hudi's deprecated
        ``...heartbeat.poll.secs`` too) the renew interval, checked by Hudi's rules. When
        ``hoodie.write.lock.provider`` names Hudi's ``StorageBasedLockProvider``, the builder is
        a :class:`HudiTableBuilder` (as :meth:`HudiTableBuilder.from_properties` makes it, typed
        as such): its lock is Hudi's own ``.hoodie/.locks/table_lock.json``, shared with Java
        writers, and ``hoodie.write.lock.azure.*`` give its Azure credentials; of the
        ``prioritylock.*`` keys it takes those of its options.
        Without a provider, the lock is prioritylock's own lease, named
        ``hudi/<table>-<hash of the base path>`` in the table's ``.hoodie/.locks`` folder.
        RFC-91's draft ``hoodie.write.lock.conditional_write.*`` names still work, with a
        :class:`DeprecationWarning`; an unknown ``hoodie.write.lock.*`` key gets a warning.
        ``prioritylock.*`` keys win over Hudi's.

        :raises ConfigError: an unknown ``prioritylock.*`` key, a value of the wrong type, a
            Hudi configuration without ``hoodie.base.path``, breaking Hudi's limits, or naming
            another Hudi lock provider, or a key a Hudi table lock does not use; the message
            names the key.
        """
        settings = read_hudi(properties)
        if settings is not None and settings.storage_provider:
            return _apply(HudiTableBuilder(settings.base_path, settings=settings), properties)
        builder = cls()
        if settings is not None:
            builder._apply_hudi(settings)
        return _apply(builder, properties)

    @classmethod
    def hudi_table(cls, table: str | ObjectStore) -> HudiTableBuilder:
        """A builder for Apache Hudi's own lock of the table at ``table``, shared with Java
        writers that use Hudi's ``StorageBasedLockProvider``.

        :param table: the table's base path as Hudi has it (``s3a://bucket/path``,
            ``gs://...``, ``abfss://container@account.dfs.core.windows.net/path``, an absolute
            path), or a store rooted there.
        """
        return HudiTableBuilder(table)

    def _apply_hudi(self, settings: HudiSettings) -> None:
        base = settings.base_path
        self.lease_timeout(settings.validity)
        self.renew_interval(settings.renew_interval)
        location = settings.location or base + "/.hoodie/.locks"
        option = _HUDI_LOCATION if settings.location else _HUDI_BASE_PATH
        self.store(store_url(location, option))
        table = base.rsplit("/", 1)[-1] or "table"
        digest = hashlib.sha256(base.encode()).hexdigest()[:16]
        self.path("hudi", f"{table}-{digest}")
        # Hudi has no preemption to hear of: watch no more often than we renew (Hudi's own cost).
        self.watch_interval(settings.renew_interval)
        self._watch_chosen = False  # and no cleanup window to fit: nothing to warn of
        self.message(f"hudi table {base}")

    # -- plumbing ----------------------------------------------------------------------------

    def config(self) -> LockConfig:
        """The validated, frozen configuration.

        :raises ConfigError: a store or a scope is missing, or options contradict each other.
        """
        opts = dict(self._opts)
        for required, setters in (("store", ".store(...)"), ("scope", _SCOPE_SETTERS)):
            if required not in opts:
                raise ConfigError(
                    f"{required}: not set; call {setters} before build()", option=required
                )
        if "owner" not in opts:  # default_owner() asks the OS: only when needed
            opts["owner"] = default_owner()
        lease = opts.setdefault("lease_timeout", DEFAULT_LEASE_TIMEOUT)
        cleanup = opts.setdefault("cleanup_timeout", DEFAULT_CLEANUP_TIMEOUT)
        renew = opts.setdefault("renew_interval", lease / 3)
        if renew >= lease:
            raise ConfigError(
                f"renew_interval: {renew} s must be shorter than lease_timeout ({lease} s)",
                option="renew_interval",
            )
        drift = opts.get("max_clock_drift", DEFAULT_MAX_CLOCK_DRIFT)
        if "watch_interval" not in opts:
            opts["watch_interval"] = default_watch_interval(renew, cleanup, drift)
        if drift >= lease:
            raise ConfigError(
                f"max_clock_drift: {drift} s must be shorter than lease_timeout ({lease} s)",
                option="max_clock_drift",
            )
        if self._watch_chosen and _told_only_by_reads(opts["store"]):
            _warn_if_watch_misses_window(opts["watch_interval"], cleanup, drift, HINTS.enabled)
        return LockConfig(**opts)

    def build_async(self, *, scheduler: AsyncScheduler | None = None) -> AsyncLock:
        """A new :class:`~prioritylock.AsyncLock` (not yet acquired), for asyncio.

        :param scheduler: what renews and watches its lease (default: its event loop's own;
            tests pass a manual one with a fake clock).
        :raises ConfigError: see :meth:`config`.
        """
        return AsyncLock(self.config(), scheduler=scheduler)

    def build(self) -> Lock:
        """A new :class:`~prioritylock.Lock` (not yet acquired).

        :raises ConfigError: see :meth:`config`.
        """
        return Lock(self.config())


def _told_only_by_reads(store: ObjectStore) -> bool:
    """Whether a holder may hear of a request from another host only by its own watch reads.

    True on a store other hosts share, unless this process's hints record an address other
    hosts reach (``_hints``): a request made in this process (or, on a local directory, on
    this machine) also arrives as a notice, or with hints on loopback as a hint, one from
    another host only as what a read finds.
    """
    return store.capabilities.shared_across_hosts and not HINTS.reaches_other_hosts


def _warn_if_watch_misses_window(watch: float, cleanup: float, drift: float, hints: bool) -> None:
    """Warn (at the caller of build()) of a watch interval too long for the cleanup window;
    ``hints``: hints are on, but reach this machine only."""
    if cleanup <= drift or watch < cleanup - drift:
        # No window to be told in (no cleanup, or one no longer than the drift allowance: no
        # watch interval could fit it), or at least one watch read falls in it.
        return
    hint_state = "on a loopback address: they reach this machine only" if hints else "off"
    warnings.warn(
        f"watch_interval ({watch:g} s) is not shorter than cleanup_timeout ({cleanup:g} s) less"
        f" max_clock_drift ({drift:g} s): a holder on another host hears of a request only when"
        " its cleanup window may have closed, and is then never told (see 'Told in the window,"
        " or not at all' in docs/priorities.md); keep watch_interval well below"
        " cleanup_timeout - max_clock_drift, or let hints tell it at once: set"
        f" PRIORITYLOCK_HINTS to an address other hosts reach (hints here are {hint_state};"
        " see docs/hints.md)",
        UserWarning,
        stacklevel=4,
    )


#: What names the lock: a path is the usual way, a scope the Helix way.
_SCOPE_SETTERS = ".path('jobs/nightly') or .scope(a LockScope)"


class HudiTableBuilder(_Options):
    """Builds Apache Hudi's own table lock (:class:`~prioritylock.HudiTableLock`, or with
    :meth:`build_async` an :class:`~prioritylock.AsyncHudiTableLock`), shared with Java writers
    that use Hudi's ``StorageBasedLockProvider``. Make it with :meth:`LockBuilder.hudi_table` or
    :meth:`from_properties`.

    Its options: ``owner`` (shown in logs: Hudi's owner field is a random UUID),
    ``lease_timeout`` (Hudi's validity, default 300 s), ``renew_interval`` (default 30 s, or a
    tenth of the lease timeout when only that is set), ``max_clock_drift`` (default Hudi's
    0.5 s), ``poll_interval``, ``store_timeout``, ``clock`` and ``scheduler`` (what renews a
    ``HudiTableLock``: by default the process's). ``priority`` and ``forceful`` are accepted and
    change nothing: a Java holder can't be asked to yield, so every requestor waits for its
    lease to end.
    """

    def __init__(self, table: str | ObjectStore, *, settings: HudiSettings | None = None) -> None:
        super().__init__()
        self._table = table
        self._settings = settings
        if settings is not None:
            self.lease_timeout(settings.validity)
            self.renew_interval(settings.renew_interval)

    @classmethod
    def from_properties(cls, properties: Mapping[str, object]) -> HudiTableBuilder:
        """A builder from an Apache Hudi writer's keys that name Hudi's storage lock provider
        (see :meth:`LockBuilder.from_properties`, which gives this builder for them too).

        :raises ConfigError: as :meth:`LockBuilder.from_properties`, and when
            ``hoodie.write.lock.provider`` does not name Hudi's ``StorageBasedLockProvider``.
        """
        settings = read_hudi(properties)
        if settings is None or not settings.storage_provider:
            raise ConfigError(
                f"{_HUDI_PROVIDER}: a Hudi table lock needs Hudi's StorageBasedLockProvider named"
                " here (use LockBuilder.from_properties for prioritylock's own lease)",
                option=_HUDI_PROVIDER,
            )
        return _apply(cls(settings.base_path, settings=settings), properties)

    def _timings(self) -> tuple[float, float, float]:
        """The lease timeout, renew interval and drift allowance, checked by Hudi's rules."""
        opts = self._opts
        lease = opts.get("lease_timeout", DEFAULT_VALIDITY)
        renew = opts.get(
            "renew_interval", DEFAULT_RENEW if "lease_timeout" not in opts else lease / 10
        )
        drift = opts.get("max_clock_drift", DEFAULT_MAX_CLOCK_DRIFT)
        if drift >= lease:
            raise ConfigError(
                f"max_clock_drift: {drift} s must be shorter than lease_timeout ({lease} s)",
                option="max_clock_drift",
            )
        if renew * 2 > lease - drift:
            raise ConfigError(
                f"renew_interval: {renew} s leaves no second try before the lease ends"
                f" (lease_timeout {lease} s - max_clock_drift {drift} s); at most half of that",
                option="renew_interval",
            )
        return lease, renew, drift

    def _options(self) -> dict[str, Any]:
        """What both locks are built with (the table's store first)."""
        lease, renew, drift = self._timings()
        if isinstance(self._table, str):
            settings = self._settings or HudiSettings(
                base_path=self._table.strip().rstrip("/") or self._table,
                storage_provider=True,
                validity=lease,
                renew_interval=renew,
            )
            store = open_base_store(settings)
        else:
            store = self._table
        opts = self._opts
        return {
            "store": store,
            "lease_timeout": lease,
            "renew_interval": renew,
            "max_clock_drift": drift,
            "poll_interval": opts.get("poll_interval", DEFAULT_POLL_INTERVAL),
            "store_timeout": opts.get("store_timeout", DEFAULT_STORE_TIMEOUT),
            "name": opts.get("owner", ""),
            "clock": opts.get("clock", SYSTEM_CLOCK),
        }

    def build(self) -> HudiTableLock:
        """A new :class:`~prioritylock.HudiTableLock` (not yet acquired).

        :raises ConfigError: options contradict each other or the table path can't be a store.
        """
        options = self._options()
        return HudiTableLock(options.pop("store"), scheduler=self._opts.get("heartbeat"), **options)

    def build_async(self, *, scheduler: AsyncScheduler | None = None) -> AsyncHudiTableLock:
        """A new :class:`~prioritylock.AsyncHudiTableLock` (not yet acquired), for asyncio.

        :param scheduler: what renews it (default: its event loop's own).
        :raises ConfigError: see :meth:`build`.
        """
        options = self._options()
        return AsyncHudiTableLock(options.pop("store"), scheduler=scheduler, **options)


def _apply(builder: B, properties: Mapping[str, object]) -> B:
    """Set the ``prioritylock.*`` keys of ``properties`` on ``builder``.

    :raises ConfigError: an unknown key, one the builder does not use, or a value of the wrong
        type; the message names the key.
    """
    for key, value in properties.items():
        if not key.startswith(_PREFIX):
            continue
        option = key[len(_PREFIX) :]
        if option not in _PROPERTY_OPTIONS:
            known = ", ".join(sorted(_PREFIX + o for o in _PROPERTY_OPTIONS))
            raise ConfigError(f"{key}: unknown option (known: {known})", option=key)
        if isinstance(builder, HudiTableBuilder) and not hasattr(builder, option):
            raise ConfigError(
                f"{key}: not used by a Hudi table lock (it lives at the table's {KEY};"
                " force it free with prioritylock hudi force-unlock BASE_PATH)",
                option=key,
            )
        converted = _convert(key, value, _PROPERTY_OPTIONS[option])
        if option == "scope":
            assert isinstance(builder, LockBuilder)
            try:
                builder.scope(LockScope.from_key(str(converted)))
            except ValueError as exc:
                raise ConfigError(f"{key}: {exc}", option=key) from exc
        else:
            getattr(builder, option)(converted)
    return builder


_PREFIX = "prioritylock."
_HUDI_LOCATION = "hoodie.write.lock.conditional_write.locks_location"
_HUDI_BASE_PATH = "hoodie.base.path"
_HUDI_PROVIDER = "hoodie.write.lock.provider"
_PROPERTY_OPTIONS = {
    "store": "str",
    "path": "str",
    "scope": "str",
    "owner": "str",
    "message": "str",
    "priority": "int",
    "forceful": "bool",
    "keep_waiting": "bool",
    "fair": "bool",
    "lease_timeout": "float",
    "cleanup_timeout": "float",
    "waiting_timeout": "float",
    "renew_interval": "float",
    "watch_interval": "float",
    "max_clock_drift": "float",
    "poll_interval": "float",
    "store_timeout": "float",
}


def _convert(key: str, value: object, kind: str) -> Any:
    """A property value (often a string from a file) as the option's type."""
    if kind == "str":
        if not isinstance(value, str):
            raise ConfigError(f"{key}: must be a string, got {type(value).__name__}", option=key)
        return value
    if kind == "bool":
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in ("true", "yes", "1", "on"):
            return True
        if text in ("false", "no", "0", "off"):
            return False
        raise ConfigError(f"{key}: must be true or false, got {value!r}", option=key)
    if isinstance(value, bool):
        raise ConfigError(f"{key}: must be a number, got {value!r}", option=key)
    try:
        return int(str(value).strip()) if kind == "int" else float(str(value).strip())
    except ValueError as exc:
        raise ConfigError(f"{key}: must be a number, got {value!r}", option=key) from exc


def _guard_fence(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(
            f"if_fence: must be a non-negative integer, got {value!r}", option="if_fence"
        )
    return value


def _seconds(option: str, value: float, *, zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{option}: must be a number of seconds, got {value!r}", option=option)
    seconds = float(value)
    if math.isnan(seconds) or math.isinf(seconds):
        raise ConfigError(f"{option}: must be finite, got {value!r}", option=option)
    if seconds < 0 or (seconds == 0 and not zero):
        need = "zero or positive" if zero else "positive"
        raise ConfigError(f"{option}: must be {need}, got {value!r}", option=option)
    return seconds


def _text(option: str, value: str, limit: int, *, empty: bool) -> str:
    if not isinstance(value, str):
        raise ConfigError(f"{option}: must be a string, got {type(value).__name__}", option=option)
    if not empty and not value.strip():
        raise ConfigError(f"{option}: must not be empty", option=option)
    if len(value) > limit:
        raise ConfigError(f"{option}: longer than {limit} characters ({len(value)})", option=option)
    if any(unicodedata.category(ch) == "Cc" and ch not in "\t\n" for ch in value):
        raise ConfigError(f"{option}: contains control characters", option=option)
    return value
