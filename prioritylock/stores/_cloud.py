"""What the object stores (S3, GCS, Azure Blob) and the server stores (Redis, ZooKeeper, etcd)
share: one base class, and one error classifier for the HTTP ones.

:class:`CloudStore` carries everything that does not depend on the SDK: the bucket (or container)
and the key prefix, request counts, the namespace, client ownership and ``close``, the checks of
keys, options and timeouts, and the five seam operations themselves. A store module supplies only
what its SDK makes different: one request per operation (``_fetch``, ``_put``, ``_remove``,
``_list_names``) and its error translation (``_translate``), which hands the HTTP status and error
code to :class:`HttpClassifier` and keeps only the store's own quirks.

Every request goes through :meth:`CloudStore._call`: it counts the request, translates what the
SDK raised (always chained), and logs the request and its outcome at DEBUG on the
``prioritylock.stores`` logger. Log lines carry the store, the operation, the key and the outcome;
never an endpoint's query, a credential, or a message from the server.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import logging
import re
import ssl
import threading
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, ClassVar, Protocol, TypedDict, TypeVar

import attrs

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
    StoreStats,
    Versioned,
    normalize_prefix,
    prefixed_key,
    validate_prefix,
)
from prioritylock.stores._log import describe_error, describe_result, log, why_not_sent

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_READ_TIMEOUT",
    "WRITES",
    "CloudStore",
    "HttpClassifier",
    "NativeIO",
    "Outcome",
    "TLS_FILES",
    "TLSFiles",
    "Timeouts",
    "check_timeouts",
    "check_tls_files",
    "check_url_options",
    "parse_store_url",
    "scrub_sdk_logs",
    "untrusted_certificate",
    "untrusted_error",
    "url_credentials",
    "url_seconds",
    "url_timeouts",
    "url_tls_files",
    "validate_endpoint",
]

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 10.0
WRITES = frozenset({"create", "replace", "delete"})

_T = TypeVar("_T")


class Timeouts(TypedDict):
    """A store's two timeouts, in seconds, as its constructor takes them."""

    connect_timeout: float
    read_timeout: float


class Outcome(enum.Enum):
    """What a failed HTTP request means to the lock."""

    CONDITION_FAILED = "condition failed"  # a write's precondition did not hold
    ACCESS = "access"  # credentials or permissions refused: retrying won't help
    THROTTLED = "throttled"  # slow down and retry
    UNAVAILABLE = "unavailable"  # the server failed: retry
    FAILED = "failed"  # anything else: a StoreError


@attrs.frozen
class HttpClassifier:
    """Maps an HTTP status and a service's error code to an :class:`Outcome`.

    The statuses every service shares are built in (401 and 403: access; 5xx: unavailable); a
    store names its own condition, throttling and transient codes (and any statuses that mean
    the same for it alone).
    """

    condition_statuses: frozenset[int] = frozenset({412})
    condition_codes: frozenset[str] = frozenset()
    throttle_statuses: frozenset[int] = frozenset({429})
    throttle_codes: frozenset[str] = frozenset()
    unavailable_statuses: frozenset[int] = frozenset({408})
    unavailable_codes: frozenset[str] = frozenset()

    def outcome(self, status: int, code: str, *, write: bool) -> Outcome:
        """The outcome of a request answered ``status`` with error ``code`` ("" if none)."""
        if write and (status in self.condition_statuses or code in self.condition_codes):
            return Outcome.CONDITION_FAILED
        if status in (401, 403):
            return Outcome.ACCESS
        if status in self.throttle_statuses or code in self.throttle_codes:
            return Outcome.THROTTLED
        if status >= 500 or status in self.unavailable_statuses or code in self.unavailable_codes:
            return Outcome.UNAVAILABLE
        return Outcome.FAILED


class NativeIO(Protocol):
    """A store's native async client (private): the two requests a held lock repeats, with no
    retries of its own; what it raises (``errors``) the store's ``_translate`` understands."""

    errors: tuple[type[Exception], ...]

    def cleaned(self, exc: Exception) -> Exception:
        """What to chain our error to instead of ``exc`` (which may say too much)."""

    async def fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        """:meth:`CloudStore._fetch` of object ``name``, awaited."""

    async def put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        """:meth:`CloudStore._put`, awaited: the new version."""


