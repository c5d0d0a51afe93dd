from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ALARM_KIND_NOSPACE: AlarmKind
ALARM_KIND_UNSPECIFIED: AlarmKind
DESCRIPTOR: _descriptor.FileDescriptor

class Alarm(_message.Message):
    __slots__ = ["kind", "message", "since"]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    kind: AlarmKind
    message: str
    since: _timestamp_pb2.Timestamp
    def __init__(self, kind: _Optional[_Union[AlarmKind, str]] = ..., since: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class SnapshotFinished(_message.Message):
    __slots__ = ["sha256"]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    sha256: str
    def __init__(self, sha256: _Optional[str] = ...) -> None: ...

class SnapshotRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SnapshotResponse(_message.Message):
    __slots__ = ["chunk", "finished", "started"]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    finished: SnapshotFinished
    started: SnapshotStarted
    def __init__(self, started: _Optional[_Union[SnapshotStarted, _Mapping]] = ..., chunk: _Optional[bytes] = ..., finished: _Optional[_Union[SnapshotFinished, _Mapping]] = ...) -> None: ...

class SnapshotStarted(_message.Message):
    __slots__ = ["compact_revision", "incarnation", "revision", "size"]
    COMPACT_REVISION_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    compact_revision: int
    incarnation: str
    revision: int
    size: int
    def __init__(self, revision: _Optional[int] = ..., compact_revision: _Optional[int] = ..., size: _Optional[int] = ..., incarnation: _Optional[str] = ...) -> None: ...

class StatusRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class StatusResponse(_message.Message):
    __slots__ = ["alarms", "compact_revision", "incarnation", "quota_bytes", "quota_reserve_bytes", "revision", "size_bytes"]
    ALARMS_FIELD_NUMBER: _ClassVar[int]
    COMPACT_REVISION_FIELD_NUMBER: _ClassVar[int]
    INCARNATION_FIELD_NUMBER: _ClassVar[int]
    QUOTA_BYTES_FIELD_NUMBER: _ClassVar[int]
    QUOTA_RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    alarms: _containers.RepeatedCompositeFieldContainer[Alarm]
    compact_revision: int
    incarnation: str
    quota_bytes: int
    quota_reserve_bytes: int
    revision: int
    size_bytes: int
    def __init__(self, revision: _Optional[int] = ..., compact_revision: _Optional[int] = ..., incarnation: _Optional[str] = ..., size_bytes: _Optional[int] = ..., quota_bytes: _Optional[int] = ..., quota_reserve_bytes: _Optional[int] = ..., alarms: _Optional[_Iterable[_Union[Alarm, _Mapping]]] = ...) -> None: ...

class AlarmKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
