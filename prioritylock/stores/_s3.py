"""S3Store: lease documents in an S3 (or S3-compatible) bucket, changed by conditional writes.

The five seam operations map onto S3 requests one to one:

==========  =================================================  ====================
operation   request                                            version token
==========  =================================================  ====================
read        ``GetObject``                                      the ``ETag`` header
create      ``PutObject`` with ``If-None-Match: *``            the new ``ETag``
replace     ``PutObject`` with ``If-Match: <etag>``            the new ``ETag``
delete      ``DeleteObject`` with ``If-Match: <etag>``         --
list        ``ListObjectsV2``, one request per page of 1000    --
==========  =================================================  ====================

``read_if_changed`` is ``GetObject`` with ``If-None-Match: <etag>``: an unchanged object costs a
304 without a body (a store that ignores the header sends the body, and the ETag tells).

Two decisions shape this module:

- **botocore never retries.** A retried conditional write whose first attempt landed comes back as
  412, which would read as "somebody else won". The client is built with one attempt per request,
  and every failure that may hide a landed write raises
  ``StoreUnavailable(outcome_unknown=True)``; the lock retries with its own backoff and decides by
  reading the document back. A client passed in by the caller may retry: a failed condition that
  follows an SDK retry is reported as outcome-unknown for the same reason.
- **Errors are translated in one place**, :func:`_translate`, and always chained.

Versions are the ETags S3 returns, always in their quoted form (``"9dd4..."``) whether a store
quotes them or not; ``If-Match`` gets them the same way. S3 ETags are content hashes: equal bytes
give equal versions, so the lease carries a nonce that makes every write's bytes differ.

Credentials live only inside the boto3 client: they are never stored on the store, and never
appear in an error message or a ``repr``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from typing import Any

from prioritylock.stores._registry import missing_extra

try:
    # botocore (which boto3 brings) is all this module needs: a botocore client is what
    # boto3.client("s3") returns, without boto3's transfer helpers.
    import botocore.config
    import botocore.exceptions
    import botocore.session
    from botocore.handlers import add_expect_header
except ImportError as _exc:  # pragma: no cover - exercised only without the extra
    raise missing_extra("S3 stores", "s3", _exc) from None

from prioritylock._errors import (
    ConfigError,
    PriorityLockError,
    StoreAccessError,
    StoreError,
    StoreUnavailable,
)
from prioritylock._scheduler import DEFAULT_WORKERS
from prioritylock.stores._base import NOT_MODIFIED, ReadResult, StoreCapabilities, Versioned
from prioritylock.stores._cloud import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_READ_TIMEOUT,
    WRITES,
    CloudStore,
    HttpClassifier,
    NativeIO,
    Outcome,
    parse_store_url,
    validate_endpoint,
)
from prioritylock.stores._log import log

__all__ = ["S3Store", "store_from_url"]

ADDRESSING_STYLES = ("auto", "path", "virtual")
#: How an asyncio lock sends this store's requests: "native" on obstore (an error if it is not
#: installed), "threads" on boto3 in a thread pool, "auto" native if obstore is installed.
ASYNC_IO = ("auto", "native", "threads")

# Permissive on purpose: S3-compatible stores and legacy us-east-1 buckets accept more than
# today's AWS rules; the store itself rejects what it can't take (InvalidBucketName).
_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._\-]{1,254}$")

# What a quoted ETag can be: printable ASCII without inner quotes, as a header value must be.
_ETAG_RE = re.compile(r'^"[\x21\x23-\x7e]{0,256}"$')

# What each refusal means, and what the user should check. Never include the server's own
# message: a SignatureDoesNotMatch body may echo the string-to-sign and the access key id.
_ACCESS_HINTS = {
    "NoSuchBucket": "the bucket does not exist: check the bucket name, the endpoint and the region",
    "InvalidAccessKeyId": (
        "the access key id is unknown to the store: check AWS_ACCESS_KEY_ID or the profile"
    ),
    "SignatureDoesNotMatch": (
        "the request signature was refused: check the secret access key (for S3-compatible "
        "stores also the region and the addressing style)"
    ),
    "ExpiredToken": "the session token has expired: refresh the credentials",
    "TokenRefreshRequired": "the session token has expired: refresh the credentials",
    "InvalidToken": "the session token is invalid: check AWS_SESSION_TOKEN or the profile",
    "RequestTimeTooSkewed": "this host's clock is too far from the store's: fix the clock (NTP)",
    "AllAccessDisabled": "all access to the bucket is disabled: check the bucket's account",
    "AccountProblem": "the account has a problem: check the account's status",
    "InvalidBucketName": "the bucket name is not valid for this store: check the bucket name",
}


class S3Store(CloudStore):
    """Objects under ``prefix`` in an S3 bucket; shared by every process and host that opens it.

    Keys are stored at ``prefix + key`` (a non-empty prefix always ends with ``/``); ``list``
    strips the prefix again. Version tokens are the quoted ETags S3 returns.

    Pass either client options (``endpoint_url``, ``region``, ``profile``, ``addressing_style``,
    explicit credentials, timeouts; missing credentials come from boto3's default chain), or an
    existing boto3 S3 ``client`` (which the store then does not close). A client built here makes
    exactly one attempt per request and never retries: the lock layer retries and reconciles.

    ``async_io`` says how an :class:`~prioritylock.AsyncLock` sends the reads, creates and
    replaces it repeats: ``"native"`` through obstore's async client (configured from the boto3
    client's endpoint, region, addressing, timeouts, CA bundle and resolved credentials;
    ``ConfigError`` where it can't be used), ``"threads"`` through boto3 on a thread pool,
    ``"auto"`` (the default) native where it can be used: obstore is installed, and boto3 does
    nothing obstore wouldn't (follow region redirects on AWS with no region configured, or use
    acceleration, dual-stack or FIPS endpoints, or proxies). Deletes and lists always go
    through boto3, and so does everything with a ``client`` passed in.

    Every request attempt counts in :attr:`stats`.

    :raises ConfigError: an invalid bucket name, prefix, option, endpoint or unknown profile, or
        client options given together with ``client``.
    """

    _LABEL = "S3"
    _SCHEME = "s3"
    _CAPABILITIES = StoreCapabilities(
        shared_across_processes=True,
        shared_across_hosts=True,
        conditional_delete=True,
        unique_versions=False,  # ETags are MD5 hashes of the content
    )
    _SDK_ERRORS = (botocore.exceptions.ClientError, botocore.exceptions.BotoCoreError)
    _CLASSIFIER = HttpClassifier(
        condition_codes=frozenset(
            {"PreconditionFailed", "ConditionalRequestConflict", "NoSuchKey"}
        ),
        throttle_statuses=frozenset({429, 503}),
        throttle_codes=frozenset(
            {
                "SlowDown",
                "Throttling",
                "ThrottlingException",
                "TooManyRequests",
                "RequestLimitExceeded",
            }
        ),
        unavailable_statuses=frozenset(),
        unavailable_codes=frozenset(
            {"RequestTimeout", "InternalError", "ServiceUnavailable", "OperationAborted"}
        ),
    )
    _ACCESS_HINT = (
        "check the credentials and that they grant s3:GetObject, s3:PutObject, s3:DeleteObject "
        "and s3:ListBucket on the bucket and prefix"
    )

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        profile: str | None = None,
        addressing_style: str | None = None,
        aws_access_key_id: str | None = None,
        aws_secret_access_key: str | None = None,
        aws_session_token: str | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        client: Any = None,
        async_io: str = "auto",
    ) -> None:
        if not isinstance(bucket, str) or not _BUCKET_RE.match(bucket):
            raise ConfigError(
                f"S3 bucket name must be 2-255 letters, digits, '.', '-' or '_', got {bucket!r}"
            )
        super().__init__(bucket, prefix, connect_timeout, read_timeout)
        self._local = threading.local()
        given: dict[str, object] = {
            "endpoint_url": endpoint_url,
            "region": region,
            "profile": profile,
            "addressing_style": addressing_style,
            "aws_access_key_id": aws_access_key_id,
            "aws_secret_access_key": aws_secret_access_key,
            "aws_session_token": aws_session_token,
        }
        if async_io not in ASYNC_IO:
            raise ConfigError(f"S3 async_io must be one of {list(ASYNC_IO)}, got {async_io!r}")
        if async_io == "native" and client is not None:
            raise ConfigError(
                "S3 async_io='native' needs the store to make its own client, not client="
            )
        seen: dict[str, Any] = {}
        self._take_client(
            client,
            given,
            lambda: _make_client(
                endpoint_url=endpoint_url,
                region=region,
                profile=profile,
                addressing_style=addressing_style,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                timeouts=self._timeouts,
                seen=seen,
            ),
        )
        self._native_lock = threading.Lock()
        self._native: NativeIO | None = None
        self._native_errors: tuple[type[Exception], ...] = ()
        self._failure: Callable[[Exception], Any] = _no_failure
        # What the native client is made from, until it is (None: the store has none).
        self._native_from: dict[str, Any] | None = None
        if self._owns_client and async_io != "threads":
            self._native_from = {
                "endpoint": endpoint_url,
                "addressing": addressing_style,
                "required": async_io == "native",
                **seen,
            }
            if async_io == "native":
                try:
                    self._make_native()  # now, so that what stops it is a ConfigError here
                except ConfigError:
                    self._client.close()
                    raise
        self._endpoint = _redact_endpoint(str(getattr(self._client.meta, "endpoint_url", "")))
        # One count per attempt: request-created fires once per attempt, retries included.
        self._handler_id = f"prioritylock-s3-stats-{id(self)}"
        self._client.meta.events.register(
            "request-created.s3", self._count_attempt, unique_id=self._handler_id
        )
        if self._owns_client:
            # botocore sends a PUT's headers alone ("Expect: 100-continue") and its body only
            # once S3 answers "100 Continue": a round trip more on every write, which a lease
            # of a few hundred bytes never needs (moto: 7 of a write's 14 ms).
            self._client.meta.events.unregister("before-call.s3", add_expect_header)

    @property
    def bucket(self) -> str:
        return self._holder

    @property
    def client(self) -> Any:
        """The boto3 S3 client (for instrumentation: ``client.meta.events``)."""
        return self._client

    def close(self) -> None:
        """Close the client's connections if this store made the client; safe to call twice."""
        with self._native_lock:
            self._native = self._native_from = None
        self._client.meta.events.unregister(
            "request-created.s3", self._count_attempt, unique_id=self._handler_id
        )
        super().close()

    # -- requests ------------------------------------------------------------------------------

    def _fetch(self, key: str, name: str, known: str | None) -> ReadResult:
        conditions = {} if known is None else {"IfNoneMatch": known}
        try:
            response = self._client.get_object(Bucket=self._holder, Key=name, **conditions)
            body = response["Body"]
            try:
                data = body.read()
            finally:
                body.close()
        except botocore.exceptions.ClientError as exc:
            if _error_code(exc) == "NoSuchKey":
                return None
            if known is not None and _not_modified(exc):
                return NOT_MODIFIED
            raise
        return Versioned(bytes(data), self._etag(response, "read", key))

    def _put(self, op: str, key: str, name: str, data: bytes, condition: Any) -> str:
        match = {"IfNoneMatch": "*"} if condition is None else {"IfMatch": condition}
        response = self._client.put_object(Bucket=self._holder, Key=name, Body=data, **match)
        return self._etag(response, op, key)

    def _remove(self, name: str, condition: Any) -> None:
        self._client.delete_object(Bucket=self._holder, Key=name, IfMatch=condition)

    def _list_names(self, full_prefix: str) -> Iterator[str]:
        pages = self._client.get_paginator("list_objects_v2").paginate(
            Bucket=self._holder, Prefix=full_prefix
        )
        for page in pages:
            yield from (str(item["Key"]) for item in page.get("Contents", ()))

    def _read_condition(self, version: str) -> str | None:
        """``version`` as an ``If-None-Match`` value, or ``None`` if no object can be at it (a
        token that can't be an ETag: then a plain read answers the same, in one request too)."""
        quoted = _quoted(version)
        return quoted if _ETAG_RE.match(quoted) else None

    def _write_condition(self, key: str, version: str) -> str:
        return _quoted(version)

    # -- native async I/O ----------------------------------------------------------------------

    def _native_io(self) -> NativeIO | None:
        if self._native is None and self._native_from is not None:
            with self._native_lock:
                if self._native is None and self._native_from is not None:
                    self._make_native()
        return self._native

    def _make_native(self) -> None:
        """Make the native client from the settings in ``_native_from`` (hold ``_native_lock``,
        or be the constructor), or leave the store on the thread pool: where obstore is not
        installed, boto3 found no credentials, or boto3 is configured in a way obstore would
        not follow (:func:`_boto3_only`).

        :raises ConfigError: ``async_io="native"`` and the store can't have a native client.
        """
        settings = self._native_from
        assert settings is not None
        self._native_from = None
        required = settings["required"]
        try:
            from prioritylock.stores import _s3_native
        except ImportError:
            self._no_native(required, "obstore is not installed: pip install 'prioritylock[s3]'")
            return
        # What the boto3 client resolved when it was made (keys given, or its default chain).
        credentials = self._client._get_credentials()
        reason = _boto3_only(self._client, settings)
        if reason is None and credentials is None:
            reason = "boto3 found no credentials"
        if reason is not None:
            self._no_native(required, reason)
            return
        endpoint = settings["endpoint"] or str(self._client.meta.endpoint_url)
        addressing = settings["addressing"] or (self._client.meta.config.s3 or {}).get(
            "addressing_style"
        )
        on_aws = _is_aws(endpoint)
        roots = None
        if settings.get("ca_bundle") and endpoint.startswith("https://"):
            try:
                with open(settings["ca_bundle"], "rb") as bundle:
                    roots = bundle.read()
            except OSError as exc:
                self._no_native(required, f"boto3's CA bundle can't be read ({type(exc).__name__})")
                return
        try:
            native = _s3_native.ObstoreS3(
                self._holder,
                no_version=self._no_version,
                endpoint=endpoint,
                region=str(self._client.meta.region_name or "us-east-1"),
                virtual=addressing == "virtual"
                or (
                    addressing in (None, "auto")
                    and on_aws
                    and _DNS_BUCKET.match(self._holder) is not None
                ),
                credentials=credentials,
                timeouts=self._timeouts,
                roots=roots,
            )
        except _s3_native.ERRORS as exc:
            reason = f"obstore refused the configuration ({type(exc).__name__})"
            self._no_native(required, reason, level=logging.WARNING)
            return
        # The translation first: another thread may see _native as soon as it is set.
        self._native_errors = _s3_native.ERRORS
        self._failure = _s3_native.failure
        self._native = native

    def _no_native(self, required: bool, reason: str, *, level: int = logging.DEBUG) -> None:
        """The store stays on boto3 threads for ``reason``.

        :raises ConfigError: ``required`` (``async_io="native"``), saying why.
        """
        if required:
            raise ConfigError(f"S3 async_io='native' can't be used here: {reason}")
        log.log(level, "%r: AsyncLock requests go through boto3 threads: %s", self, reason)

    # -- the rest ------------------------------------------------------------------------------

    def _namespace_root(self) -> str:
        return str(self._client.meta.endpoint_url)

    def _repr_fields(self) -> list[str]:
        endpoint = [f"endpoint={self._endpoint!r}"] if self._endpoint else []
        return [*super()._repr_fields(), *endpoint]

    def _location_detail(self) -> str:
        return f" at {self._endpoint}" if self._endpoint else ""

    @contextlib.contextmanager
    def _counting(self, kind: str) -> Iterator[None]:
        # Marks this thread as inside one request of ``kind``: _count_attempt counts each attempt.
        previous = getattr(self._local, "kind", None)
        self._local.kind = kind
        try:
            yield
        finally:
            self._local.kind = previous

    def _count_attempt(self, **_kwargs: Any) -> None:
        # Only this store's own calls, on this thread, are counted (a caller's client may be
        # shared with other code).
        kind = getattr(self._local, "kind", None)
        if kind is not None:
            self._stats.count(kind)

    def _etag(self, response: Any, op: str, key: str) -> str:
        etag = response.get("ETag")
        if not etag:
            raise self._no_version(op, key, "ETag")
        return _quoted(str(etag))

    def _answered(
        self, op: str, key: str, status: int, code: str, retries: int
    ) -> PriorityLockError:
        """Our error for an HTTP answer ``status`` with S3 error ``code`` ("" if none), after
        ``retries`` retries of the request by the SDK."""
        what = self._describe_call(op, key)
        outcome = self._CLASSIFIER.outcome(status, code, write=op in WRITES)
        if outcome is Outcome.CONDITION_FAILED and retries:
            # An earlier attempt of this very write may have landed and made the condition
            # fail for the retry: only a read-back can tell.
            return StoreUnavailable(
                f"{what}: condition failed ({code}) after {retries} SDK retr"
                f"{'y' if retries == 1 else 'ies'}; an earlier attempt may have landed",
                outcome_unknown=True,
            )
        if outcome is not Outcome.CONDITION_FAILED and code in _ACCESS_HINTS:
            return StoreAccessError(
                f"{what} refused ({code}, HTTP {status}): {_ACCESS_HINTS[code]}"
            )
        if outcome is Outcome.UNAVAILABLE and status == 501:
            return StoreError(
                f"{what} failed: the store does not implement this request ({code}, HTTP 501);"
                " it needs conditional writes (If-None-Match / If-Match)"
            )
        if outcome is Outcome.FAILED and code == "KeyTooLongError":
            return ConfigError(f"{what} failed: the key is too long for this store")
        detail = _condition_detail(op, code)
        return self._http_error(outcome, op, key, f"{code}, HTTP {status}", detail)

    def _translate(self, exc: Exception, op: str, key: str) -> PriorityLockError:
        """The one place where boto3/botocore errors become prioritylock errors: the S3 codes,
        and what a failure of each kind of the SDK's says about a write's outcome."""
        write = op in WRITES
        what = self._describe_call(op, key)
        if isinstance(exc, botocore.exceptions.ClientError):
            return self._answered(
                op, key, _http_status(exc), _error_code(exc), _retry_attempts(exc)
            )
        if self._native_errors and isinstance(exc, self._native_errors):
            seen = self._failure(exc)
            if seen.status:
                return self._answered(op, key, seen.status, seen.code, 0)
            if seen.kind == "unsent":
                return self._not_sent(op, key, exc)
            if seen.kind == "credentials":
                return StoreAccessError(
                    f"{what}: AWS credentials could not be loaded ({type(exc).__name__}); check"
                    " the environment variables and the profile"
                )
            # Lost on the way, or a failure not understood: a write may have landed.
            return self._lost(op, key, exc)
        if isinstance(exc, botocore.exceptions.NoCredentialsError):
            return StoreAccessError(
                f"{what}: no AWS credentials found; set AWS_ACCESS_KEY_ID and"
                " AWS_SECRET_ACCESS_KEY, a profile (AWS_PROFILE or ?profile=NAME), or run with an"
                " instance or task role"
            )
        if isinstance(
            exc,
            (
                botocore.exceptions.PartialCredentialsError,
                botocore.exceptions.CredentialRetrievalError,
            ),
        ):
            return StoreAccessError(
                f"{what}: AWS credentials are incomplete or could not be loaded"
                f" ({type(exc).__name__}); check the environment variables and the profile"
            )
        if isinstance(exc, botocore.exceptions.ParamValidationError):
            return ConfigError(f"{what}: the request was invalid ({exc})")
        if isinstance(exc, botocore.exceptions.SSLError):
            return StoreUnavailable(
                f"{what}: TLS failed ({type(exc).__name__}); check the endpoint URL and the CA"
                " bundle",
                outcome_unknown=write,
            )
        if isinstance(exc, botocore.exceptions.ConnectionError):
            # Connect refused or timed out (or the proxy refused): the request never left.
            return self._not_sent(op, key, exc)
        if isinstance(exc, botocore.exceptions.HTTPClientError):
            # Read timeout, connection closed or reset mid-request: the store may have applied it.
            return self._lost(op, key, exc)
        return StoreError(f"{what} failed ({type(exc).__name__})")


