from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
EVENT_TYPE_DELETE: EventType
EVENT_TYPE_PUT: EventType
EVENT_TYPE_UNSPECIFIED: EventType
WATCH_RESYNC_REASON_COMPACTED: WatchResyncReason
WATCH_RESYNC_REASON_INCARNATION_CHANGED: WatchResyncReason
WATCH_RESYNC_REASON_UNSPECIFIED: WatchResyncReason

class DeleteRequest(_message.Message):
    __slots__ = ["expected_mod_revision", "key"]
    EXPECTED_MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    expected_mod_revision: int
    key: str
    def __init__(self, key: _Optional[str] = ..., expected_mod_revision: _Optional[int] = ...) -> None: ...

class DeleteResponse(_message.Message):
    __slots__ = ["prev_kv", "revision"]
    PREV_KV_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    prev_kv: KeyValue
    revision: int
    def __init__(self, revision: _Optional[int] = ..., prev_kv: _Optional[_Union[KeyValue, _Mapping]] = ...) -> None: ...

class Event(_message.Message):
    __slots__ = ["kv", "prev_revision", "type"]
    KV_FIELD_NUMBER: _ClassVar[int]
    PREV_REVISION_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    kv: KeyValue
    prev_revision: int
    type: EventType
    def __init__(self, type: _Optional[_Union[EventType, str]] = ..., kv: _Optional[_Union[KeyValue, _Mapping]] = ..., prev_revision: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ["key", "revision"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    key: str
    revision: int
    def __init__(self, key: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ["kv", "revision"]
    KV_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    kv: KeyValue
    revision: int
    def __init__(self, kv: _Optional[_Union[KeyValue, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class KeyValue(_message.Message):
    __slots__ = ["create_revision", "key", "mod_revision", "value", "version"]
    CREATE_REVISION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    create_revision: int
    key: str
    mod_revision: int
    value: bytes
    version: int
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., create_revision: _Optional[int] = ..., mod_revision: _Optional[int] = ..., version: _Optional[int] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ["page_size", "page_token", "prefix", "revision"]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    prefix: str
    revision: int
    def __init__(self, prefix: _Optional[str] = ..., revision: _Optional[int] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ["kvs", "next_page_token", "revision"]
    KVS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    kvs: _containers.RepeatedCompositeFieldContainer[KeyValue]
    next_page_token: str
    revision: int
    def __init__(self, kvs: _Optional[_Iterable[_Union[KeyValue, _Mapping]]] = ..., revision: _Optional[int] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class PutRequest(_message.Message):
    __slots__ = ["expected_mod_revision", "key", "value"]
    EXPECTED_MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    expected_mod_revision: int
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., expected_mod_revision: _Optional[int] = ...) -> None: ...

class PutResponse(_message.Message):
    __slots__ = ["prev_kv", "revision"]
    PREV_KV_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    prev_kv: KeyValue
    revision: int
    def __init__(self, revision: _Optional[int] = ..., prev_kv: _Optional[_Union[KeyValue, _Mapping]] = ...) -> None: ...

class RevisionMismatch(_message.Message):
    __slots__ = ["current_mod_revision", "expected_mod_revision", "key"]
    CURRENT_MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    current_mod_revision: int
    expected_mod_revision: int
    key: str
    def __init__(self, key: _Optional[str] = ..., expected_mod_revision: _Optional[int] = ..., current_mod_revision: _Optional[int] = ...) -> None: ...

class TxnCompare(_message.Message):
    __slots__ = ["key", "mod_revision"]
    KEY_FIELD_NUMBER: _ClassVar[int]
    MOD_REVISION_FIELD_NUMBER: _ClassVar[int]
    key: str
    mod_revision: int
    def __init__(self, key: _Optional[str] = ..., mod_revision: _Optional[int] = ...) -> None: ...

class TxnOp(_message.Message):
    __slots__ = ["delete", "key", "value"]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    delete: bool
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ..., delete: bool = ...) -> None: ...

class TxnRequest(_message.Message):
    __slots__ = ["compares", "ops"]
    COMPARES_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    compares: _containers.RepeatedCompositeFieldContainer[TxnCompare]
    ops: _containers.RepeatedCompositeFieldContainer[TxnOp]
    def __init__(self, compares: _Optional[_Iterable[_Union[TxnCompare, _Mapping]]] = ..., ops: _Optional[_Iterable[_Union[TxnOp, _Mapping]]] = ...) -> None: ...

class TxnResponse(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class WatchCompacted(_message.Message):
    __slots__ = ["compact_revision", "reason", "snapshot_revision"]
    COMPACT_REVISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SNAPSHOT_REVISION_FIELD_NUMBER: _ClassVar[int]
    compact_revision: int
    reason: WatchResyncReason
    snapshot_revision: int
    def __init__(self, compact_revision: _Optional[int] = ..., snapshot_revision: _Optional[int] = ..., reason: _Optional[_Union[WatchResyncReason, str]] = ...) -> None: ...

class WatchEvents(_message.Message):
    __slots__ = ["events"]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[Event]
    def __init__(self, events: _Optional[_Iterable[_Union[Event, _Mapping]]] = ...) -> None: ...

class WatchProgress(_message.Message):
    __slots__ = ["revision"]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    revision: int
    def __init__(self, revision: _Optional[int] = ...) -> None: ...

class WatchRequest(_message.Message):
    __slots__ = ["incarnation", "prefix", "start_revision"]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    START_REVISION_FIELD_NUMBER: _ClassVar[int]
    incarnation: str
    prefix: str
    start_revision: int
    def __init__(self, prefix: _Optional[str] = ..., start_revision: _Optional[int] = ..., incarnation: _Optional[str] = ...) -> None: ...

class WatchResponse(_message.Message):
    __slots__ = ["compacted", "events", "progress", "stale", "started"]
    COMPACTED_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    STALE_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    compacted: WatchCompacted
    events: WatchEvents
    progress: WatchProgress
    stale: WatchStale
    started: WatchStarted
    def __init__(self, started: _Optional[_Union[WatchStarted, _Mapping]] = ..., events: _Optional[_Union[WatchEvents, _Mapping]] = ..., progress: _Optional[_Union[WatchProgress, _Mapping]] = ..., compacted: _Optional[_Union[WatchCompacted, _Mapping]] = ..., stale: _Optional[_Union[WatchStale, _Mapping]] = ...) -> None: ...

class WatchStale(_message.Message):
    __slots__ = ["reason", "revision"]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    reason: str
    revision: int
    def __init__(self, revision: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class WatchStarted(_message.Message):
    __slots__ = ["incarnation", "revision"]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    incarnation: str
    revision: int
    def __init__(self, revision: _Optional[int] = ..., incarnation: _Optional[str] = ...) -> None: ...

class EventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class WatchResyncReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
