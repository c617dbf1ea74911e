"""ZooKeeperStore: lease documents as znodes, changed by ZooKeeper's version-conditional writes.

Layout: the store's prefix is a znode path (``zk://HOSTS/prioritylock/locks``:
``/prioritylock/locks``) and each document is one child of it, named by its key percent-encoded
(``team/resource`` is ``/prioritylock/locks/team%2Fresource``), its data the document's bytes as
they are (an operator can ``zkCli get`` the lease JSON). A flat layout: a key and a key under it
(``a`` and ``a/b``) are two siblings, never a node and the parent ZooKeeper would need for the
other, and ``list`` is one ``getChildren``.

The version token is ``CZXID.VERSION``: the transaction that created the znode, then its data
version. Create is ZooKeeper's create (it fails if the node exists); replace and delete are
``setData`` and ``delete`` at the data version. ZooKeeper restarts a node's data version at 0 when
the node is created again, and its writes can only be conditioned on that version, so a token of
an earlier incarnation of the same key could match a later one: the store declares
``unique_versions=False``. Reads compare the whole token, so a node created again never reads as
unchanged; and the lock never deletes a lease document (release marks it free).

Requests are kazoo's asynchronous calls, each waited for at most the read timeout: a call ends by
its timeout whatever the server does. A request is sent only while the session is connected (else
:class:`~prioritylock.StoreUnavailable` at once, nothing sent, rather than queued by kazoo for a
later reconnect); a connection lost after sending is outcome-unknown for a write, and the lock
reads back to decide, as on every store. Errors are translated in one place,
:meth:`ZooKeeperStore._translate`, and always chained; credentials never go into ours or into the
log. The server's sessions and ephemeral nodes play no part in who holds a lock (docs/stores.md).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from prioritylock.stores._registry import missing_extra

try:
    from kazoo import exceptions as zk_errors
    from kazoo.client import KazooClient
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.protocol.states import KazooState
    from kazoo.retry import KazooRetry
    from kazoo.security import make_digest_acl
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("ZooKeeper stores", "zookeeper", _exc) from None

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock.stores._base import (
    ReadResult,
    StoreCapabilities,
    Versioned,
    own_writes,
    validate_key,
)
from prioritylock.stores._cloud import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    TLS_FILES,
    WRITES,
    CloudStore,
    check_tls_files,
    check_url_options,
    url_credentials,
    url_seconds,
    url_timeouts,
    url_tls_files,
)
from prioritylock.stores._log import log

__all__ = ["DEFAULT_PORT", "MAX_OBJECT_BYTES", "ZooKeeperStore", "store_from_url"]

DEFAULT_PORT = 2181
SESSION_TIMEOUT = 10.0
"""The session timeout the store asks for, in seconds (``session_timeout``)."""
MAX_OBJECT_BYTES = 1_000_000
"""The largest document the store writes: ZooKeeper refuses a znode over ``jute.maxbuffer``
(1 MiB by default) with its request."""


class _NoCredentials(logging.Filter):
    """Drops kazoo's lines that show a request carrying credentials (at DEBUG it logs every
    request it sends, ``Auth(scheme='digest', auth='USER:PASSWORD')`` among them), and keeps
    the others as text: a record holding kazoo's exception (``Connection dropped: %s``) would
    keep its traceback, and the socket of a refused TLS handshake in it, alive for as long as a
    handler keeps the record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a line we can't read is a line we can't vouch for
            return False
        if "Auth(" in message or "auth_data" in message or "sasl" in message:
            return False
        record.msg, record.args = message, None
        return True


#: kazoo's own log lines (connections, and at DEBUG each request) go here, under the stores'
#: logger, without credentials.
_KAZOO_LOG = logging.getLogger("prioritylock.stores.zookeeper")
_KAZOO_LOG.addFilter(_NoCredentials())