def _error_code(exc: Exception) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return str(exc.response.get("Error", {}).get("Code", "") or "")
    return ""


def _http_status(exc: botocore.exceptions.ClientError) -> int:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return int(status or 0)


def _retry_attempts(exc: botocore.exceptions.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)


def _condition_detail(operation: str, code: str) -> str:
    if code == "ConditionalRequestConflict":
        return "a conflicting conditional write was in progress"
    if code == "NoSuchKey":
        return "absent"
    if operation == "create":
        return "already exists"
    return "absent or at another version"


def _not_modified(exc: Exception) -> bool:
    """Whether a conditional GetObject was answered 304 (botocore: a ClientError, code "304")."""
    if not isinstance(exc, botocore.exceptions.ClientError):
        return False
    return _http_status(exc) == 304 or _error_code(exc) in ("304", "NotModified")


def _quoted(etag: str) -> str:
    """The ETag in its quoted form, however the store or caller spelled it."""
    return '"' + etag.strip().strip('"') + '"'


def _no_failure(exc: Exception) -> Any:
    raise AssertionError("no native client") from exc


# A bucket name that can be the first label of a TLS host name (no dots): virtual-hosted on AWS.
_DNS_BUCKET = re.compile(r"^[a-z0-9][a-z0-9-]{1,61}[a-z0-9]$")


