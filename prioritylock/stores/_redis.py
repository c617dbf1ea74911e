"""RedisStore: lease documents as Redis string keys, changed by server-side scripts.

Layout, for a key ``K`` under prefix ``P`` in database ``D``:

- ``P + K`` holds the document itself, its bytes as they are (an operator can
  ``redis-cli GET`` the lease JSON);
- ``P + K + "//version"`` holds the version token: a number drawn for each write from one counter
  per database, ``prioritylock//versions``, so versions never repeat within a database, across
  keys, deletes and prefixes (a content hash would repeat for equal bytes; Redis keeps no
  version of its own). A name with an empty segment is never a valid store key, so
  :meth:`RedisStore.list` tells these two apart from documents.
- every write publishes ``TOKEN VERSION`` on the channel ``prioritylock:D:P+K`` (pub/sub
  channels are shared by every database of a server, hence ``D``): what
  :meth:`RedisStore.watch_key` hears. ``TOKEN`` names the writing process and namespace, so a
  process does not wake itself for its own writes (it tells its own locks in-process).

Each seam operation is one Lua script, called by its SHA1 with ``EVALSHA`` (the condition is
checked and the write made atomically on the server, with no ``WATCH`` round trips). A server
that does not have the script (restarted, failed over, ``SCRIPT FLUSH``) answers ``NOSCRIPT``
having run nothing, and the store sends it whole once with ``EVAL``, which also loads it: one
round trip more for each script after such an event (the two count as one request in
:attr:`RedisStore.stats`, which counts the operations a lock asks for), instead of a few hundred
bytes more on every request.

Requests go through redis-py's connection pool with no retries of its own (an ``AsyncLock``'s
reads, creates and replaces through redis-py's asyncio client instead, one per event loop, with
the same scripts and rules: :class:`_AsyncRedis`): a failure before the
request was sent (refused, or the connection could not be made) is
:class:`~prioritylock.StoreUnavailable`; one after it was sent is outcome-unknown for a write,
and the lock reads back to decide, as on every store. Errors are translated in one place,
:meth:`RedisStore._translate`, and always chained; server messages and credentials never go into
ours or into the log.

Redis acknowledges a write before it is on disk unless ``appendonly yes`` with ``appendfsync
always``: the store checks ``CONFIG GET`` once per server and logs a warning when a restart could
forget an acknowledged lease (docs/stores.md says what that risks).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import threading
import urllib.parse
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any, Final

from prioritylock.stores._registry import missing_extra

try:
    import redis
    import redis.asyncio
    import redis.asyncio.retry
    import redis.exceptions as redis_errors
    from redis.backoff import NoBackoff
    from redis.retry import Retry
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("Redis stores", "redis", _exc) from None

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.stores._base import (
    NOT_MODIFIED,
    ReadResult,
    StoreCapabilities,
    Versioned,
    validate_key,
)
from prioritylock.stores._cloud import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    TLS_FILES,
    WRITES,
    CloudStore,
    NativeIO,
    check_tls_files,
    check_url_options,
    untrusted_certificate,
    untrusted_error,
    url_timeouts,
    url_tls_files,
)
from prioritylock.stores._log import log

__all__ = ["DEFAULT_PORT", "MAX_OBJECT_BYTES", "RedisStore", "store_from_url"]

DEFAULT_PORT = 6379
MAX_OBJECT_BYTES = 8 * 1024 * 1024
"""The largest document the store writes (as on the cloud stores)."""

VERSION_SUFFIX: Final = "//version"
COUNTER_KEY: Final = "prioritylock//versions"
_SCAN_COUNT = 1000

# Every script gets KEYS = (document, version key, counter) and returns a list whose first item
# says what happened. TYPE first: a key of another type (a hash, a list) is not ours to overwrite.
_PRELUDE = """
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'string' then return {'foreign', kind} end
"""
_SCRIPTS: Final = {
    # ARGV: the version known ('' for none)
    "read": _PRELUDE
    + """
if kind == 'none' then return {'absent'} end
local version = redis.call('GET', KEYS[2]) or '0'
if version == ARGV[1] then return {'same', version} end
return {'found', version, redis.call('GET', KEYS[1])}
""",
    # ARGV: data, channel, message
    "create": _PRELUDE
    + """
