"""EtcdStore: lease documents as etcd keys, changed by transactions on the key's mod revision.

Layout: the store's prefix is a key prefix (``etcd://HOST:PORT/prioritylock/locks``:
``prioritylock/locks/``) and each document is the key ``PREFIX/KEY`` (``team/resource`` is
``prioritylock/locks/team/resource``), its value the document's bytes as they are (an operator can
``etcdctl get`` the lease JSON). etcd's key space is flat, so a key and a key under it (``a`` and
``a/b``) are two keys, and ``list`` is one range request over the prefix, keys only.

The version token is the key's ``mod_revision`` (decimal): etcd's revisions grow across the whole
cluster and never repeat, so a key created again never matches an earlier token
(``unique_versions=True``). Create is a transaction comparing the key's ``create_revision`` with 0
(absent); replace and delete compare its ``mod_revision`` with the token.

Requests are etcd's v3 JSON gateway (``POST /v3/kv/range``, ``/v3/kv/txn``, served on the client
port by etcd 3.4 and later; keys and values base64) over one urllib3 connection pool (HTTPS for
``etcds://``), without retries: each request's connection and each read wait at most their
timeouts. A request that could not connect was not sent
(:class:`~prioritylock.StoreUnavailable`); a write whose answer was lost or late is
outcome-unknown, and the lock reads back to decide, as on every store. Errors are translated in
one place, :meth:`EtcdStore._translate`, and always chained. etcd's leases
(TTLs) play no part in who holds a lock (docs/stores.md).

With a user name and password, the store asks ``/v3/auth/authenticate`` for a token before its
first request and sends it with every request (``Authorization``); a token the server no longer
knows (it expired, or the server restarted) is answered 401 before anything is applied, so the
store authenticates again and sends the request once more. The password and the token never go
into our errors or the log.

Change notices (:meth:`EtcdStore.watch_key`) are one streamed ``POST /v3/watch`` per watched key,
read on a thread of its own; a change whose revision this process wrote wakes nobody (a write
under way is announced first, so a watch that hears it before its answer waits for the answer).
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from prioritylock.stores._registry import missing_extra

try:
    import urllib3
    from urllib3 import exceptions as http_errors
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("etcd stores", "etcd", _exc) from None

from prioritylock._errors import (
    ConditionFailed,
    ConfigError,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock._scheduler import DEFAULT_WORKERS
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
    untrusted_certificate,
    untrusted_error,
    url_credentials,
    url_timeouts,
    url_tls_files,
)
from prioritylock.stores._log import log

__all__ = ["DEFAULT_PORT", "MAX_OBJECT_BYTES", "EtcdStore", "store_from_url"]

DEFAULT_PORT = 2379
MAX_OBJECT_BYTES = 1_000_000
"""The largest document the store writes: etcd refuses a request over ``--max-request-bytes``
(1.5 MiB by default), and base64 makes the JSON a third larger."""

_WRITTEN_KEYS = 4096
_PENDING_WAIT = 2.0
"""Seconds a watch waits for this process's writes under way to a key before deciding whose a
change was (past it, the change wakes the locks: a hint too many)."""


class EtcdStore(CloudStore):
    """Documents under the key prefix ``prefix`` of one etcd cluster member; shared by every
    process and host that opens it.

    ``endpoint`` is ``HOST:PORT`` of a member's client URL. ``tls`` speaks HTTPS
    (``etcds://``), checking the member's certificate against ``ca_certs`` (a PEM file of CA
    certificates) or else the system's trust store (which ``SSL_CERT_FILE`` can name);
    ``client_cert`` and ``client_key`` (PEM files) are shown to a member that asks for a client
    certificate (``--client-cert-auth``). ``username`` and ``password``: an etcd user, for a
    cluster with authentication enabled. ``pool``: a urllib3 pool of the caller's for that
    endpoint (its timeouts, retries and TLS are then the caller's; the store closes it). Every
    request counts in :attr:`stats`; authenticating (once, and again when the token expires)
    does not.

    :raises ConfigError: invalid endpoint, prefix, credentials or timeouts, or TLS files without
        ``tls``.
    """

    _LABEL = "etcd"
    _SCHEME = "etcd"
    _HOLDER = "endpoint"
    _CAPABILITIES = StoreCapabilities(
        shared_across_processes=True,
        shared_across_hosts=True,
        conditional_delete=True,
        unique_versions=True,  # mod revisions never repeat (see the module's notes)
    )
    _MAX_BYTES = MAX_OBJECT_BYTES
    _ACCESS_HINT = (
        "check the user name and password (etcd://USER:PASSWORD@HOST:PORT/PREFIX) and that the"
        " user's role may read and write the prefix's keys (docs/stores.md)"
    )

    def __init__(
        self,
        endpoint: str = f"127.0.0.1:{DEFAULT_PORT}",
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
        pool: urllib3.HTTPConnectionPool | None = None,
    ) -> None:
        self._host, self._port = _check_endpoint(endpoint)
        super().__init__(self.endpoint, _base_prefix(prefix), connect_timeout, read_timeout)
        if (username is None) != (password is None) or username == "":
            raise ConfigError("etcd needs both a user name and a password, or neither")
        check_tls_files(self._LABEL, "etcds", tls, (ca_certs, client_cert, client_key))
        self._credentials = None if username is None else {"name": username, "password": password}
        self._token: str | None = None
        self._token_lock = threading.Lock()
        self._tls: dict[str, Any] | None = None
        if tls:
            self._tls = {
                "cert_reqs": ssl.CERT_REQUIRED,
                "ca_certs": ca_certs,
                "cert_file": client_cert,
                "key_file": client_key,
            }
        self._closed = False
        self._close_lock = threading.Lock()
        self._watches: list[_Watch] = []
        #: The latest revision this store read or wrote, per key: a watch starts after it.
        self._seen: dict[str, int] = {}
        # As many connections as workers may call at once.
        self._take_client(pool, {}, lambda: self._new_pool(DEFAULT_WORKERS, self._timeouts[1]))

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share documents."""
        return f"etcd:{self.endpoint}/{self._prefix}"

    @property
    def endpoint(self) -> str:
        """``HOST:PORT``."""
        return f"{self._host}:{self._port}"

    def close(self) -> None:
        """Close the connection pool (the caller's too) and the store's watches; safe to call
        twice."""
        with self._close_lock:
            self._closed = True
            watches, self._watches = self._watches, []
        for watch in watches:
            watch.stop()
        self._client.close()

    # -- change notices (stores._base.KeyWatcher) -----------------------------------------------

    def watch_key(self, key: str, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` when ``key`` may have changed, written by another process or host;
        return a function that stops the calls.

        A hint, not a fact: an etcd watch on the key (one streamed ``POST /v3/watch`` on a
        thread of its own, not counted in :attr:`stats`); a change whose revision this process
        wrote calls nothing (its locks were told in-process). A lost stream is opened again from
        the next revision it had not heard, and the callback is called once when it is back.
        The watch starts after the latest revision of ``key`` this store read or wrote, so a
        change between that and the stream's opening is heard too.

        :raises ConfigError: invalid key.
        """
        name = self._object_name(key)
        # From the revision after the latest this store read or wrote: a change made before the
        # stream is open is heard too.
        watch = _Watch(self, name, callback, self._seen.get(key, -1) + 1)
        with self._close_lock:
            if self._closed:
                return _nothing
            self._watches.append(watch)
        watch.start()

        def stop() -> None:
            with self._close_lock:
                if watch in self._watches:
                    self._watches.remove(watch)
            watch.stop()

        return stop

    # -- one request per operation (CloudStore) -------------------------------------------------

    def _fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        answer = self._request(key, "read", "range", {"key": _b64(name.encode())})
        kvs = answer.get("kvs") or []
        if not kvs:
            self._saw(key, int(answer.get("header", {}).get("revision", 0)))
            return None
        revision = int(kvs[0].get("mod_revision", 0))
        self._saw(key, revision)
        return Versioned(_unb64(kvs[0].get("value", "")), str(revision))

    def _put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        encoded = _b64(name.encode())
        if condition is None:
            compare = {
                "key": encoded,
                "target": "CREATE",
                "result": "EQUAL",
                "create_revision": "0",
            }
        else:
            compare = {
                "key": encoded,
                "target": "MOD",
                "result": "EQUAL",
                "mod_revision": condition,
            }
        put = {"request_put": {"key": encoded, "value": _b64(data)}}
        revision = self._txn(op, key, name, {"compare": [compare], "success": [put]})
        if revision is None:
            raise ConditionFailed(
                key, "already exists" if condition is None else "absent or at another version"
            )
        return revision

    def _remove(self, name: str, condition: Any) -> None:
        key, encoded = name[len(self._prefix) :], _b64(name.encode())
        compare = {"key": encoded, "target": "MOD", "result": "EQUAL", "mod_revision": condition}
        remove = {"request_delete_range": {"key": encoded}}
        if self._txn("delete", key, name, {"compare": [compare], "success": [remove]}) is None:
            raise ConditionFailed(key, "absent or at another version")

    def _list_names(self, full_prefix: str) -> Iterator[str]:
        start = full_prefix.encode()
        body = {"key": _b64(start), "range_end": _b64(_prefix_end(start)), "keys_only": True}
        answer = self._request(full_prefix[len(self._prefix) :], "list", "range", body)
        skip = len(self._prefix)
        for kv in answer.get("kvs", ()):
            try:
                name = _unb64(kv.get("key", "")).decode("utf-8")
            except UnicodeDecodeError:
                continue
            if _key_of(name[skip:].encode()) is not None:  # not a key of ours otherwise
                yield name

    def _read_condition(self, version: str) -> str | None:
        return _parse(version)

    def _write_condition(self, key: str, version: str) -> str:
        revision = _parse(version)
        if revision is None:
            raise ConditionFailed(key, "at another version")
        return revision

    def _namespace_root(self) -> str:
        return ""

    # -- requests ----------------------------------------------------------------------------------

    def _new_pool(self, size: int, read: float | None) -> urllib3.HTTPConnectionPool:
        """A pool of ``size`` connections to the member (HTTPS if the store speaks TLS), no
        retries, each read waiting at most ``read`` seconds (``None``: for ever)."""
        options: dict[str, Any] = {
            "maxsize": size,
            "block": False,
            "timeout": urllib3.Timeout(connect=self._timeouts[0], read=read),
            "retries": False,
            "headers": {"Content-Type": "application/json"},
        }
        if self._tls is None:
            return urllib3.HTTPConnectionPool(self._host, self._port, **options)
        return urllib3.HTTPSConnectionPool(self._host, self._port, **options, **self._tls)

    def _request(self, key: str, op: str, method: str, body: dict[str, Any]) -> dict[str, Any]:
        """One request to ``/v3/kv/METHOD``, sent once (twice if the member no longer knew the
        store's token: it applied nothing); the answer's JSON object.

        :raises EtcdStatusError: an answer other than 200 with a JSON object.
        """
        with self._close_lock:
            if self._closed:
                raise StoreError(f"{self._describe_call(op, key)}: the store is closed")
        data = json.dumps(body).encode()
        for attempt in (1, 2):
            headers = self._auth_headers()
            response = self._client.request(
                "POST", f"/v3/kv/{method}", body=data, headers=headers, preload_content=True
            )
            status, answer = response.status, _json(response.data)
            if status == 200 and answer is not None:
                return answer
            if status == 401 and self._credentials is not None and attempt == 1:
                self._forget_token(headers)  # a new token, and once more
                continue
            raise EtcdStatusError(status, answer)
        raise AssertionError("unreachable")

    def _txn(self, op: str, key: str, name: str, body: dict[str, Any]) -> str | None:
        """One transaction on object ``name``, announced to this process's watches while under
        way; the revision it made, or ``None`` if its condition failed."""
        written = f"{self.endpoint}/{name}"
        own_writes.begin(written)
        revision = None
        try:
            answer = self._request(key, op, "txn", body)
            if answer.get("succeeded"):
                revision = int(answer.get("header", {}).get("revision", 0))
                self._saw(key, revision)
        finally:
            own_writes.end(written, None if revision is None else str(revision))
        return None if revision is None else str(revision)

    def _saw(self, key: str, revision: int) -> None:
        if len(self._seen) > _WRITTEN_KEYS:
            self._seen.clear()
        self._seen[key] = max(revision, self._seen.get(key, 0))

    def _auth_headers(self) -> dict[str, str]:
        """The headers that authenticate a request (none without credentials), asking for a
        token first if the store has none.

        :raises _AuthFailed: the token was not given (refused, or no answer).
        """
        if self._credentials is None:
            return {}
        with self._token_lock:
            token = self._token
        if token is None:
            token = self._authenticate()
        return {"Authorization": token}

    def _authenticate(self) -> str:
        """A new token (``/v3/auth/authenticate``; not counted in :attr:`stats`)."""
        body = json.dumps(self._credentials).encode()
        try:
            response = self._client.request(
                "POST", "/v3/auth/authenticate", body=body, preload_content=True
            )
        except (http_errors.HTTPError, OSError) as exc:
            raise _AuthFailed(exc) from exc
        answer = _json(response.data)
        token = answer.get("token") if answer is not None else None
        if response.status != 200 or not isinstance(token, str) or not token:
            refused = EtcdStatusError(response.status, answer)
            raise _AuthFailed(refused) from refused
        with self._token_lock:
            self._token = token
        return token

    def _forget_token(self, headers: dict[str, str]) -> None:
        with self._token_lock:
            if self._token == headers.get("Authorization"):
                self._token = None

    def _translate(self, exc: Exception, op: str, key: str) -> PriorityLockError:
        """The one place where urllib3's errors and the gateway's answers become ours: not
        connected is nothing sent; a lost or late answer is outcome-unknown for a write; the
        server's messages are not copied."""
        if isinstance(exc, _AuthFailed):  # nothing of the operation itself was sent
            error = self._translate(exc.cause, op, key)
            return StoreUnavailable(str(error)) if isinstance(error, StoreUnavailable) else error
        what = self._describe_call(op, key)
        if isinstance(exc, EtcdStatusError):
            if exc.status in (401, 403) or (exc.status == 400 and exc.auth):
                return StoreAccessError(f"{what} refused ({exc}): {self._ACCESS_HINT}")
            if exc.status in (408, 429) or exc.status >= 500:
                return StoreUnavailable(
                    f"{what}: etcd could not answer ({exc})", outcome_unknown=op in WRITES
                )
            return StoreError(f"{what} failed ({exc})")
        cause: BaseException = exc
        if isinstance(exc, http_errors.MaxRetryError) and exc.reason is not None:
            cause = exc.reason
        name = type(cause).__name__
        if untrusted_certificate(cause):
            return untrusted_error(what)
        if isinstance(cause, (http_errors.NewConnectionError, http_errors.ConnectTimeoutError)):
            return StoreUnavailable(f"{what}: no etcd server answered ({name})")
        if isinstance(cause, (http_errors.HTTPError, OSError)):
            return StoreUnavailable(
                f"{what}: the answer was lost or late ({name})", outcome_unknown=op in WRITES
            )
        return StoreError(f"{what} failed ({name})")


class _Watch:
    """One key's etcd watch: a streamed ``POST /v3/watch`` read on a daemon thread, opened again
    (from the next unheard revision) after it is lost, until stopped."""

    def __init__(
        self, store: EtcdStore, name: str, callback: Callable[[], None], start: int
    ) -> None:
        self._start = start  # the first revision to hear; 0: from when the stream opens
        self._store = store
        self._name = name
        self._written_name = f"{store.endpoint}/{name}"
        self._callback = callback
        self._stopped = threading.Event()
        self._response: Any = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"etcd-watch {name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        with self._lock:
            response = self._response
        if response is not None:
            # Ends the blocked read at once; a connection already gone (ENOTCONN: a partition
            # test's cut, a server that left) has ended it too.
            with contextlib.suppress(OSError):
                response.shutdown()

    def _run(self) -> None:
        pool = self._store._new_pool(1, None)  # a stream waits for its next event for ever
        start = self._start
        lost = False
        delay = 0.05
        try:
            while not self._stopped.is_set():
                try:
                    start = self._stream(pool, start, lost)
                    delay = 0.05
                except Exception as exc:  # lost or refused: open it again after a pause
                    log.debug("%r: the watch of %r was lost (%s)", self._store, self._name, exc)
                lost = True
                self._stopped.wait(delay)
                delay = min(delay * 2, 1.0)
        finally:
            pool.close()

    def _stream(self, pool: Any, start: int, lost: bool) -> int:
        """Read one watch stream until it ends; the next revision to hear afterwards."""
        request: dict[str, Any] = {"key": _b64(self._name.encode())}
        if start:
            request["start_revision"] = str(start)
        body = json.dumps({"create_request": request}).encode()
        headers = self._store._auth_headers()
        response = pool.request(
            "POST", "/v3/watch", body=body, headers=headers, preload_content=False, retries=False
        )
        with self._lock:
            self._response = response
        if self._stopped.is_set():
            response.shutdown()
        try:
            if response.status != 200:
                if response.status == 401:
                    self._store._forget_token(headers)  # authenticate again on the next try
                return start
            pending = b""
            for chunk in response.stream(None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    start = self._heard(line, start, lost)
                    lost = False
        finally:
            with self._lock:
                self._response = None
            response.release_conn()
        return start

    def _heard(self, line: bytes, start: int, lost: bool) -> int:
        """One message of the stream; the next revision to hear."""
        try:
            result = json.loads(line).get("result", {})
        except (ValueError, AttributeError):
            return start
        if result.get("compact_revision") or result.get("canceled"):
            self._call()  # the revisions it had not heard are gone: watch from now on
            return 0
        if result.get("created"):
            if not start:
                start = int(result.get("header", {}).get("revision", 0)) + 1
            if lost:
                self._call()  # changes may have gone unheard while it was lost
            return start
        events = result.get("events") or []
        news = False
        for event in events:
            revision = int(event.get("kv", {}).get("mod_revision", 0))
            start = max(start, revision + 1)
            news = (
                news
                or event.get("type") == "DELETE"
                or not own_writes.made(self._written_name, str(revision), wait=_PENDING_WAIT)
            )
        if news:
            self._call()
        return start

    def _call(self) -> None:
        if self._stopped.is_set():
            return
        try:
            self._callback()
        except Exception:  # a hint's receiver must not end the watch
            log.exception("%r: a change callback raised", self._store)


def _nothing() -> None:
    pass


class _AuthFailed(Exception):
    """No token for a request (chained to why): nothing of the request itself was sent."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(type(cause).__name__)
        self.cause = cause


class EtcdStatusError(Exception):
    """The gateway answered with an HTTP status other than 200, or without a JSON object
    (chained under our error; the server's message is not copied).

    :ivar status: the HTTP status.
    :ivar code: the gRPC code in its JSON answer, if any.
    :ivar auth: the answer says the request was not authenticated (no user, a wrong password).
    """

    def __init__(self, status: int, answer: dict[str, Any] | None = None) -> None:
        code = answer.get("code") if answer is not None else None
        super().__init__(f"HTTP {status}" + (f", gRPC code {code}" if code is not None else ""))
        self.status = status
        self.code = code
        message = str(answer.get("message", "")) if answer is not None else ""
        self.auth = any(mark in message for mark in _AUTH_REFUSED)


#: What etcd's messages say when a request was not authenticated (answered 400, gRPC code 3).
_AUTH_REFUSED = ("user name is empty", "authentication failed", "invalid user ID or password")

#: Everything a request may raise that :meth:`EtcdStore._translate` turns into ours.
EtcdStore._SDK_ERRORS = (http_errors.HTTPError, OSError, EtcdStatusError, _AuthFailed)


def _json(data: bytes | None) -> dict[str, Any] | None:
    """A JSON object's answer, or None for anything else."""
    try:
        answer = json.loads(data or b"{}")
    except ValueError:
        return None
    return answer if isinstance(answer, dict) else None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _prefix_end(start: bytes) -> bytes:
    """The first key after every key starting with ``start`` (etcd's ``range_end``)."""
    trimmed = start.rstrip(b"\xff")
    if not trimmed:
        return b"\0"  # every key
    return trimmed[:-1] + bytes([trimmed[-1] + 1])


def _parse(version: str) -> str | None:
    """A token's mod revision as the gateway wants it, or None for one that is not ours."""
    if not isinstance(version, str) or not version.isdigit() or int(version) <= 0:
        return None
    return str(int(version))


def _key_of(name: bytes) -> str | None:
    """The key an etcd key under the prefix holds, or None for one that is not ours."""
    try:
        return validate_key(name.decode("utf-8"))
    except (UnicodeDecodeError, ConfigError):
        return None


def _check_endpoint(endpoint: str) -> tuple[str, int]:
    """``HOST[:PORT]`` (port 2379 when left out)."""
    if not isinstance(endpoint, str) or not endpoint.strip():
        raise ConfigError(f"etcd endpoint must be HOST:PORT, got {endpoint!r}")
    host, colon, port = endpoint.strip().rpartition(":")
    if not colon:
        host, port = endpoint.strip(), str(DEFAULT_PORT)
    if not host or any(c in host for c in "/@?#, ") or not port.isdigit():
        raise ConfigError(f"etcd endpoint must be HOST:PORT, got {endpoint!r}")
    if not 0 < int(port) < 65536:
        raise ConfigError(f"etcd port must be 1-65535, got {port!r}")
    return host, int(port)


def _base_prefix(prefix: str) -> str:
    """The prefix as etcd keys start with it: its segments and a trailing ``/``."""
    if not isinstance(prefix, str):
        raise ConfigError(f"etcd prefix must be a string, got {prefix!r}")
    stripped = prefix.strip("/")
    if not stripped:
        raise ConfigError(
            "etcd prefix must not be empty (etcd://HOST:PORT/PREFIX, e.g."
            " etcd://127.0.0.1:2379/prioritylock)"
        )
    validate_key(stripped)
    return stripped + "/"


_URL_OPTIONS = (*TLS_FILES, "connect_timeout", "read_timeout")


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> EtcdStore:
    """The store for ``etcd://[USER:PASSWORD@]HOST:PORT/PREFIX`` (``etcds://`` for HTTPS).

    The path is the key prefix under which documents live. The user name and password (an etcd
    user, for a cluster with authentication on) may be percent-encoded. Options:
    ``connect_timeout`` and ``read_timeout`` (seconds); for ``etcds://``, ``ca_certs`` (a PEM file
    of the CAs to trust instead of the system's) and ``client_cert`` / ``client_key`` (PEM files,
    for a member that asks for a client certificate).

    :raises ConfigError: no host or prefix, a user name without a password, an unknown or empty
        option (named), or an invalid value.
    """
    scheme = check_url_options(parts, options, _URL_OPTIONS)
    username, password, endpoint = url_credentials(scheme, parts.netloc, needs_user=True)
    if not endpoint:
        raise ConfigError(f"{scheme}:// store URL needs a host: {scheme}://HOST:PORT/PREFIX")
    return EtcdStore(
        endpoint,
        prefix=urllib.parse.unquote(parts.path),
        username=username,
        password=password,
        tls=scheme == "etcds",
        **url_tls_files(options),
        **url_timeouts(scheme, options),
    )