def _boto3_only(client: Any, seen: dict[str, Any]) -> str | None:
    """Why the boto3 ``client`` sends its requests in a way obstore would not (so an AsyncLock
    must use boto3 on threads), or ``None``."""
    config = client.meta.config
    s3 = config.s3 or {}
    if s3.get("use_accelerate_endpoint"):
        return "boto3 uses S3 Transfer Acceleration"
    if s3.get("use_dualstack_endpoint") or getattr(config, "use_dualstack_endpoint", None):
        return "boto3 uses dual-stack endpoints"
    if getattr(config, "use_fips_endpoint", None):
        return "boto3 uses FIPS endpoints"
    if config.proxies:
        return "boto3 has proxies configured"
    if _is_aws(str(client.meta.endpoint_url)) and not seen.get("region"):
        return "no region is configured, and boto3 follows S3's redirects to the bucket's region"
    return None


def _is_aws(endpoint: str) -> bool:
    host = urllib.parse.urlsplit(endpoint).hostname or ""
    return host.endswith((".amazonaws.com", ".amazonaws.com.cn"))


def _redact_endpoint(endpoint: str) -> str:
    """The endpoint without any user-info (which could carry credentials)."""
    if not endpoint:
        return ""
    parts = urllib.parse.urlsplit(endpoint)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# Building a botocore session from scratch costs ~250 ms (it parses the service models); one