class CloudStore(abc.ABC):
    """The seam over one SDK client: objects under ``prefix`` in one bucket or container.

    Subclasses set the class attributes, call ``super().__init__`` and :meth:`_take_client`, and
    implement the abstract request methods. Version tokens are whatever the subclass returns.
    """

    #: Names the store in messages ("S3"), its URL scheme, and what holds its objects.
    _LABEL: ClassVar[str]
    _SCHEME: ClassVar[str]
    _HOLDER: ClassVar[str] = "bucket"
    _OBJECT: ClassVar[str] = "key"
    _CLIENT_OPTIONS: ClassVar[str] = "client options"
    _CAPABILITIES: ClassVar[StoreCapabilities]
    #: Everything the SDK raises for a failed request; anything else is a bug and propagates.
    _SDK_ERRORS: ClassVar[tuple[type[Exception], ...]]
    _CLASSIFIER: ClassVar[HttpClassifier]
    #: What to check when access is refused, and what to know when throttled.
    _ACCESS_HINT: ClassVar[str]
    _THROTTLE_HINT: ClassVar[str] = ""
    #: The largest object the store writes (``None``: no limit of its own).
    _MAX_BYTES: ClassVar[int | None] = None

    _client: Any
    _owns_client: bool

    def __init__(
        self, holder: str, prefix: str, connect_timeout: float, read_timeout: float
    ) -> None:
        self._timeouts = check_timeouts(self._LABEL, connect_timeout, read_timeout)
        self._holder = holder
        self._prefix = normalize_prefix(prefix, self._LABEL)
        self._stats = StoreStats()
        scrub_sdk_logs()

    def _take_client(self, client: Any, given: dict[str, object], make: Callable[[], Any]) -> None:
        """Use ``client`` (not ours to close) or, if ``None``, the one ``make`` builds.

        :raises ConfigError: both a client and options for making one (``given``) were passed.
        """
        if client is not None:
            clash = sorted(name for name, value in given.items() if value is not None)
            if clash:
                raise ConfigError(
                    f"{type(self).__name__} takes either client= or {self._CLIENT_OPTIONS},"
                    f" not both: got {clash}"
                )
            self._client, self._owns_client = client, False
        else:
            self._client, self._owns_client = make(), True

    # -- what every store shows --------------------------------------------------------------

    @property
    def stats(self) -> StoreStats:
        return self._stats

    @property
    def capabilities(self) -> StoreCapabilities:
        return self._CAPABILITIES

    @property
    def namespace(self) -> str:
        """Names what this store addresses: two stores with one namespace share objects."""
        return f"{self._SCHEME}:{self._namespace_root()}/{self._holder}/{self._prefix}"

    @property
    def prefix(self) -> str:
        """The normalized prefix: empty, or ending with ``/``."""
        return self._prefix

    @property
    def client(self) -> Any:
        """The SDK client the store sends its requests through."""
        return self._client

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(self._repr_fields())})"

    def _repr_fields(self) -> list[str]:
        return [f"{self._HOLDER}={self._holder!r}", f"prefix={self._prefix!r}"]

    # -- the seam ------------------------------------------------------------------------------

    def read(self, key: str) -> Versioned | None:
        found = self._get(key, None)
        assert found is not NOT_MODIFIED, "an unconditional read answered 304"
        return found

    def read_if_changed(self, key: str, version: str) -> ReadResult:
        return self._get(key, version)

    def create(self, key: str, data: bytes) -> str:
        name = self._object_name(key)
        payload = self._payload("create", key, data)
        return self._call("create", key, lambda: self._put("create", key, name, payload, None))

    def replace(self, key: str, data: bytes, version: str) -> str:
        name = self._object_name(key)
        token = self._write_condition(key, version)
        payload = self._payload("replace", key, data)
        return self._call("replace", key, lambda: self._put("replace", key, name, payload, token))

    def delete(self, key: str, version: str) -> None:
        name = self._object_name(key)
        token = self._write_condition(key, version)
        self._call("delete", key, lambda: self._remove(name, token))

    def list(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        skip = len(self._prefix)
        names = self._call("list", prefix, lambda: list(self._list_names(self._prefix + prefix)))
        return sorted(name[skip:] for name in names)

    def close(self) -> None:
        """Close the client's connections if this store made the client; safe to call twice."""
        if self._owns_client:
            self._client.close()

    # -- shared internals ----------------------------------------------------------------------

    def _get(self, key: str, version: str | None) -> ReadResult:
        """One read; with ``version``, only if the object is no longer at it."""
        name = self._object_name(key)
        # A token that can't be a version names no object: a plain read answers the same.
        known = None if version is None else self._read_condition(version)
        found = self._call("read", key, lambda: self._fetch(key, name, known), log_result=False)
        return self._read_answer(key, version, known, found)

    def _read_answer(
        self, key: str, version: str | None, known: str | None, found: ReadResult
    ) -> ReadResult:
        """What a read of ``key`` that was sent ``known`` answers, counted and logged."""
        if isinstance(found, Versioned) and known is not None and found.version == known:
            # A server that ignores the condition sends the object anyway: the answer is the same.
            found = NOT_MODIFIED
        if found is NOT_MODIFIED:
            self._stats.count_not_modified()
        if log.isEnabledFor(logging.DEBUG):
            op = "read" if version is None else "read_if_changed"
            log.debug("%r %s %r: %s", self, op, key, describe_result(found))
        return found

    def _call(self, op: str, key: str, send: Callable[[], _T], *, log_result: bool = True) -> _T:
        """Send one request of ``op`` on ``key``: count it, translate and chain what the SDK
        raises, and log the request and its outcome at DEBUG (a failure always; a result if
        ``log_result``, else the caller logs it)."""
        try:
            with self._counting(op + "s"):
                result = send()
        except self._SDK_ERRORS as exc:
            raise self._failed(op, key, exc) from exc
        except PriorityLockError as error:  # a check of the store's own, e.g. a missing version
            self._log_outcome(op, key, error)
            raise
        if log_result:
            self._log_outcome(op, key, result)
        return result

    def _failed(self, op: str, key: str, exc: Exception) -> PriorityLockError:
        """Our error for what the client raised during ``op`` on ``key``, logged."""
        error = self._translate(exc, op, key)
        self._log_outcome(op, key, error)
        return error

    def _log_outcome(self, op: str, key: str, outcome: object) -> None:
        if log.isEnabledFor(logging.DEBUG):
            if isinstance(outcome, PriorityLockError):
                log.debug("%r %s %r: %s", self, op, key, describe_error(outcome))
            else:
                log.debug("%r %s %r: %s", self, op, key, describe_result(outcome))

    # -- native async I/O (stores._base.NativeAsync) --------------------------------------------

    def _call_async(self, op: str, *args: Any) -> Awaitable[Any] | None:
        """``op`` as a coroutine on the store's native async client, or ``None`` if it has none
        (or leaves ``op`` to the sync client): reads, creates and replaces, the calls a held
        lock makes over and over."""
        native = self._native_io()
        if native is None:
            return None
        if op == "read":
            return self._aget(native, args[0], None)
        if op == "read_if_changed":
            return self._aget(native, args[0], args[1])
        if op == "create":
            return self._aput(native, "create", args[0], args[1], None)
        if op == "replace":
            return self._aput(native, "replace", args[0], args[1], args[2])
        return None

    def _native_io(self) -> NativeIO | None:
        """The store's native async client, made on first use; ``None`` if it has none."""
        return None

    async def _aget(self, native: NativeIO, key: str, version: str | None) -> ReadResult:
        name = self._object_name(key)
        known = None if version is None else self._read_condition(version)
        found = await self._acall(
            native, "read", key, native.fetch(key, name, known), log_result=False
        )
        return self._read_answer(key, version, known, found)

    async def _aput(
        self, native: NativeIO, op: str, key: str, data: bytes, version: str | None
    ) -> str:
        name = self._object_name(key)
        token = None if version is None else self._write_condition(key, version)
        payload = self._payload(op, key, data)
        return await self._acall(native, op, key, native.put(op, key, name, payload, token))

    async def _acall(
        self, native: NativeIO, op: str, key: str, send: Awaitable[_T], *, log_result: bool = True
    ) -> _T:
        """:meth:`_call` for a request on the native client (which never retries: one count)."""
        self._stats.count(op + "s")
        try:
            result = await send
        except native.errors as exc:
            failed, cause = self._failed(op, key, exc), native.cleaned(exc)
        except PriorityLockError as error:
            self._log_outcome(op, key, error)
            raise
        else:
            if log_result:
                self._log_outcome(op, key, result)
            return result
        # Raised here, outside the handler, so that obstore's error is not kept as the context.
        raise failed from cause

    @contextlib.contextmanager
    def _counting(self, kind: str) -> Iterator[None]:
        """Counts the requests sent inside: one; a store that sees every attempt counts those."""
        self._stats.count(kind)
        yield

    def _object_name(self, key: str) -> str:
        return prefixed_key(self._prefix, key, f"{self._LABEL} {self._OBJECT}")

    def _payload(self, op: str, key: str, data: bytes) -> bytes:
        """The bytes to send for a write, refused (before any request) if over ``_MAX_BYTES``."""
        payload = bytes(data)
        if self._MAX_BYTES is not None and len(payload) > self._MAX_BYTES:
            raise ConfigError(
                f"{self._LABEL} {op} of {key!r}: {len(payload)} bytes is over the store's limit"
                f" of {self._MAX_BYTES}"
            )
        return payload

    def _no_version(self, op: str, key: str, token: str) -> StoreUnavailable:
        """An answer without the version token: a write (if any) landed, but at a version
        unknown, so its outcome is unknown and the lock reads it back."""
        return StoreUnavailable(
            f"{self._describe_call(op, key)} returned no {token}", outcome_unknown=op in WRITES
        )

    def _not_sent(self, op: str, key: str, exc: BaseException) -> StoreUnavailable:
        """The request never left this host: even a write certainly did not land."""
        why = why_not_sent(exc)
        return StoreUnavailable(f"{self._describe_call(op, key)}: {why} ({type(exc).__name__})")

    def _lost(self, op: str, key: str, exc: BaseException) -> StoreUnavailable:
        """Timeout or connection lost mid-request: the store may have applied a write."""
        return StoreUnavailable(
            f"{self._describe_call(op, key)}: the response was lost ({type(exc).__name__})",
            outcome_unknown=op in WRITES,
        )

    def _describe_call(self, op: str, key: str) -> str:
        return f"{self._LABEL} {op} of {key!r} in {self._location()}"

    def _location(self) -> str:
        where = f"{self._HOLDER} {self._holder!r}"
        if self._prefix:
            where += f" (prefix {self._prefix!r})"
        return where + self._location_detail()

    def _location_detail(self) -> str:
        return ""

    def _http_error(
        self, exc_outcome: Outcome, op: str, key: str, label: str, detail: str
    ) -> PriorityLockError:
        """Our error for an HTTP answer: ``label`` is what to show of it (code and status);
        ``detail`` says how a failed condition failed."""
        write = op in WRITES
        what = self._describe_call(op, key)
        if exc_outcome is Outcome.CONDITION_FAILED:
            return ConditionFailed(key, detail)
        if exc_outcome is Outcome.ACCESS:
            return StoreAccessError(f"{what} refused ({label}): {self._ACCESS_HINT}")
        if exc_outcome is Outcome.THROTTLED:
            return StoreUnavailable(
                f"{what} was throttled ({label}){self._THROTTLE_HINT}; retry with backoff",
                outcome_unknown=write,
            )
        if exc_outcome is Outcome.UNAVAILABLE:
            return StoreUnavailable(f"{what} failed on the server ({label})", outcome_unknown=write)
        return StoreError(f"{what} failed ({label})")

    # -- what each store supplies ------------------------------------------------------------

    @abc.abstractmethod
    def _namespace_root(self) -> str:
        """What the bucket's name is unique within (endpoint, project, account)."""

    @abc.abstractmethod
    def _read_condition(self, version: str) -> str | None:
        """``version`` as the store would return it, or ``None`` if no object can be at it."""

    @abc.abstractmethod
    def _write_condition(self, key: str, version: str) -> Any:
        """What the SDK takes as "only if at ``version``".

        :raises ConditionFailed: no object can be at ``version`` (no request is sent).
        """

    @abc.abstractmethod
    def _fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        """One read of object ``name``; with ``known``, sent as "only if no longer at it". An
        absent object is ``None`` and a "not modified" answer :data:`NOT_MODIFIED`."""

    @abc.abstractmethod
    def _put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        """Write ``data`` to ``name`` if absent (``condition`` is ``None``) or at ``condition``;
        return the new version."""

    @abc.abstractmethod
    def _remove(self, name: str, condition: Any) -> None:
        """Delete ``name`` if it is at ``condition``."""

    @abc.abstractmethod
    def _list_names(self, full_prefix: str) -> Iterable[str]:
        """Every object name that starts with ``full_prefix`` (each page counted but the first)."""

    @abc.abstractmethod
    def _translate(self, exc: Exception, op: str, key: str) -> PriorityLockError:
        """Our error for what the SDK raised during ``op`` (a write's may be outcome-unknown)."""


# -- secrets in the SDKs' own logs --------------------------------------------------------------

# The HTTP libraries under the SDKs log each request line (query included) and botocore its
# headers and canonical request, at DEBUG: a SAS signature, a presigned URL's signature or a
# session token would show.
_SDK_LOGGERS = (
    "urllib3.connectionpool",
    "urllib3.util.retry",
    "botocore.endpoint",
    "botocore.auth",
)
_QUERY_SECRET = re.compile(  # in a query (name=value), or a canonical header (name:value)
    r"(?i)\b((?:sig|signature|x-amz-signature|x-amz-security-token|x-amz-credential"
    r"|x-goog-signature|x-goog-credential|access_token|token)=|x-amz-security-token:)"
    r"[^&\s\"'#>]+"
)
_HEADER_SECRET = re.compile(
    r"(?i)(['\"](?:x-amz-security-token|authorization)['\"]\s*:\s*b?)(['\"])[^'\"]*\2"
)
_MARKS = ("sig", "token", "credential", "authorization")
_scrub_lock = threading.Lock()


class _ScrubSecrets(logging.Filter):
    """Blanks signatures, tokens and credentials in the SDKs' DEBUG request lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        lowered = message.lower()
        if any(mark in lowered for mark in _MARKS):
            message = _QUERY_SECRET.sub(r"\1REDACTED", message)
            record.msg = _HEADER_SECRET.sub(r"\1\2REDACTED\2", message)
            record.args = None
        return True


def scrub_sdk_logs() -> None:
    """Add :class:`_ScrubSecrets` to the SDKs' request loggers, once per process."""
    with _scrub_lock:
        for name in _SDK_LOGGERS:
            logger = logging.getLogger(name)
            if not any(isinstance(f, _ScrubSecrets) for f in logger.filters):
                logger.addFilter(_ScrubSecrets())


def untrusted_certificate(exc: BaseException | None) -> bool:
    """Whether ``exc`` is, or came from, a failed check of the server's TLS certificate (the
    clients raise their own error while handling ssl's, or wrap its text)."""
    for _ in range(4):
        if exc is None:
            return False
        if isinstance(exc, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def untrusted_error(what: str) -> StoreAccessError:
    """Our error for a server certificate that was not trusted: saying how to trust its CA."""
    return StoreAccessError(
        f"{what}: the server's TLS certificate was not trusted; name its CA with the option"
        " ca_certs (a PEM file) or SSL_CERT_FILE"
    )


# -- shared checks -----------------------------------------------------------------------------


def check_timeouts(label: str, connect_timeout: float, read_timeout: float) -> tuple[float, float]:
    """The two timeouts as floats.

    :raises ConfigError: either is not a positive number of seconds.
    """
    for name, value in (("connect_timeout", connect_timeout), ("read_timeout", read_timeout)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise ConfigError(f"{label} {name} must be a positive number of seconds, got {value!r}")
    return float(connect_timeout), float(read_timeout)


def validate_endpoint(label: str, endpoint: str, what: str = "endpoint") -> str:
    """``endpoint`` if it is ``http(s)://HOST[:PORT][/PATH]``, without credentials, query or
    fragment.

    A query or user-info could carry a secret (a SAS signature, a session token) that an SDK
    would put in its exceptions and its DEBUG log: refused, and the URL is never echoed.

    :raises ConfigError: anything else.
    """
    try:
        parts = urllib.parse.urlsplit(endpoint)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except (ValueError, TypeError, AttributeError) as exc:
        raise ConfigError(f"{label} {what} is not a URL ({type(exc).__name__})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or "@" in parts.netloc:
        raise ConfigError(
            f"{label} {what} must be http(s)://HOST[:PORT] and must not carry credentials"
        )
    if parts.query or parts.fragment or endpoint.endswith(("?", "#")):
        raise ConfigError(
            f"{label} {what} must not have a query or a fragment (they may hold secrets, which"
            " belong in the credentials)"
        )
    return endpoint


def parse_store_url(
    parts: urllib.parse.SplitResult,
    options: dict[str, str],
    *,
    known: tuple[str, ...],
    holder: str,
    credentials_hint: str,
    port_hint: str,
) -> tuple[str, str, Timeouts]:
    """The holder's name, the prefix and the timeouts given in a cloud store URL.

    :raises ConfigError: an unknown or empty option (named), credentials or a port in the URL, no
        holder name, a fragment, or a timeout that is not a number.
    """
    scheme = check_url_options(parts, options, known)
    if "@" in parts.netloc:
        raise ConfigError(f"{scheme}:// store URLs must not carry credentials; {credentials_hint}")
    name = parts.netloc
    if not name:
        raise ConfigError(
            f"{scheme}:// store URL needs a {holder} name: {scheme}://{holder.upper()}/PREFIX"
        )
    if ":" in name:
        raise ConfigError(
            f"{scheme}:// store URL takes a {holder} name, not host:port ({name!r}); {port_hint}"
        )
    return name, urllib.parse.unquote(parts.path), url_timeouts(scheme, options)


#: The options of a TLS store URL (``rediss://``, ``zks://``, ``etcds://``): PEM files.
TLS_FILES = ("ca_certs", "client_cert", "client_key")


def check_url_options(
    parts: urllib.parse.SplitResult,
    options: dict[str, str],
    known: tuple[str, ...],
    *,
    may_be_empty: tuple[str, ...] = (),
) -> str:
    """The URL's scheme (lower case), once every option is one of ``known`` and given a value
    (but those of ``may_be_empty``), and there is no fragment.

    :raises ConfigError: an unknown or empty option (named), or a fragment.
    """
    scheme = parts.scheme.lower()
    for name in sorted(options):
        if name not in known:
            raise ConfigError(
                f"unknown {scheme}:// store URL option {name!r}; known options: {', '.join(known)}"
            )
        if not options[name] and name not in may_be_empty:
            raise ConfigError(f"{scheme}:// store URL option {name!r} is empty")
    if parts.fragment:
        raise ConfigError(f"{scheme}:// store URL must not have a #fragment")
    return scheme


def url_seconds(scheme: str, options: dict[str, str], name: str, default: float) -> float:
    """The option ``name`` of a store URL, a number of seconds; ``default`` when not given.

    :raises ConfigError: it is not a number.
    """
    if name not in options:
        return default
    try:
        return float(options[name])
    except ValueError:
        raise ConfigError(
            f"{scheme}:// store URL option {name!r} must be a number of seconds,"
            f" got {options[name]!r}"
        ) from None


def url_timeouts(scheme: str, options: dict[str, str]) -> Timeouts:
    """The ``connect_timeout`` and ``read_timeout`` options of a store URL, or the defaults.

    :raises ConfigError: one is not a number.
    """
    return Timeouts(
        connect_timeout=url_seconds(scheme, options, "connect_timeout", DEFAULT_CONNECT_TIMEOUT),
        read_timeout=url_seconds(scheme, options, "read_timeout", DEFAULT_READ_TIMEOUT),
    )


def url_credentials(
    scheme: str, netloc: str, *, needs_user: bool
) -> tuple[str | None, str | None, str]:
    """A URL's ``[USER:PASSWORD@]HOSTS``: the user name and password (percent-decoded; both
    ``None`` without an ``@``) and the hosts.

    :raises ConfigError: credentials without a ``:``, or without a user name where
        ``needs_user``.
    """
    userinfo, at, hosts = netloc.rpartition("@")
    if not at:
        return None, None, hosts
    user, colon, secret = userinfo.partition(":")
    if not colon or (needs_user and not user):
        raise ConfigError(f"{scheme}:// store URL credentials must be USER:PASSWORD@")
    return urllib.parse.unquote(user), urllib.parse.unquote(secret), hosts


class TLSFiles(TypedDict):
    """A store's TLS files (PEM), as its constructor takes them; ``None``: not given."""

    ca_certs: str | None
    client_cert: str | None
    client_key: str | None


def url_tls_files(options: dict[str, str]) -> TLSFiles:
    """The TLS files given in a store URL's options (:data:`TLS_FILES`)."""
    return TLSFiles(
        ca_certs=options.get("ca_certs"),
        client_cert=options.get("client_cert"),
        client_key=options.get("client_key"),
    )


def check_tls_files(
    label: str, scheme: str, tls: bool, files: tuple[str | None, str | None, str | None]
) -> None:
    """A store's TLS ``files`` (``ca_certs``, ``client_cert``, ``client_key``) make sense: given
    only with ``tls`` (the ``scheme``, e.g. ``rediss``), and a client key only with its
    certificate.

    :raises ConfigError: they don't.
    """
    _, client_cert, client_key = files
    if not tls and files != (None, None, None):
        raise ConfigError(f"{label} ca_certs, client_cert and client_key are for TLS ({scheme}://)")
    if client_key is not None and client_cert is None:
        raise ConfigError(f"{label} client_key needs client_cert")
