from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Assignment(_message.Message):
    __slots__ = ["config_id", "content_digest", "epoch", "generation", "shadow", "stage", "validator_digest"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_DIGEST_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    content_digest: str
    epoch: int
    generation: int
    shadow: bool
    stage: str
    validator_digest: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., content_digest: _Optional[str] = ..., validator_digest: _Optional[str] = ..., stage: _Optional[str] = ..., epoch: _Optional[int] = ..., shadow: bool = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ["boot_id", "workload_identity"]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    boot_id: str
    workload_identity: str
    def __init__(self, workload_identity: _Optional[str] = ..., boot_id: _Optional[str] = ...) -> None: ...

class HeartbeatResponse(_message.Message):
    __slots__ = ["record"]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    record: InstanceRecord
    def __init__(self, record: _Optional[_Union[InstanceRecord, _Mapping]] = ...) -> None: ...

class Instance(_message.Message):
    __slots__ = ["app_version", "boot_id", "labels", "role", "traffic_weight", "workload_identity", "zone"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    app_version: str
    boot_id: str
    labels: _containers.ScalarMap[str, str]
    role: str
    traffic_weight: float
    workload_identity: str
    zone: str
    def __init__(self, workload_identity: _Optional[str] = ..., boot_id: _Optional[str] = ..., zone: _Optional[str] = ..., role: _Optional[str] = ..., traffic_weight: _Optional[float] = ..., app_version: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ...) -> None: ...

class InstanceRecord(_message.Message):
    __slots__ = ["auth_method", "instance", "instance_credential", "lease_expires_at", "live", "membership_epoch", "registered_at", "registered_by"]
    AUTH_METHOD_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    LEASE_EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    LIVE_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_AT_FIELD_NUMBER: _ClassVar[int]
    REGISTERED_BY_FIELD_NUMBER: _ClassVar[int]
    auth_method: str
    instance: Instance
    instance_credential: bool
    lease_expires_at: _timestamp_pb2.Timestamp
    live: bool
    membership_epoch: int
    registered_at: _timestamp_pb2.Timestamp
    registered_by: str
    def __init__(self, instance: _Optional[_Union[Instance, _Mapping]] = ..., lease_expires_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., live: bool = ..., registered_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., membership_epoch: _Optional[int] = ..., registered_by: _Optional[str] = ..., auth_method: _Optional[str] = ..., instance_credential: bool = ...) -> None: ...

class ListInstancesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListInstancesResponse(_message.Message):
    __slots__ = ["instances"]
    INSTANCES_FIELD_NUMBER: _ClassVar[int]
    instances: _containers.RepeatedCompositeFieldContainer[InstanceRecord]
    def __init__(self, instances: _Optional[_Iterable[_Union[InstanceRecord, _Mapping]]] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ["instance"]
    INSTANCE_FIELD_NUMBER: _ClassVar[int]
    instance: Instance
    def __init__(self, instance: _Optional[_Union[Instance, _Mapping]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ["heartbeat_interval", "record"]
    HEARTBEAT_INTERVAL_FIELD_NUMBER: _ClassVar[int]
    RECORD_FIELD_NUMBER: _ClassVar[int]
    heartbeat_interval: _duration_pb2.Duration
    record: InstanceRecord
    def __init__(self, record: _Optional[_Union[InstanceRecord, _Mapping]] = ..., heartbeat_interval: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class WatchAssignmentsRequest(_message.Message):
    __slots__ = ["after_revision", "boot_id", "deltas", "workload_identity"]
    AFTER_REVISION_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    DELTAS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    after_revision: int
    boot_id: str
    deltas: bool
    workload_identity: str
    def __init__(self, workload_identity: _Optional[str] = ..., deltas: bool = ..., after_revision: _Optional[int] = ..., boot_id: _Optional[str] = ...) -> None: ...

class WatchAssignmentsResponse(_message.Message):
    __slots__ = ["assignments", "full", "removed_config_ids", "revision"]
    ASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    REMOVED_CONFIG_IDS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    assignments: _containers.RepeatedCompositeFieldContainer[Assignment]
    full: bool
    removed_config_ids: _containers.RepeatedScalarFieldContainer[str]
    revision: int
    def __init__(self, assignments: _Optional[_Iterable[_Union[Assignment, _Mapping]]] = ..., revision: _Optional[int] = ..., full: bool = ..., removed_config_ids: _Optional[_Iterable[str]] = ...) -> None: ...
