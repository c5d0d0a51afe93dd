from pawl.v1 import instance_pb2 as _instance_pb2
from pawl.v1 import kv_pb2 as _kv_pb2
from pawl.v1 import release_pb2 as _release_pb2
from pawl.v1 import rollout_pb2 as _rollout_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HeldRelease(_message.Message):
    __slots__ = ["config_id", "content_digest", "generation"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    content_digest: str
    generation: int
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., content_digest: _Optional[str] = ...) -> None: ...

class SessionAck(_message.Message):
    __slots__ = ["ack", "ack_id"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ACK_ID_FIELD_NUMBER: _ClassVar[int]
    ack: _rollout_pb2.Ack
    ack_id: int
    def __init__(self, ack_id: _Optional[int] = ..., ack: _Optional[_Union[_rollout_pb2.Ack, _Mapping]] = ...) -> None: ...

class SessionAckBatch(_message.Message):
    __slots__ = ["acks"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[SessionAck]
    def __init__(self, acks: _Optional[_Iterable[_Union[SessionAck, _Mapping]]] = ...) -> None: ...

class SessionAckResult(_message.Message):
    __slots__ = ["ack", "ack_id", "error"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ACK_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ack: _rollout_pb2.Ack
    ack_id: int
    error: SessionError
    def __init__(self, ack_id: _Optional[int] = ..., ack: _Optional[_Union[_rollout_pb2.Ack, _Mapping]] = ..., error: _Optional[_Union[SessionError, _Mapping]] = ...) -> None: ...

class SessionError(_message.Message):
    __slots__ = ["code", "message"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class SessionHello(_message.Message):
    __slots__ = ["assignments_after_revision", "held_releases", "inline_releases", "instance", "membership_epoch", "shared_events"]
    ASSIGNMENTS_AFTER_REVISION_FIELD_NUMBER: _ClassVar[int]
    HELD_RELEASES_FIELD_NUMBER: _ClassVar[int]
    INLINE_RELEASES_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    SHARED_EVENTS_FIELD_NUMBER: _ClassVar[int]
    assignments_after_revision: int
    held_releases: _containers.RepeatedCompositeFieldContainer[HeldRelease]
    inline_releases: bool
    instance: _instance_pb2.Instance
    membership_epoch: int
    shared_events: bool
    def __init__(self, instance: _Optional[_Union[_instance_pb2.Instance, _Mapping]] = ..., membership_epoch: _Optional[int] = ..., assignments_after_revision: _Optional[int] = ..., shared_events: bool = ..., inline_releases: bool = ..., held_releases: _Optional[_Iterable[_Union[HeldRelease, _Mapping]]] = ...) -> None: ...

class SessionProgressRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class SessionRequest(_message.Message):
    __slots__ = ["ack", "acks", "hello", "progress_request", "watch_cancel", "watch_create"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    ACK_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_REQUEST_FIELD_NUMBER: _ClassVar[int]
    WATCH_CANCEL_FIELD_NUMBER: _ClassVar[int]
    WATCH_CREATE_FIELD_NUMBER: _ClassVar[int]
    ack: SessionAck
    acks: SessionAckBatch
    hello: SessionHello
    progress_request: SessionProgressRequest
    watch_cancel: SessionWatchCancel
    watch_create: SessionWatchCreate
    def __init__(self, hello: _Optional[_Union[SessionHello, _Mapping]] = ..., ack: _Optional[_Union[SessionAck, _Mapping]] = ..., watch_create: _Optional[_Union[SessionWatchCreate, _Mapping]] = ..., watch_cancel: _Optional[_Union[SessionWatchCancel, _Mapping]] = ..., progress_request: _Optional[_Union[SessionProgressRequest, _Mapping]] = ..., acks: _Optional[_Union[SessionAckBatch, _Mapping]] = ...) -> None: ...

class SessionResponse(_message.Message):
    __slots__ = ["acks", "assignments", "releases", "started", "watches"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    WATCHES_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[SessionAckResult]
    assignments: _instance_pb2.WatchAssignmentsResponse
    releases: _containers.RepeatedCompositeFieldContainer[_release_pb2.Release]
    started: SessionStarted
    watches: _containers.RepeatedCompositeFieldContainer[SessionWatchMessage]
    def __init__(self, started: _Optional[_Union[SessionStarted, _Mapping]] = ..., assignments: _Optional[_Union[_instance_pb2.WatchAssignmentsResponse, _Mapping]] = ..., acks: _Optional[_Iterable[_Union[SessionAckResult, _Mapping]]] = ..., watches: _Optional[_Iterable[_Union[SessionWatchMessage, _Mapping]]] = ..., releases: _Optional[_Iterable[_Union[_release_pb2.Release, _Mapping]]] = ...) -> None: ...

class SessionStarted(_message.Message):
    __slots__ = ["record", "takes_ack_batches"]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    TAKES_ACK_BATCHES_FIELD_NUMBER: _ClassVar[int]
    record: _instance_pb2.InstanceRecord
    takes_ack_batches: bool
    def __init__(self, record: _Optional[_Union[_instance_pb2.InstanceRecord, _Mapping]] = ..., takes_ack_batches: bool = ...) -> None: ...

class SessionWatchCancel(_message.Message):
    __slots__ = ["watch_id"]
    WATCH_ID_FIELD_NUMBER: _ClassVar[int]
    watch_id: int
    def __init__(self, watch_id: _Optional[int] = ...) -> None: ...

class SessionWatchCreate(_message.Message):
    __slots__ = ["watch", "watch_id"]
    WATCH_FIELD_NUMBER: _ClassVar[int]
    WATCH_ID_FIELD_NUMBER: _ClassVar[int]
    watch: _kv_pb2.WatchRequest
    watch_id: int
    def __init__(self, watch_id: _Optional[int] = ..., watch: _Optional[_Union[_kv_pb2.WatchRequest, _Mapping]] = ...) -> None: ...

class SessionWatchMessage(_message.Message):
    __slots__ = ["canceled", "error", "response", "shared_with", "watch_id"]
    CANCELED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    RESPONSE_FIELD_NUMBER: _ClassVar[int]
    SHARED_WITH_FIELD_NUMBER: _ClassVar[int]
    WATCH_ID_FIELD_NUMBER: _ClassVar[int]
    canceled: bool
    error: SessionError
    response: _kv_pb2.WatchResponse
    shared_with: _containers.RepeatedScalarFieldContainer[int]
    watch_id: int
    def __init__(self, watch_id: _Optional[int] = ..., response: _Optional[_Union[_kv_pb2.WatchResponse, _Mapping]] = ..., error: _Optional[_Union[SessionError, _Mapping]] = ..., canceled: bool = ..., shared_with: _Optional[_Iterable[int]] = ...) -> None: ...