if kind ~= 'none' then return {'exists'} end
local version = tostring(redis.call('INCR', KEYS[3]))
redis.call('SET', KEYS[2], version)
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' ' .. version)
return {'ok', version}
""",
    # ARGV: data, version, channel, message
    "replace": _PRELUDE
    + """
if kind == 'none' then return {'absent'} end
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[2] then return {'moved'} end
local version = tostring(redis.call('INCR', KEYS[3]))
redis.call('SET', KEYS[2], version)
redis.call('SET', KEYS[1], ARGV[1])
redis.call('PUBLISH', ARGV[3], ARGV[4] .. ' ' .. version)
return {'ok', version}
""",
    # ARGV: version, channel, message. The version key stays (a later create replaces it).
    "delete": _PRELUDE
    + """
if kind == 'none' then return {'absent'} end
if (redis.call('GET', KEYS[2]) or '0') ~= ARGV[1] then return {'moved'} end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], ARGV[3] .. ' deleted')
return {'ok'}
""",
}

#: Each script's SHA1, by which EVALSHA calls it.
_SHAS: Final = {
    op: hashlib.sha1(script.encode(), usedforsecurity=False).hexdigest()
    for op, script in _SCRIPTS.items()
}

#: A script's answer: what happened first, then its values.
_Answer = list[Any]

#: Servers already checked for durability (host, port), so each is warned of once per process.
_checked: set[tuple[str, int]] = set()
_checked_lock = threading.Lock()

#: One token per namespace per process: a notice carrying ours is a write this process made.
_tokens: dict[str, str] = {}


class RedisStore(CloudStore):
    """Documents under ``prefix`` in one Redis database; shared by every process and host that
    opens it.

    ``host``, ``port`` and ``db`` name the server and database; ``username`` and ``password``
    are sent with ``AUTH`` (none: no ``AUTH``); ``tls`` speaks TLS (``rediss://``), checking the
    server's certificate against ``ca_certs`` (a PEM file of CA certificates) or else the
    system's trust store (which ``SSL_CERT_FILE`` can name); ``client_cert`` and ``client_key``
    (PEM files) are shown to a server that asks for a client certificate. Every request counts
    in :attr:`stats`; ``CONFIG GET`` (the durability check, once per server) does not.

    :raises ConfigError: an invalid host, port, database, prefix or timeout, or TLS files
        without ``tls``.
    """

    _LABEL = "Redis"
    _SCHEME = "redis"
    _HOLDER = "server"
    _CAPABILITIES = StoreCapabilities(
        shared_across_processes=True,
        shared_across_hosts=True,
        conditional_delete=True,
        unique_versions=True,
    )
    _SDK_ERRORS = (redis_errors.RedisError, OSError)
    _MAX_BYTES = MAX_OBJECT_BYTES
    _ACCESS_HINT = (
        "check the user name and password (redis://USER:PASSWORD@HOST) and that the user's ACL"
        " allows EVALSHA and EVAL (and TYPE, GET, SET, INCR, DEL, PUBLISH in them), SCAN and"
        " SUBSCRIBE on the"
        " prefix's keys, prioritylock//versions and the prioritylock:* channels (docs/stores.md)"
    )

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        db: int = 0,
        prefix: str = "",
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
        ca_certs: str | None = None,
        client_cert: str | None = None,
        client_key: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
    ) -> None:
        if not isinstance(host, str) or not host or any(c in host for c in "/@?# "):
            raise ConfigError(f"Redis host must be a host name or address, got {host!r}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ConfigError(f"Redis port must be 1-65535, got {port!r}")
        if isinstance(db, bool) or not isinstance(db, int) or db < 0:
            raise ConfigError(f"Redis database must be a number from 0, got {db!r}")
        check_tls_files(self._LABEL, "rediss", tls, (ca_certs, client_cert, client_key))
        super().__init__(f"{host}:{port}/{db}", prefix, connect_timeout, read_timeout)
        self._host, self._port, self._db = host, port, db
        connect, read = self._timeouts
        self._options: dict[str, Any] = {
            "host": host,
            "port": port,
            "db": db,
            "username": username or None,
            "password": password or None,
            "socket_connect_timeout": connect,
            "socket_timeout": read,
            # No retries under us: a retried script whose first run landed would fail its
            # condition and read as "somebody else won"; the lock retries and reads back.
            "retry": Retry(NoBackoff(), 0),
            "health_check_interval": 0,
        }
        if tls:
            self._options.update(
                ssl=True, ssl_ca_certs=ca_certs, ssl_certfile=client_cert, ssl_keyfile=client_key
            )
        self._take_client(None, {}, lambda: redis.Redis(**self._options))
        self._token = _tokens.setdefault(self.namespace, secrets.token_hex(8))
        self._closed = False
        self._watcher: _Watcher | None = None
        self._watcher_lock = threading.Lock()
        # One asyncio client per running loop; each leaves when its loop shuts down.
        self._natives: dict[asyncio.AbstractEventLoop, _AsyncRedis] = {}

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share documents."""
        return f"redis:{self._holder}/{self._prefix}"

    def close(self) -> None:
        """Close the store's connections (and its watch, if any); safe to call twice.

        The asyncio connections of a running event loop are closed on that loop, soon; those of
        a loop that is not running are closed when it shuts down (``asyncio.run`` does).
        """
        self._closed = True
        with self._watcher_lock:
            watcher, self._watcher = self._watcher, None
            natives = list(self._natives.values())
            self._natives.clear()
        for native in natives:
            native.close_soon()
        if watcher is not None:
            watcher.stop()
        super().close()

    # -- change notices (stores._base.KeyWatcher) -----------------------------------------------

    def watch_key(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when ``key`` may have changed, written by another process or host
        through a store on this database; return a function that stops the calls.

        A hint, not a fact: it comes from a thread of the store's (one pub/sub connection per
        store object), may come late or twice, and is lost while the server is unreachable
        (after which every watcher is called once, since writes may have been missed). Writes
        by other tools (``redis-cli SET``) are not announced: the lock's polls see them.

        :raises ConfigError: invalid key.
        """
        channel = self._channel(self._object_name(key))
        with self._watcher_lock:
            if self._closed:
                return _nothing
            if self._watcher is None:
                self._watcher = _Watcher(self._options, self._token, repr(self))
            watcher = self._watcher
        return watcher.add(channel, callback)

    # -- one request per operation (CloudStore) -------------------------------------------------

    def _native_io(self) -> NativeIO | None:
        """The running event loop's asyncio client, made on first use (``None`` once closed)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        with self._watcher_lock:
            if self._closed:
                return None
            native = self._natives.get(loop)
            if native is None:
                native = self._natives[loop] = _AsyncRedis(self, loop)
            return native

    def _forget(self, native: _AsyncRedis) -> None:
        with self._watcher_lock:
            if self._natives.get(native.loop) is native:
                del self._natives[native.loop]

    def _fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        return self._read_answer_of(key, known, self._script("read", key, name, known or ""))

    def _read_answer_of(self, key: str, known: str | None, answer: _Answer) -> ReadResult:
        if answer[0] == b"absent":
            return None
        if answer[0] == b"same" and known is not None:
            return NOT_MODIFIED
        if answer[0] == b"found" and len(answer) == 3:
            return Versioned(bytes(answer[2]), answer[1].decode())
        raise self._unexpected("read", key)

    def _put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        return self._written(
            self._script(op, key, name, *self._put_argv(name, data, condition)), op, key
        )

    def _put_argv(self, name: str, data: bytes, condition: Any) -> tuple[Any, ...]:
        """A create's (``condition`` None) or replace's script arguments."""
        if condition is None:
            return (data, self._channel(name), self._token)
        return (data, condition, self._channel(name), self._token)

    def _remove(self, name: str, condition: Any) -> None:
        key = name[len(self._prefix) :]
        self._written(
            self._script("delete", key, name, condition, self._channel(name), self._token),
            "delete",
            key,
        )

    def _list_names(self, full_prefix: str) -> Iterator[str]:
        pattern = _glob_escape(full_prefix) + "*"
        skip = len(self._prefix)
        cursor: Any = b"0"
        seen: set[str] = set()
        while True:
            cursor, batch = self._send("SCAN", cursor, "MATCH", pattern, "COUNT", _SCAN_COUNT)
            for raw in batch:
                name = raw.decode("utf-8", "replace")
                if name not in seen and _is_key(name[skip:]):  # not a version key
                    seen.add(name)
                    yield name
            if cursor in (b"0", 0, "0"):
                return
            self._stats.count("lists")  # the next page is one more request

    def _read_condition(self, version: str) -> str | None:
        return version if isinstance(version, str) and version.isdigit() else None

    def _write_condition(self, key: str, version: str) -> str:
        if not (isinstance(version, str) and version.isascii() and version.isdigit()):
            raise ConditionFailed(key, f"version {version!r} is not a Redis store version")
        return version

    def _namespace_root(self) -> str:
        return ""

    # -- the scripts -------------------------------------------------------------------------------

    def _script(self, op: str, key: str, name: str, *argv: Any) -> _Answer:
        """Run ``op``'s script on object ``name``: one request (two when the server has not the
        script yet); a key of another type is refused, as it is not ours."""
        try:
            answer = self._send(*_eval(op, name, argv, by_sha=True))
        except redis_errors.NoScriptError:  # nothing ran: send it whole, which loads it
            answer = self._send(*_eval(op, name, argv, by_sha=False))
        return self._checked(op, key, answer)

    def _checked(self, op: str, key: str, answer: Any) -> _Answer:
        if not isinstance(answer, list) or not answer:
            raise self._unexpected(op, key)
        if answer[0] == b"foreign":
            kind = answer[1].decode(errors="replace") if len(answer) > 1 else "?"
            raise StoreError(
                f"{self._describe_call(op, key)}: the key holds a Redis {kind}, not a document"
                " of ours; it was left untouched (delete it, or use another prefix or database)"
            )
        return answer

    def _written(self, answer: _Answer, op: str, key: str) -> str:
        """The new version a write's answer gives, or its failed condition raised."""
        if answer[0] == b"exists":
            raise ConditionFailed(key, "already exists")
        if answer[0] == b"absent":
            raise ConditionFailed(key, "absent")
        if answer[0] == b"moved":
            raise ConditionFailed(key, "at another version")
        if answer[0] != b"ok":
            raise self._unexpected(op, key)
        return str(answer[1].decode()) if len(answer) > 1 else ""

    def _send(self, *command: Any) -> Any:
        """One command on a pooled connection, with no retries. A failure to connect is raised
        as :class:`_NotSent` (the request certainly did not reach the server)."""
        pool: Any = self._client.connection_pool
        try:
            connection: Any = pool.get_connection()
        except (redis_errors.RedisError, OSError) as exc:
            raise _NotSent(exc) from exc
        try:
            connection.send_command(*command)
            answer = connection.read_response()
        except redis_errors.ResponseError:
            raise
        except BaseException:
            connection.disconnect()  # an answer may still be on its way: never reuse it
            raise
        finally:
            pool.release(connection)
        if (self._host, self._port) not in _checked:
            self._check_durability()
        return answer

    def _check_durability(self) -> None:
        """Once per server and process: warn if an acknowledged write can be lost in a restart."""
        where = (self._host, self._port)
        with _checked_lock:
            if where in _checked:
                return
            _checked.add(where)
        try:
            config = {
                _text(name): _text(value)
                for pattern in ("appendonly", "appendfsync")
                for name, value in self._client.config_get(pattern).items()
            }
        except (redis_errors.RedisError, OSError) as exc:
            log.debug(
                "%r: CONFIG GET not answered (%s): durability not checked", self, type(exc).__name__
            )
            with _checked_lock:
                if not isinstance(exc, redis_errors.ResponseError):
                    _checked.discard(where)  # not reached: try again on the next request
            return
        appendonly, appendfsync = config.get("appendonly", "?"), config.get("appendfsync", "?")
        if appendonly != "yes" or appendfsync != "always":
            log.warning(
                "Redis at %s can lose writes it acknowledged (appendonly %s, appendfsync %s): a"
                " restart may forget a lease and let a second client take the lock with a lower"
                " fence; set appendonly yes and appendfsync always (see docs/stores.md)",
                self._holder,
                appendonly,
                appendfsync,
            )

    def _channel(self, name: str) -> str:
        return f"prioritylock:{self._db}:{name}"

    def _unexpected(self, op: str, key: str) -> StoreError:
        return StoreError(f"{self._describe_call(op, key)}: the server's answer was not understood")

    def _translate(self, exc: Exception, op: str, key: str) -> PriorityLockError:
        """The one place where redis-py's errors become ours (server messages are not copied)."""
        what = self._describe_call(op, key)
        write = op in WRITES
        sent = not isinstance(exc, _NotSent)
        cause: BaseException = exc.cause if isinstance(exc, _NotSent) else exc
        name = type(cause).__name__
        if isinstance(cause, (redis_errors.AuthenticationError, redis_errors.NoPermissionError)):
            return StoreAccessError(f"{what} refused ({name}): {self._ACCESS_HINT}")
        if isinstance(cause, redis_errors.ResponseError):
            text = str(cause)
            code = text.split(" ", 1)[0]
            code = code if code.isupper() else "error reply"
            if code in ("NOAUTH", "WRONGPASS", "NOPERM") or "can't run this command" in text:
                return StoreAccessError(f"{what} refused ({code}): {self._ACCESS_HINT}")
            if isinstance(cause, (redis_errors.BusyLoadingError, redis_errors.TryAgainError)) or (
                code in ("LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN")
            ):
                return StoreUnavailable(f"{what}: the server is not ready ({code}); retry")
            if isinstance(cause, redis_errors.ReadOnlyError):
                return StoreUnavailable(f"{what}: the server is a read-only replica; retry")
            if isinstance(cause, redis_errors.OutOfMemoryError):
                return StoreError(f"{what}: the server is out of memory ({code})")
            if "WRONGTYPE" in text or "not an integer" in text:
                return StoreError(
                    f"{what}: the key or its version key ({VERSION_SUFFIX}) holds something that"
                    " is not ours; it was left untouched"
                )
            return StoreError(f"{what} failed ({name}, {code})")
        if untrusted_certificate(cause):
            return untrusted_error(what)
        if isinstance(cause, (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError)):
            if not sent:
                return self._not_sent(op, key, cause)
            return StoreUnavailable(
                f"{what}: the response was lost ({name})", outcome_unknown=write
            )
        return StoreError(f"{what} failed ({name})")


def _eval(op: str, name: str, argv: tuple[Any, ...], *, by_sha: bool) -> tuple[Any, ...]:
    """The command running ``op``'s script on object ``name``: ``EVALSHA`` by its SHA1, or
    ``EVAL`` with the script itself."""
    keys = (name, name + VERSION_SUFFIX, COUNTER_KEY)
    if by_sha:
        return ("EVALSHA", _SHAS[op], len(keys), *keys, *argv)
    return ("EVAL", _SCRIPTS[op], len(keys), *keys, *argv)


class _AsyncRedis:
    """A store's native async client on one event loop (``stores._cloud.NativeIO``): redis-py's
    asyncio connections, which belong to the loop that made them. The store's scripts, answers
    and error translation, one request each, no retries, as :meth:`RedisStore._send`.

    Closed when its loop shuts down: a suspended async generator registered with the loop
    (``shutdown_asyncgens``, which ``asyncio.run`` calls before closing the loop) closes the
    connections on the loop; or sooner by :meth:`close_soon` (the store's ``close``)."""

    errors: tuple[type[Exception], ...] = (redis_errors.RedisError, OSError)

    @staticmethod
    def cleaned(exc: Exception) -> Exception:
        return exc  # as the sync path chains: redis-py's messages carry no credentials

    def __init__(self, store: RedisStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store, self.loop = store, loop
        options = {**store._options, "retry": redis.asyncio.retry.Retry(NoBackoff(), 0)}
        self._client: Any = redis.asyncio.Redis(**options)
        self._keeper = self._keep()
        # Run to its yield: registered with the loop, closed (its finally run) at shutdown.
        with contextlib.suppress(StopIteration):
            self._keeper.asend(None).send(None)

    async def _keep(self) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            self._store._forget(self)
            await self._client.aclose()

    def close_soon(self) -> None:
        """Close the connections on their loop: now if it runs, else at its shutdown."""
        if self.loop.is_closed():
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        # The keeper stays registered: should this be cancelled (asyncio.run cancels the tasks
        # left when its main ends), the loop's shutdown still closes the connections.
        if running is self.loop:
            self._closing = self.loop.create_task(self._client.aclose())
        elif self.loop.is_running():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                asyncio.run_coroutine_threadsafe(self._client.aclose(), self.loop)

    async def fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        answer = await self._script("read", key, name, (known or "",))
        return self._store._read_answer_of(key, known, answer)

    async def put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        argv = self._store._put_argv(name, data, condition)
        return self._store._written(await self._script(op, key, name, argv), op, key)

    async def _script(self, op: str, key: str, name: str, argv: tuple[Any, ...]) -> _Answer:
        """:meth:`RedisStore._script` on the loop's pool."""
        try:
            answer = await self._send(*_eval(op, name, argv, by_sha=True))
        except redis_errors.NoScriptError:
            answer = await self._send(*_eval(op, name, argv, by_sha=False))
        return self._store._checked(op, key, answer)

    async def _send(self, *command: Any) -> Any:
        """:meth:`RedisStore._send` on the loop's pool."""
        pool: Any = self._client.connection_pool
        try:
            connection: Any = await pool.get_connection()
        except (redis_errors.RedisError, OSError) as exc:
            raise _NotSent(exc) from exc
        try:
            await connection.send_command(*command)
            answer = await connection.read_response()
        except redis_errors.ResponseError:
            raise
        except BaseException:
            await connection.disconnect(nowait=True)  # an answer may still be on its way
            raise
        finally:
            await pool.release(connection)
        if (self._store._host, self._store._port) not in _checked:
            # Once per server: the sync client's CONFIG GET, off the loop.
            await asyncio.get_running_loop().run_in_executor(None, self._store._check_durability)
        return answer


class _NotSent(redis_errors.RedisError):
    """A connection could not be made: the request was never sent."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(type(cause).__name__)
        self.cause = cause


def _nothing() -> None:
    pass


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _is_key(name: str) -> bool:
    """Whether a name under the prefix is a document's (not a version key, nor foreign)."""
    try:
        validate_key(name)
    except ConfigError:
        return False
    return True


def _glob_escape(text: str) -> str:
    """``text`` as a literal in a ``SCAN MATCH`` pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)


class _Watcher:
    """One pub/sub connection of a store, on a daemon thread: calls each channel's callbacks
    when a write from elsewhere is announced there."""

    _POLL = 0.05  # seconds between looks at the stop flag while idle
    _MAX_BACKOFF = 2.0

    def __init__(self, options: dict[str, Any], token: str, label: str) -> None:
        client: Any = redis.Redis(**{**options, "socket_timeout": None})
        self._client = client
        self._pubsub: Any = client.pubsub(ignore_subscribe_messages=True)
        self._token = token.encode()
        self._label = label
        self._lock = threading.Lock()
        self._callbacks: dict[bytes, list[Callable[[], None]]] = {}
        self._subscribed: set[bytes] = set()
        self._stopped = threading.Event()
        self._changed = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="prioritylock-redis-watch", daemon=True
        )
        self._thread.start()

    def add(self, channel: str, callback: Callable[[], None]) -> Callable[[], None]:
        name = channel.encode()
        with self._lock:
            self._callbacks.setdefault(name, []).append(callback)
        self._changed.set()
        self._sync_subscriptions()
        done = threading.Lock()

        def remove() -> None:
            if not done.acquire(blocking=False):
                return
            with self._lock:
                listed = self._callbacks.get(name, [])
                if callback in listed:
                    listed.remove(callback)
                if not listed:
                    self._callbacks.pop(name, None)
            self._changed.set()

        return remove

    def stop(self) -> None:
        self._stopped.set()
        self._changed.set()  # ends an idle wait
        self._thread.join(timeout=5.0)
        try:
            self._pubsub.close()
        finally:
            self._client.close()

    def _sync_subscriptions(self) -> None:
        """Subscribe to the channels wanted and not yet subscribed (from any thread: a
        SUBSCRIBE sent now is in force before any later write reaches the server)."""
        with self._lock:
            wanted = set(self._callbacks)
            new, gone = wanted - self._subscribed, self._subscribed - wanted
            try:
                if new:
                    self._pubsub.subscribe(*sorted(new))
                if gone:
                    self._pubsub.unsubscribe(*sorted(gone))
            except (redis_errors.RedisError, OSError):
                return  # the reader thread reconnects
            self._subscribed = wanted

    def _run(self) -> None:
        backoff, broken = 0.05, False
        while not self._stopped.is_set():
            if broken:
                if self._reconnect(backoff):
                    backoff, broken = 0.05, False
                else:
                    backoff = min(backoff * 2, self._MAX_BACKOFF)
                continue
            if self._changed.is_set():
                self._changed.clear()
                self._sync_subscriptions()
            try:
                with self._lock:
                    subscribed = bool(self._subscribed)
                if not subscribed:
                    # Woken by the first subscription (or stop): a write announced right after
                    # it must not wait out this pause (a waiter that had just subscribed heard
                    # a release 50 ms late).
                    self._changed.wait(self._POLL)
                    continue
                message = self._pubsub.get_message(timeout=self._POLL)
            except (redis_errors.RedisError, OSError, ValueError) as exc:
                log.debug("%s: watch connection lost (%s)", self._label, type(exc).__name__)
                broken = True
                continue
            if message is not None and message.get("type") == "message":
                self._deliver(message.get("channel"), message.get("data"))

    def _reconnect(self, backoff: float) -> bool:
        """Open a new connection and subscribe again; then call every callback once, since
        writes may have gone unannounced meanwhile. True if it worked."""
        if self._stopped.wait(backoff):
            return False
        with self._lock:
            self._subscribed = set()
            try:
                self._pubsub.reset()
                self._pubsub = self._client.pubsub(ignore_subscribe_messages=True)
                if self._callbacks:
                    self._pubsub.subscribe(*sorted(self._callbacks))
            except (redis_errors.RedisError, OSError):
                return False
            self._subscribed = set(self._callbacks)
            everyone = [cb for listed in self._callbacks.values() for cb in listed]
        for callback in everyone:
            self._call(callback)
        return True

    def _deliver(self, channel: object, data: object) -> None:
        if isinstance(data, bytes) and data.split(b" ", 1)[0] == self._token:
            return  # this process wrote it, and told its own locks already
        with self._lock:
            listed = list(self._callbacks.get(channel, ())) if isinstance(channel, bytes) else []
        for callback in listed:
            self._call(callback)

    def _call(self, callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:  # a hint's receiver must not end the watch
            log.exception("%s: a change callback raised", self._label)


_URL_OPTIONS = (*TLS_FILES, "connect_timeout", "prefix", "read_timeout")


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> RedisStore:
    """The store for ``redis://[USER:PASSWORD@]HOST[:PORT][/DB][?prefix=PREFIX]`` (``rediss://``
    for TLS).

    The path is the database number, as in every Redis URL; the key prefix is the ``prefix``
    option. Other options: ``connect_timeout`` and ``read_timeout`` (seconds); for
    ``rediss://``, ``ca_certs`` (a PEM file of the CAs to trust instead of the system's) and
    ``client_cert`` / ``client_key`` (PEM files, for a server that asks for a client
    certificate). The user name and password may be percent-encoded; a password alone is
    ``redis://:PASSWORD@HOST``; none means no ``AUTH``.

    :raises ConfigError: no host, a port or database that is not a number, an unknown or empty
        option (named), or an invalid value.
    """
    scheme = check_url_options(parts, options, _URL_OPTIONS, may_be_empty=("prefix",))
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        raise ConfigError(f"{scheme}:// store URL has a port that is not a number") from None
    if not host:
        raise ConfigError(f"{scheme}:// store URL needs a host: {scheme}://HOST:PORT/DB")
    path = parts.path.strip("/")
    if path and not (path.isascii() and path.isdigit()):
        raise ConfigError(
            f"{scheme}:// store URL path is the database number, got {path!r}; the key prefix"
            " is the option ?prefix=PREFIX"
        )
    username = urllib.parse.unquote(parts.username) if parts.username else None
    password = urllib.parse.unquote(parts.password) if parts.password else None
    return RedisStore(
        host,
        port or DEFAULT_PORT,
        db=int(path) if path else 0,
        prefix=options.get("prefix", ""),
        username=username,
        password=password,
        tls=scheme == "rediss",
        **url_tls_files(options),
        **url_timeouts(scheme, options),
    )
