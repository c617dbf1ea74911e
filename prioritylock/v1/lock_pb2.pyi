import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LockRequest(_message.Message):
    __slots__ = ("immediate", "resource_id", "ttl", "store_name", "owner", "message", "priority", "cleanup_timeout", "waiting_timeout", "forceful", "timeout")
    IMMEDIATE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    STORE_NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    WAITING_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    FORCEFUL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    immediate: bool
    resource_id: str
    ttl: _duration_pb2.Duration
    store_name: str
    owner: str
    message: str
    priority: int
    cleanup_timeout: _duration_pb2.Duration
    waiting_timeout: _duration_pb2.Duration
    forceful: bool
    timeout: _duration_pb2.Duration
    def __init__(self, immediate: _Optional[bool] = ..., resource_id: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., store_name: _Optional[str] = ..., owner: _Optional[str] = ..., message: _Optional[str] = ..., priority: _Optional[int] = ..., cleanup_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., waiting_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., forceful: _Optional[bool] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class LockServerStream(_message.Message):
    __slots__ = ("ping", "lock_acquired", "cleanup_requested", "lost", "request_withdrawn")
    PING_FIELD_NUMBER: _ClassVar[int]
    LOCK_ACQUIRED_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_WITHDRAWN_FIELD_NUMBER: _ClassVar[int]
    ping: LockPing
    lock_acquired: LockAcquired
    cleanup_requested: CleanupRequested
    lost: LockLost
    request_withdrawn: RequestWithdrawn
    def __init__(self, ping: _Optional[_Union[LockPing, _Mapping]] = ..., lock_acquired: _Optional[_Union[LockAcquired, _Mapping]] = ..., cleanup_requested: _Optional[_Union[CleanupRequested, _Mapping]] = ..., lost: _Optional[_Union[LockLost, _Mapping]] = ..., request_withdrawn: _Optional[_Union[RequestWithdrawn, _Mapping]] = ...) -> None: ...

class LockPing(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class LockAcquired(_message.Message):
    __slots__ = ("lock_id", "fence")
    LOCK_ID_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    lock_id: str
    fence: int
    def __init__(self, lock_id: _Optional[str] = ..., fence: _Optional[int] = ...) -> None: ...

class Requestor(_message.Message):
    __slots__ = ("owner", "priority", "message", "forceful")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FORCEFUL_FIELD_NUMBER: _ClassVar[int]
    owner: str
    priority: int
    message: str
    forceful: bool
    def __init__(self, owner: _Optional[str] = ..., priority: _Optional[int] = ..., message: _Optional[str] = ..., forceful: _Optional[bool] = ...) -> None: ...

class CleanupRequested(_message.Message):
    __slots__ = ("deadline", "time_left", "requestor")
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    TIME_LEFT_FIELD_NUMBER: _ClassVar[int]
    REQUESTOR_FIELD_NUMBER: _ClassVar[int]
    deadline: _timestamp_pb2.Timestamp
    time_left: _duration_pb2.Duration
    requestor: Requestor
    def __init__(self, deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., time_left: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., requestor: _Optional[_Union[Requestor, _Mapping]] = ...) -> None: ...

class LockLost(_message.Message):
    __slots__ = ("reason",)
    REASON_FIELD_NUMBER: _ClassVar[int]
    reason: str
    def __init__(self, reason: _Optional[str] = ...) -> None: ...

class RequestWithdrawn(_message.Message):
    __slots__ = ("requestor",)
    REQUESTOR_FIELD_NUMBER: _ClassVar[int]
    requestor: Requestor
    def __init__(self, requestor: _Optional[_Union[Requestor, _Mapping]] = ...) -> None: ...

class RenewRequest(_message.Message):
    __slots__ = ("store_name", "resource_id", "lock_id")
    STORE_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_ID_FIELD_NUMBER: _ClassVar[int]
    store_name: str
    resource_id: str
    lock_id: str
    def __init__(self, store_name: _Optional[str] = ..., resource_id: _Optional[str] = ..., lock_id: _Optional[str] = ...) -> None: ...

class UnlockRequest(_message.Message):
    __slots__ = ("store_name", "resource_id", "lock_id")
    STORE_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    LOCK_ID_FIELD_NUMBER: _ClassVar[int]
    store_name: str
    resource_id: str
    lock_id: str
    def __init__(self, store_name: _Optional[str] = ..., resource_id: _Optional[str] = ..., lock_id: _Optional[str] = ...) -> None: ...

class UnlockResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ForceUnlockRequest(_message.Message):
    __slots__ = ("store_name", "resource_id", "message", "by")
    STORE_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BY_FIELD_NUMBER: _ClassVar[int]
    store_name: str
    resource_id: str
    message: str
    by: str
    def __init__(self, store_name: _Optional[str] = ..., resource_id: _Optional[str] = ..., message: _Optional[str] = ..., by: _Optional[str] = ...) -> None: ...

class ForceUnlockResponse(_message.Message):
    __slots__ = ("forced",)
    FORCED_FIELD_NUMBER: _ClassVar[int]
    forced: bool
    def __init__(self, forced: _Optional[bool] = ...) -> None: ...

class OverrideRequest(_message.Message):
    __slots__ = ("store_name", "resource_id", "message", "owner", "ttl")
    STORE_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    TTL_FIELD_NUMBER: _ClassVar[int]
    store_name: str
    resource_id: str
    message: str
    owner: str
    ttl: _duration_pb2.Duration
    def __init__(self, store_name: _Optional[str] = ..., resource_id: _Optional[str] = ..., message: _Optional[str] = ..., owner: _Optional[str] = ..., ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ("store_name", "resource_id")
    STORE_NAME_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    store_name: str
    resource_id: str
    def __init__(self, store_name: _Optional[str] = ..., resource_id: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("store_name", "prefix", "limit")
    STORE_NAME_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    store_name: str
    prefix: str
    limit: int
    def __init__(self, store_name: _Optional[str] = ..., prefix: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("locks",)
    LOCKS_FIELD_NUMBER: _ClassVar[int]
    locks: _containers.RepeatedCompositeFieldContainer[LockInfo]
    def __init__(self, locks: _Optional[_Iterable[_Union[LockInfo, _Mapping]]] = ...) -> None: ...

class LockInfo(_message.Message):
    __slots__ = ("resource_id", "key", "path", "state", "held", "fence", "owner", "message", "priority", "lease_timeout", "cleanup_timeout", "forceful", "acquired_at", "renewed_at", "expires_at", "requestor", "last_event", "last_event_by", "last_event_message", "last_event_at", "problem", "record", "waiters")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    FENCE_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    LEASE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CLEANUP_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    FORCEFUL_FIELD_NUMBER: _ClassVar[int]
    ACQUIRED_AT_FIELD_NUMBER: _ClassVar[int]
    RENEWED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    REQUESTOR_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_BY_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    LAST_EVENT_AT_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    WAITERS_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    key: str
    path: str
    state: str
    held: bool
    fence: int
    owner: str
    message: str
    priority: int
    lease_timeout: _duration_pb2.Duration
    cleanup_timeout: _duration_pb2.Duration
    forceful: bool
    acquired_at: _timestamp_pb2.Timestamp
    renewed_at: _timestamp_pb2.Timestamp
    expires_at: _timestamp_pb2.Timestamp
    requestor: Requestor
    last_event: str
    last_event_by: str
    last_event_message: str
    last_event_at: _timestamp_pb2.Timestamp
    problem: str
    record: _struct_pb2.Struct
    waiters: _containers.RepeatedCompositeFieldContainer[Waiter]
    def __init__(self, resource_id: _Optional[str] = ..., key: _Optional[str] = ..., path: _Optional[str] = ..., state: _Optional[str] = ..., held: _Optional[bool] = ..., fence: _Optional[int] = ..., owner: _Optional[str] = ..., message: _Optional[str] = ..., priority: _Optional[int] = ..., lease_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cleanup_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., forceful: _Optional[bool] = ..., acquired_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., renewed_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., expires_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., requestor: _Optional[_Union[Requestor, _Mapping]] = ..., last_event: _Optional[str] = ..., last_event_by: _Optional[str] = ..., last_event_message: _Optional[str] = ..., last_event_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., problem: _Optional[str] = ..., record: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ..., waiters: _Optional[_Iterable[_Union[Waiter, _Mapping]]] = ...) -> None: ...

class Waiter(_message.Message):
    __slots__ = ("owner", "priority", "since")
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    owner: str
    priority: int
    since: _timestamp_pb2.Timestamp
    def __init__(self, owner: _Optional[str] = ..., priority: _Optional[int] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...