class ZooKeeperStore(CloudStore):
    """Documents under the znode ``prefix`` of one ZooKeeper ensemble; shared by every process and
    host that opens it.

    ``hosts`` is kazoo's ``HOST:PORT[,HOST:PORT...]``. With ``username`` and ``password``, the
    session authenticates with ZooKeeper's ``digest`` scheme and the nodes it creates are
    readable and writable by that user alone; without them, they get ZooKeeper's open ACL.
    ``tls`` speaks TLS to the servers' ``secureClientPort`` (``zks://``), checking each server's
    certificate and host name against ``ca_certs`` (a PEM file of CA certificates) or else the
    system's trust store (which ``SSL_CERT_FILE`` can name); ``client_cert`` and ``client_key``
    (PEM files; the key may be in the certificate's file) are shown to a server that asks for a
    client certificate (``ssl.clientAuth``).
    ``client``: a kazoo client of the caller's, not started, for ``hosts`` (the store starts and
    stops it; its credentials and retries are the caller's). Every request counts in
    :attr:`stats`; a watch's re-arming (``exists``) does not.

    :raises ConfigError: invalid hosts, prefix, credentials or timeouts, or TLS files without
        ``tls``.
    """

    _LABEL = "ZooKeeper"
    _SCHEME = "zk"
    _HOLDER = "hosts"
    _OBJECT = "znode"
    _MAX_BYTES = MAX_OBJECT_BYTES
    _CAPABILITIES = StoreCapabilities(
        shared_across_processes=True,
        shared_across_hosts=True,
        conditional_delete=True,
        # A node created again restarts its data version at 0 (see the module's notes).
        unique_versions=False,
    )
    _ACCESS_HINT = (
        "check the user name and password (zk://USER:PASSWORD@HOSTS/PREFIX, ZooKeeper's digest"
        " scheme) and that the prefix's znode lets that user create, read, write and delete"
        " (docs/stores.md)"
    )

    def __init__(
        self,
        hosts: str = f"127.0.0.1:{DEFAULT_PORT}",
        *,
        prefix: str = "prioritylock",
        username: str | None = None,
        password: str | None = None,
        tls: bool = False,
        ca_certs: str | None = None,
        client_cert: str | None = None,
        client_key: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        session_timeout: float = SESSION_TIMEOUT,
        client: Any = None,
    ) -> None:
        self._hosts = _check_hosts(hosts)
        self._base = _base_path(prefix)
        super().__init__(self._hosts, self._base, connect_timeout, read_timeout)
        if (username is None) != (password is None) or (username is not None and ":" in username):
            raise ConfigError("ZooKeeper needs both a user name (without ':') and a password")
        check_tls_files(self._LABEL, "zks", tls, (ca_certs, client_cert, client_key))
        self._tls = tls
        self._closed = False
        self._start_lock = threading.Lock()
        self._connected = threading.Event()
        options: dict[str, Any] = {}
        if username is not None and password is not None:
            options["auth_data"] = [("digest", f"{username}:{password}")]
            options["default_acl"] = [make_digest_acl(username, password, all=True)]
        if tls:
            options.update(
                use_ssl=True,
                verify_certs=True,
                check_hostname=True,  # kazoo's default is not to
                ca=ca_certs,
                certfile=client_cert,
                keyfile=client_key or client_cert,
            )
        self._take_client(client, {}, lambda: self._kazoo(session_timeout, options))
        self._zk: Any = self._client
        self._zk.add_listener(self._on_state)
        self._watcher: _Watcher | None = None
        # Connect in the background now: the first request finds the session (its creation is
        # a write on the ensemble) made, or waits for it at most the connect timeout.
        self._zk.start_async()

    def _kazoo(self, session_timeout: float, options: dict[str, Any]) -> Any:
        return KazooClient(
            hosts=self._hosts,
            timeout=session_timeout,
            # Reconnect for ever in the background (a restarted server is found again); no
            # retries of requests (a retried write that had landed would fail its condition).
            connection_retry=KazooRetry(max_tries=-1, delay=0.05, max_delay=1.0),
            logger=_KAZOO_LOG,
            **options,
        )

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share documents."""
        return f"zk:{self._hosts}{self._base}/"

    @property
    def prefix(self) -> str:
        """The znode under which documents live (``/prioritylock``)."""
        return self._base

    @property
    def hosts(self) -> str:
        return self._hosts

    def _repr_fields(self) -> list[str]:
        return [repr(self._hosts), f"prefix={self._base!r}"]

    def close(self) -> None:
        """Close the session (and the store's watch, if any); safe to call twice."""
        with self._start_lock:
            self._closed = True
            watcher, self._watcher = self._watcher, None
        if watcher is not None:
            watcher.stop()
        try:
            self._zk.stop()
        finally:
            self._zk.close()

    # -- change notices (stores._base.KeyWatcher) -----------------------------------------------

    def watch_key(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when ``key`` may have changed, written by another process or host;
        return a function that stops the calls.

        A hint, not a fact: ZooKeeper's one-shot watch on the node, armed again (one ``exists``)
        each time it fires, so changes between a fire and the re-arm come as one call; a change
        whose version this process wrote calls nothing (its locks were told in-process). After
        the session was disconnected, every watcher is called once. Calls come from kazoo's
        event thread.

        :raises ConfigError: invalid key.
        """
        path = self._object_name(key)
        with self._start_lock:
            if self._closed:
                return _nothing
            if self._watcher is None:
                self._watcher = _Watcher(self)
            watcher = self._watcher
        return watcher.add(path, callback)

    # -- one request per operation (CloudStore) -------------------------------------------------

    def _object_name(self, key: str) -> str:
        """The key's znode: a child of the prefix's, named by the key percent-encoded."""
        validate_key(key)
        name = urllib.parse.quote(key, safe="")
        if len(self._base) + 1 + len(name) > 4 * 1024:
            raise ConfigError(f"ZooKeeper key {key[:60]!r}... is too long with the prefix")
        return f"{self._base}/{name}"

    def _fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        try:
            data, stat = self._request("read", key, lambda: self._zk.get_async(name))
        except zk_errors.NoNodeError:
            return None
        if stat.ephemeralOwner or stat.numChildren:
            what = "an ephemeral node" if stat.ephemeralOwner else "a node with children"
            raise StoreError(
                f"{self._describe_call('read', key)}: the znode is {what}, not a document of"
                " ours; it was left untouched (remove it, or use another prefix)"
            )
        return Versioned(bytes(data), _token(stat))

    def _put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        node = self._hosts + name
        if condition is None:
            version: str | None = None
            own_writes.begin(node)
            try:
                version = self._create(key, name, data)
            finally:
                own_writes.end(node, version)
            return version
        czxid, number = condition
        expected, landed = f"{czxid}.{number + 1}", None
        own_writes.begin(node, expected)
        try:
            stat = self._written(op, key, lambda: self._zk.set_async(name, data, number))
            landed = _token(stat)
        finally:
            own_writes.end(node, landed, withdrawn=expected)
        if stat.czxid != czxid:
            # The version matched a later incarnation of the node (created again after a
            # delete): the write landed. Say so; the lock never deletes its documents.
            log.warning("%r replace of %r: the node was deleted and created again", self, key)
        return landed

    def _remove(self, name: str, condition: Any) -> None:
        key = urllib.parse.unquote(name.rpartition("/")[2])
        _czxid, number = condition
        own_writes.begin(self._hosts + name)
        try:
            self._written("delete", key, lambda: self._zk.delete_async(name, number))
        finally:
            own_writes.end(self._hosts + name)

    def _list_names(self, full_prefix: str) -> Iterator[str]:
        start = full_prefix[len(self._prefix) :]
        try:
            names = self._request("list", start, lambda: self._zk.get_children_async(self._base))
        except zk_errors.NoNodeError:
            return
        for child in names:
            key = _key_of(child)
            if key is not None and key.startswith(start):
                yield self._prefix + key

    def _read_condition(self, version: str) -> str | None:
        return version if _parse(version)[1] is not None else None

    def _write_condition(self, key: str, version: str) -> tuple[int, int]:
        czxid, number = _parse(version)
        if czxid is None or number is None:
            raise ConditionFailed(key, "at another version")
        return czxid, number

    def _namespace_root(self) -> str:
        return ""

    # -- requests ----------------------------------------------------------------------------------

    def _request(self, op: str, key: str, send: Callable[[], Any]) -> Any:
        """One request, sent only on a connected session and waited for at most the read
        timeout; kazoo's errors as it raised them.

        :raises StoreUnavailable: the session was not connected within the connect timeout
            (nothing was sent).
        """
        with self._start_lock:
            if self._closed:
                raise StoreError(f"{self._describe_call(op, key)}: the store is closed")
        if not self._connected.wait(self._timeouts[0]):
            why = "no ZooKeeper server answered"
            if self._tls:  # kazoo retries a refused certificate as it does a refused connection
                why += " (or none had a certificate trusted by ca_certs or SSL_CERT_FILE)"
            raise StoreUnavailable(f"{self._describe_call(op, key)}: {why}")
        return send().get(timeout=self._timeouts[1])

    def _written(self, op: str, key: str, send: Callable[[], Any]) -> Any:
        """A conditional write's answer: a missing node or another version fails its condition."""
        try:
            return self._request(op, key, send)
        except zk_errors.NoNodeError:
            raise ConditionFailed(key, "absent") from None
        except zk_errors.BadVersionError:
            raise ConditionFailed(key, "at another version") from None

    def _create(self, key: str, name: str, data: bytes) -> str:
        """Create ``name``; the prefix's znode (and its parents) first if it is missing, each
        one more request counted."""
        send = lambda: self._zk.create_async(name, data, include_data=True)  # noqa: E731
        try:
            try:
                _path, stat = self._request("create", key, send)
            except zk_errors.NoNodeError:  # the prefix's znode: made once, then the create again
                self._make_base(key)
                self._stats.count("creates")
                _path, stat = self._request("create", key, send)
        except zk_errors.NodeExistsError:
            raise ConditionFailed(key, "already exists") from None
        return _token(stat)

    def _make_base(self, key: str) -> None:
        """Create the prefix's znode and its ancestors (an existing one is fine)."""
        parts = self._base.strip("/").split("/")
        for depth in range(1, len(parts) + 1):
            node = "/" + "/".join(parts[:depth])
            self._stats.count("creates")
            with contextlib.suppress(zk_errors.NodeExistsError):
                self._request("create", key, functools.partial(self._zk.create_async, node, b""))

    def _on_state(self, state: str) -> None:
        """kazoo's session listener (its connection thread: never blocks)."""
        if state == KazooState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        watcher = self._watcher
        if watcher is not None:
            watcher.on_state(state)

    def _translate(self, exc: Exception, op: str, key: str) -> PriorityLockError:
        """The one place where kazoo's errors become ours (server messages are not copied).

        Every request here was sent (a session not connected fails before sending).
        """
        what = self._describe_call(op, key)
        write = op in WRITES
        name = type(exc).__name__
        if isinstance(exc, (zk_errors.NoAuthError, zk_errors.AuthFailedError)):
            return StoreAccessError(f"{what} refused ({name}): {self._ACCESS_HINT}")
        if isinstance(exc, zk_errors.NotEmptyError):
            return StoreError(f"{what}: the znode has children, so it is not ours ({name})")
        if isinstance(exc, zk_errors.NoChildrenForEphemeralsError):
            return StoreError(f"{what}: the prefix's znode is ephemeral, not ours ({name})")
        if isinstance(exc, (*_LOST, KazooTimeoutError)):
            return StoreUnavailable(
                f"{what}: the answer was lost or late ({name})", outcome_unknown=write
            )
        return StoreError(f"{what} failed ({name})")


#: Everything kazoo raises for a request that :meth:`ZooKeeperStore._translate` turns into ours.
ZooKeeperStore._SDK_ERRORS = (zk_errors.KazooException, KazooTimeoutError, OSError)

#: What kazoo raises when a sent request's answer is lost, refused for now, or late.
_LOST = (
    zk_errors.ConnectionLoss,
    zk_errors.SessionExpiredError,
    zk_errors.OperationTimeoutError,
    zk_errors.ThrottledOpError,
    zk_errors.ConnectionDropped,
    zk_errors.ZookeeperStoppedError,
    OSError,
)


def _nothing() -> None:
    pass


def _token(stat: Any) -> str:
    return f"{stat.czxid}.{stat.version}"


def _parse(version: str) -> tuple[int | None, int | None]:
    """A token's (czxid, data version); (None, None) for a string that is not one of ours."""
    czxid, dot, number = version.partition(".")
    if not dot or not czxid.isdigit() or not number.isdigit():
        return None, None
    return int(czxid), int(number)


def _key_of(name: str) -> str | None:
    """The key a child of the prefix's znode holds, or None for a node that is not ours."""
    key = urllib.parse.unquote(name, errors="strict")
    if urllib.parse.quote(key, safe="") != name:
        return None
    try:
        return validate_key(key)
    except ConfigError:
        return None


def _check_hosts(hosts: str) -> str:
    """``HOST:PORT[,HOST:PORT...]``, each port given or 2181, sorted (one namespace per set)."""
    if not isinstance(hosts, str) or not hosts.strip():
        raise ConfigError(f"ZooKeeper hosts must be HOST:PORT[,HOST:PORT...], got {hosts!r}")
    found: list[str] = []
    for item in hosts.split(","):
        host, colon, port = item.strip().rpartition(":")
        if not colon:
            host, port = item.strip(), str(DEFAULT_PORT)
        if not host or any(c in host for c in "/@?# ") or not port.isdigit():
            raise ConfigError(f"ZooKeeper host must be HOST:PORT, got {item!r} in {hosts!r}")
        if not 0 < int(port) < 65536:
            raise ConfigError(f"ZooKeeper port must be 1-65535, got {port!r}")
        found.append(f"{host}:{int(port)}")
    return ",".join(sorted(found))


def _base_path(prefix: str) -> str:
    """The prefix as a znode path: ``/`` and its segments, at least one."""
    if not isinstance(prefix, str):
        raise ConfigError(f"ZooKeeper prefix must be a string, got {prefix!r}")
    stripped = prefix.strip("/")
    if not stripped:
        raise ConfigError(
            "ZooKeeper prefix must name a znode under the root (zk://HOSTS/PREFIX, e.g."
            " zk://127.0.0.1:2181/prioritylock)"
        )
    validate_key(stripped)
    if stripped.split("/")[0] == "zookeeper":
        raise ConfigError("ZooKeeper prefix must not be under /zookeeper (the server's own)")
    return "/" + stripped


class _Watcher:
    """A store's watches: one-shot ZooKeeper watches on the watched nodes, armed again each time
    they fire (one ``exists``, whose answer says whether this process wrote what is there)."""

    def __init__(self, store: ZooKeeperStore) -> None:
        self._store = store
        self._zk: Any = store.client
        self._lock = threading.Lock()
        self._callbacks: dict[str, list[Callable[[], None]]] = {}
        self._stopped = False
        self._was_lost = False  # set when the session is suspended or lost, until connected
        self._began_at_arm: dict[str, int] = {}  # this process's writes begun, per watched node
        self._pending_at_arm: set[str] = set()  # watched nodes with one of our writes under way

    def add(self, path: str, callback: Callable[[], None]) -> Callable[[], None]:
        with self._lock:
            first = path not in self._callbacks
            self._callbacks.setdefault(path, []).append(callback)
        if first:
            self._arm(path, check=False)
        done = threading.Lock()

        def remove() -> None:
            if not done.acquire(blocking=False):
                return
            with self._lock:
                listed = self._callbacks.get(path, [])
                if callback in listed:
                    listed.remove(callback)
                if not listed:
                    self._callbacks.pop(path, None)

        return remove

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._callbacks.clear()

    def on_state(self, state: str) -> None:
        """Once connected, arm every watch (again: kazoo drops its watches when a connection
        is lost); after the session was suspended or lost, also call every watcher once, when
        its watch is set again (a change before that may have gone unannounced)."""
        if state != KazooState.CONNECTED:
            self._was_lost = True
            return
        lost, self._was_lost = self._was_lost, False
        with self._lock:
            paths = list(self._callbacks)
        for path in paths:
            self._arm(path, check=False, tell=lost)

    def _arm(self, path: str, *, check: bool, tell: bool = False) -> None:
        """Set the node's watch (one ``exists``); once it is set, with ``check``, call the
        watchers if what is there is not a version this process wrote, with ``tell``, always."""
        node = self._store.hosts + path
        with self._lock:
            if self._stopped or path not in self._callbacks:
                return
            self._began_at_arm[path], pending = own_writes.under_way(node)
            if pending:
                self._pending_at_arm.add(path)
            else:
                self._pending_at_arm.discard(path)
        if not self._zk.connected:
            return  # on_state arms it again once connected
        try:
            result = self._zk.exists_async(path, watch=self._fired)
        except Exception:  # closed or stopping: nothing to watch
            return
        if tell:
            result.rawlink(lambda _answer: self._notify(path))
        elif check:
            result.rawlink(lambda answer: self._armed(path, answer))

    def _fired(self, event: Any) -> None:
        """The node changed (or the session was disconnected: on_state handles that)."""
        path = event.path
        if not path:
            return
        began, _pending = own_writes.under_way(self._store.hosts + path)
        with self._lock:
            ours = began != self._began_at_arm.get(path) or path in self._pending_at_arm
        if ours:  # this process wrote since: ask whose the change is
            self._arm(path, check=True)
            return
        self._arm(path, check=False)
        self._notify(path)

    def _armed(self, path: str, answer: Any) -> None:
        """The answer of the ``exists`` that re-armed a fired watch: call the watchers unless
        what is there now is a version this process wrote."""
        try:
            stat = answer.get_nowait()
        except Exception:
            stat = None  # lost: tell them anyway
        if stat is not None and own_writes.made(self._store.hosts + path, _token(stat)):
            return
        self._notify(path)

    def _notify(self, path: str) -> None:
        with self._lock:
            listed = list(self._callbacks.get(path, ()))
        for callback in listed:
            self._call(callback)

    def _call(self, callback: Callable[[], None]) -> None:
        try:
            callback()
        except Exception:  # a hint's receiver must not end the watch
            log.exception("%r: a change callback raised", self._store)


_URL_OPTIONS = (*TLS_FILES, "connect_timeout", "read_timeout", "session_timeout")


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> ZooKeeperStore:
    """The store for ``zk://[USER:PASSWORD@]HOST:PORT[,HOST:PORT...]/PREFIX`` (``zks://`` for
    TLS).

    The path is the znode under which documents live. Options: ``connect_timeout``,
    ``read_timeout`` and ``session_timeout`` (seconds); for ``zks://``, ``ca_certs`` (a PEM file of
    the CAs to trust instead of the system's) and ``client_cert`` / ``client_key`` (PEM files). The
    user name and password (ZooKeeper's digest scheme) may be percent-encoded.

    :raises ConfigError: no host or prefix, an unknown or empty option (named), or an invalid value.
    """
    scheme = check_url_options(parts, options, _URL_OPTIONS)
    username, password, hosts = url_credentials(scheme, parts.netloc, needs_user=False)
    if not hosts:
        raise ConfigError(
            f"{scheme}:// store URL needs hosts: {scheme}://HOST:PORT[,HOST:PORT...]/PREFIX"
        )
    return ZooKeeperStore(
        hosts,
        prefix=urllib.parse.unquote(parts.path),
        username=username,
        password=password,
        tls=scheme == "zks",
        **url_tls_files(options),
        session_timeout=url_seconds(scheme, options, "session_timeout", SESSION_TIMEOUT),
        **url_timeouts(scheme, options),
    )