# that borrows an already-warm data loader makes a client in ~20 ms. Each store still gets its
# own session, so credentials and config files are resolved afresh for every store.
_client_lock = threading.Lock()
_shared_loader: Any = None


def _new_session(profile: str | None) -> Any:
    """A new botocore session for ``profile`` that shares the parsed models; hold _client_lock."""
    global _shared_loader
    session = botocore.session.Session(profile=profile)
    if _shared_loader is None:
        _shared_loader = session.get_component("data_loader")
    else:
        session.register_component("data_loader", _shared_loader)
    return session


def _make_client(
    *,
    endpoint_url: str | None,
    region: str | None,
    profile: str | None,
    addressing_style: str | None,
    aws_access_key_id: str | None,
    aws_secret_access_key: str | None,
    aws_session_token: str | None,
    timeouts: tuple[float, float],
    seen: dict[str, Any] | None = None,
) -> Any:
    """A boto3 (botocore) S3 client that makes one attempt per request; ``seen`` (if given)
    gets what the AWS configuration set that the client doesn't show: ``region`` and
    ``ca_bundle`` (each ``None`` if not set).

    :raises ConfigError: an invalid option, endpoint or an unknown profile.
    """
    if addressing_style is not None and addressing_style not in ADDRESSING_STYLES:
        raise ConfigError(
            f"S3 addressing style must be one of {list(ADDRESSING_STYLES)},"
            f" got {addressing_style!r}"
        )
    if endpoint_url is not None:
        validate_endpoint("S3", endpoint_url)
    if (aws_access_key_id is None) != (aws_secret_access_key is None) or (
        aws_session_token is not None and aws_access_key_id is None
    ):
        raise ConfigError(
            "S3 credentials need both aws_access_key_id and aws_secret_access_key (and"
            " optionally aws_session_token), or none of them"
        )
    config = botocore.config.Config(
        connect_timeout=timeouts[0],
        read_timeout=timeouts[1],
        # total_max_attempts counts the first attempt ("max_attempts" would count retries).
        retries={"total_max_attempts": 1, "mode": "standard"},
        s3={"addressing_style": addressing_style} if addressing_style else None,
        user_agent_extra="prioritylock",
        # One connection per heartbeat worker: a smaller pool would open and discard connections
        # (and log a warning each time) when many leases renew at once.
        max_pool_connections=DEFAULT_WORKERS,
    )
    try:
        with _client_lock:
            session = _new_session(profile)
            if seen is not None:
                seen["region"] = region or session.get_config_variable("region")
                seen["ca_bundle"] = session.get_config_variable("ca_bundle")
            return session.create_client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region,
                aws_access_key_id=aws_access_key_id,
                aws_secret_access_key=aws_secret_access_key,
                aws_session_token=aws_session_token,
                config=config,
            )
    except botocore.exceptions.ProfileNotFound as exc:
        raise ConfigError(f"AWS profile {profile!r} is not in the AWS config files") from exc
    except (botocore.exceptions.BotoCoreError, ValueError) as exc:
        raise ConfigError(f"could not configure the S3 client ({type(exc).__name__})") from exc


_URL_OPTIONS = (
    "addressing",
    "async_io",
    "connect_timeout",
    "endpoint",
    "profile",
    "read_timeout",
    "region",
)


def store_from_url(parts: urllib.parse.SplitResult, options: dict[str, str]) -> S3Store:
    """The store for ``s3://BUCKET/PREFIX?endpoint=...&region=...&profile=...&addressing=...``.

    Options: ``endpoint`` (an ``http(s)://`` URL, for S3-compatible stores), ``region``,
    ``profile``, ``addressing`` (``path``, ``virtual`` or ``auto``), ``connect_timeout`` and
    ``read_timeout`` (seconds), ``async_io`` (``auto``, ``native`` or ``threads``: how an
    asyncio lock sends its requests). Credentials never go in the URL: they come from boto3's
    default chain (environment, profile, instance or task role).

    :raises ConfigError: no bucket name, credentials or a port in the URL, an unknown or empty
        option (named), or an invalid value.
    """
    bucket, prefix, timeouts = parse_store_url(
        parts,
        options,
        known=_URL_OPTIONS,
        holder="bucket",
        credentials_hint="use AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile"
        " (?profile=NAME) or an instance role",
        port_hint="give the server as ?endpoint=http://HOST:PORT",
    )
    return S3Store(
        bucket,
        prefix,
        endpoint_url=options.get("endpoint"),
        region=options.get("region"),
        profile=options.get("profile"),
        addressing_style=options.get("addressing"),
        async_io=options.get("async_io", "auto"),
        **timeouts,
    )
