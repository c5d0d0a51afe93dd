from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from pawl.v1 import release_pb2 as _release_pb2
from pawl.v1 import validator_pb2 as _validator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
INSTANCE_STATE_APPLIED: InstanceState
INSTANCE_STATE_DISCOVERED: InstanceState
INSTANCE_STATE_DOWNLOADED: InstanceState
INSTANCE_STATE_HEALTHY_ACKED: InstanceState
INSTANCE_STATE_REJECTED: InstanceState
INSTANCE_STATE_STAGED: InstanceState
INSTANCE_STATE_STALE: InstanceState
INSTANCE_STATE_UNSPECIFIED: InstanceState
INSTANCE_STATE_VALIDATED: InstanceState
REJECT_CODE_APPLY_FAILED: RejectCode
REJECT_CODE_APP_TOO_OLD: RejectCode
REJECT_CODE_DIGEST_MISMATCH: RejectCode
REJECT_CODE_DOWNLOAD_FAILED: RejectCode
REJECT_CODE_INVALID_CONTENT: RejectCode
REJECT_CODE_UNSPECIFIED: RejectCode
REJECT_CODE_VALIDATOR_FAILED: RejectCode
REJECT_CODE_VALIDATOR_UNLOADABLE: RejectCode

class Ack(_message.Message):
    __slots__ = ["app_artifact", "app_version", "apply_sequence", "boot_id", "budget_breach", "config_id", "content_digest", "counted", "generation", "health", "health_ok", "held", "membership_epoch", "not_counted_reason", "reason", "received_at", "reject_code", "report_id", "state", "trace_id", "traceparent", "validator_digest", "violations", "workload_identity"]
    APPLY_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    APP_ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_BREACH_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    COUNTED_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    HEALTH_OK_FIELD_NUMBER: _ClassVar[int]
    HELD_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NOT_COUNTED_REASON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECEIVED_AT_FIELD_NUMBER: _ClassVar[int]
    REJECT_CODE_FIELD_NUMBER: _ClassVar[int]
    REPORT_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    app_artifact: str
    app_version: str
    apply_sequence: int
    boot_id: str
    budget_breach: str
    config_id: str
    content_digest: str
    counted: bool
    generation: int
    health: HealthMeasurement
    health_ok: bool
    held: _duration_pb2.Duration
    membership_epoch: int
    not_counted_reason: str
    reason: str
    received_at: _timestamp_pb2.Timestamp
    reject_code: RejectCode
    report_id: int
    state: InstanceState
    trace_id: str
    traceparent: str
    validator_digest: str
    violations: _containers.RepeatedCompositeFieldContainer[_validator_pb2.Violation]
    workload_identity: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., workload_identity: _Optional[str] = ..., boot_id: _Optional[str] = ..., membership_epoch: _Optional[int] = ..., content_digest: _Optional[str] = ..., validator_digest: _Optional[str] = ..., app_artifact: _Optional[str] = ..., apply_sequence: _Optional[int] = ..., state: _Optional[_Union[InstanceState, str]] = ..., health_ok: bool = ..., reason: _Optional[str] = ..., traceparent: _Optional[str] = ..., trace_id: _Optional[str] = ..., health: _Optional[_Union[HealthMeasurement, _Mapping]] = ..., budget_breach: _Optional[str] = ..., held: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., app_version: _Optional[str] = ..., received_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., counted: bool = ..., not_counted_reason: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[_validator_pb2.Violation, _Mapping]]] = ..., reject_code: _Optional[_Union[RejectCode, str]] = ..., report_id: _Optional[int] = ...) -> None: ...

class AckRequest(_message.Message):
    __slots__ = ["ack"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ack: Ack
    def __init__(self, ack: _Optional[_Union[Ack, _Mapping]] = ...) -> None: ...

class AckResponse(_message.Message):
    __slots__ = ["ack"]
    ACK_FIELD_NUMBER: _ClassVar[int]
    ack: Ack
    def __init__(self, ack: _Optional[_Union[Ack, _Mapping]] = ...) -> None: ...

class AppliedConfig(_message.Message):
    __slots__ = ["apply_sequence", "boot_id", "config_id", "content_digest", "current_boot", "generation", "matches_release", "membership_epoch", "reported_at", "state", "trace_id", "traceparent", "validator_digest", "workload_identity"]
    APPLY_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    BOOT_ID_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CURRENT_BOOT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MATCHES_RELEASE_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TRACEPARENT_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_DIGEST_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    apply_sequence: int
    boot_id: str
    config_id: str
    content_digest: str
    current_boot: bool
    generation: int
    matches_release: bool
    membership_epoch: int
    reported_at: _timestamp_pb2.Timestamp
    state: InstanceState
    trace_id: str
    traceparent: str
    validator_digest: str
    workload_identity: str
    def __init__(self, config_id: _Optional[str] = ..., workload_identity: _Optional[str] = ..., generation: _Optional[int] = ..., content_digest: _Optional[str] = ..., validator_digest: _Optional[str] = ..., boot_id: _Optional[str] = ..., membership_epoch: _Optional[int] = ..., apply_sequence: _Optional[int] = ..., state: _Optional[_Union[InstanceState, str]] = ..., reported_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., traceparent: _Optional[str] = ..., trace_id: _Optional[str] = ..., current_boot: bool = ..., matches_release: bool = ...) -> None: ...

class Coverage(_message.Message):
    __slots__ = ["generation", "members", "mismatched", "missing", "missing_count", "on_release", "reported", "required", "summary"]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    MISMATCHED_FIELD_NUMBER: _ClassVar[int]
    MISSING_COUNT_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    ON_RELEASE_FIELD_NUMBER: _ClassVar[int]
    REPORTED_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    generation: int
    members: int
    mismatched: int
    missing: _containers.RepeatedScalarFieldContainer[str]
    missing_count: int
    on_release: int
    reported: int
    required: int
    summary: str
    def __init__(self, generation: _Optional[int] = ..., members: _Optional[int] = ..., reported: _Optional[int] = ..., on_release: _Optional[int] = ..., mismatched: _Optional[int] = ..., summary: _Optional[str] = ..., required: _Optional[int] = ..., missing: _Optional[_Iterable[str]] = ..., missing_count: _Optional[int] = ...) -> None: ...

class GetPointerRequest(_message.Message):
    __slots__ = ["config_id"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    def __init__(self, config_id: _Optional[str] = ...) -> None: ...

class GetPointerResponse(_message.Message):
    __slots__ = ["pointer"]
    POINTER_FIELD_NUMBER: _ClassVar[int]
    pointer: Pointer
    def __init__(self, pointer: _Optional[_Union[Pointer, _Mapping]] = ...) -> None: ...

class GetPromotionRequest(_message.Message):
    __slots__ = ["config_id", "idempotency_key"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    idempotency_key: str
    def __init__(self, config_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class GetPromotionResponse(_message.Message):
    __slots__ = ["receipt"]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    receipt: Receipt
    def __init__(self, receipt: _Optional[_Union[Receipt, _Mapping]] = ...) -> None: ...

class GetRolloutStatusRequest(_message.Message):
    __slots__ = ["ack_page_size", "ack_page_token", "config_id", "generation"]
    ACK_PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACK_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ack_page_size: int
    ack_page_token: str
    config_id: str
    generation: int
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., ack_page_size: _Optional[int] = ..., ack_page_token: _Optional[str] = ...) -> None: ...

class GetRolloutStatusResponse(_message.Message):
    __slots__ = ["acks", "coverage", "membership_generation", "next_ack_page_token", "pointer", "retirements", "stages", "state", "stop"]
    ACKS_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_GENERATION_FIELD_NUMBER: _ClassVar[int]
    NEXT_ACK_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    POINTER_FIELD_NUMBER: _ClassVar[int]
    RETIREMENTS_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    acks: _containers.RepeatedCompositeFieldContainer[Ack]
    coverage: Coverage
    membership_generation: int
    next_ack_page_token: str
    pointer: Pointer
    retirements: _containers.RepeatedCompositeFieldContainer[_release_pb2.Retirement]
    stages: _containers.RepeatedCompositeFieldContainer[StageStatus]
    state: _release_pb2.ReleaseState
    stop: Stop
    def __init__(self, stages: _Optional[_Iterable[_Union[StageStatus, _Mapping]]] = ..., acks: _Optional[_Iterable[_Union[Ack, _Mapping]]] = ..., pointer: _Optional[_Union[Pointer, _Mapping]] = ..., stop: _Optional[_Union[Stop, _Mapping]] = ..., state: _Optional[_Union[_release_pb2.ReleaseState, str]] = ..., coverage: _Optional[_Union[Coverage, _Mapping]] = ..., retirements: _Optional[_Iterable[_Union[_release_pb2.Retirement, _Mapping]]] = ..., membership_generation: _Optional[int] = ..., next_ack_page_token: _Optional[str] = ...) -> None: ...

class HealthMeasurement(_message.Message):
    __slots__ = ["error_rate", "p99_latency"]
    ERROR_RATE_FIELD_NUMBER: _ClassVar[int]
    P99_LATENCY_FIELD_NUMBER: _ClassVar[int]
    error_rate: float
    p99_latency: _duration_pb2.Duration
    def __init__(self, error_rate: _Optional[float] = ..., p99_latency: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListAppliedRequest(_message.Message):
    __slots__ = ["config_id", "page_size", "page_token"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    page_size: int
    page_token: str
    def __init__(self, config_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAppliedResponse(_message.Message):
    __slots__ = ["applied", "next_page_token", "revision"]
    APPLIED_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    applied: _containers.RepeatedCompositeFieldContainer[AppliedConfig]
    next_page_token: str
    revision: int
    def __init__(self, applied: _Optional[_Iterable[_Union[AppliedConfig, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., revision: _Optional[int] = ...) -> None: ...

class Pointer(_message.Message):
    __slots__ = ["epoch", "generation", "receipt_key"]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_KEY_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    generation: int
    receipt_key: str
    def __init__(self, generation: _Optional[int] = ..., epoch: _Optional[int] = ..., receipt_key: _Optional[str] = ...) -> None: ...

class PointerMoved(_message.Message):
    __slots__ = ["config_id", "current", "expected_epoch", "expected_generation"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    current: Pointer
    expected_epoch: int
    expected_generation: int
    def __init__(self, config_id: _Optional[str] = ..., expected_generation: _Optional[int] = ..., expected_epoch: _Optional[int] = ..., current: _Optional[_Union[Pointer, _Mapping]] = ...) -> None: ...

class PromoteRequest(_message.Message):
    __slots__ = ["config_id", "expected_epoch", "expected_generation", "generation", "idempotency_key"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    expected_epoch: int
    expected_generation: int
    generation: int
    idempotency_key: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., expected_generation: _Optional[int] = ..., expected_epoch: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class PromoteResponse(_message.Message):
    __slots__ = ["receipt"]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    receipt: Receipt
    def __init__(self, receipt: _Optional[_Union[Receipt, _Mapping]] = ...) -> None: ...

class PromotionUnknown(_message.Message):
    __slots__ = ["config_id", "idempotency_key"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    idempotency_key: str
    def __init__(self, config_id: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class Receipt(_message.Message):
    __slots__ = ["actor", "config_id", "epoch", "evidence", "from_generation", "idempotency_key", "membership_generation", "principal", "request_id", "retirements", "revision", "rollback", "time", "to_generation"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    FROM_GENERATION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_GENERATION_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RETIREMENTS_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    ROLLBACK_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TO_GENERATION_FIELD_NUMBER: _ClassVar[int]
    actor: str
    config_id: str
    epoch: int
    evidence: _containers.RepeatedCompositeFieldContainer[StageStatus]
    from_generation: int
    idempotency_key: str
    membership_generation: int
    principal: str
    request_id: str
    retirements: _containers.RepeatedCompositeFieldContainer[_release_pb2.Retirement]
    revision: int
    rollback: bool
    time: _timestamp_pb2.Timestamp
    to_generation: int
    def __init__(self, config_id: _Optional[str] = ..., from_generation: _Optional[int] = ..., to_generation: _Optional[int] = ..., epoch: _Optional[int] = ..., rollback: bool = ..., evidence: _Optional[_Iterable[_Union[StageStatus, _Mapping]]] = ..., actor: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., revision: _Optional[int] = ..., membership_generation: _Optional[int] = ..., retirements: _Optional[_Iterable[_Union[_release_pb2.Retirement, _Mapping]]] = ..., request_id: _Optional[str] = ..., principal: _Optional[str] = ...) -> None: ...

class RoleStatus(_message.Message):
    __slots__ = ["members", "states"]
    class StatesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    members: int
    states: _containers.ScalarMap[str, int]
    def __init__(self, members: _Optional[int] = ..., states: _Optional[_Mapping[str, int]] = ...) -> None: ...

class RollbackRequest(_message.Message):
    __slots__ = ["config_id", "expected_epoch", "expected_generation", "idempotency_key"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_GENERATION_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    expected_epoch: int
    expected_generation: int
    idempotency_key: str
    def __init__(self, config_id: _Optional[str] = ..., expected_generation: _Optional[int] = ..., expected_epoch: _Optional[int] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class RollbackResponse(_message.Message):
    __slots__ = ["receipt"]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    receipt: Receipt
    def __init__(self, receipt: _Optional[_Union[Receipt, _Mapping]] = ...) -> None: ...

class StageStatus(_message.Message):
    __slots__ = ["healthy", "members", "name", "outcome", "passed_at", "reached", "reason", "rejected", "retired", "roles", "shadow", "states", "zones"]
    class RolesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: RoleStatus
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[RoleStatus, _Mapping]] = ...) -> None: ...
    class StatesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class ZonesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ZoneStatus
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ZoneStatus, _Mapping]] = ...) -> None: ...
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PASSED_AT_FIELD_NUMBER: _ClassVar[int]
    REACHED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    RETIRED_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    ZONES_FIELD_NUMBER: _ClassVar[int]
    healthy: int
    members: int
    name: str
    outcome: str
    passed_at: _timestamp_pb2.Timestamp
    reached: bool
    reason: str
    rejected: int
    retired: int
    roles: _containers.MessageMap[str, RoleStatus]
    shadow: bool
    states: _containers.ScalarMap[str, int]
    zones: _containers.MessageMap[str, ZoneStatus]
    def __init__(self, name: _Optional[str] = ..., outcome: _Optional[str] = ..., reason: _Optional[str] = ..., members: _Optional[int] = ..., healthy: _Optional[int] = ..., rejected: _Optional[int] = ..., zones: _Optional[_Mapping[str, ZoneStatus]] = ..., states: _Optional[_Mapping[str, int]] = ..., shadow: bool = ..., reached: bool = ..., passed_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., retired: _Optional[int] = ..., roles: _Optional[_Mapping[str, RoleStatus]] = ...) -> None: ...

class Stop(_message.Message):
    __slots__ = ["actor", "config_id", "evidence", "generation", "manual", "reason", "revision", "stage", "time"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    EVIDENCE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MANUAL_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    STAGE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    actor: str
    config_id: str
    evidence: _containers.RepeatedCompositeFieldContainer[StageStatus]
    generation: int
    manual: bool
    reason: str
    revision: int
    stage: str
    time: _timestamp_pb2.Timestamp
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., stage: _Optional[str] = ..., reason: _Optional[str] = ..., manual: bool = ..., actor: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., evidence: _Optional[_Iterable[_Union[StageStatus, _Mapping]]] = ..., revision: _Optional[int] = ...) -> None: ...

class StopRolloutRequest(_message.Message):
    __slots__ = ["config_id", "generation", "reason"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    generation: int
    reason: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class StopRolloutResponse(_message.Message):
    __slots__ = ["stop"]
    STOP_FIELD_NUMBER: _ClassVar[int]
    stop: Stop
    def __init__(self, stop: _Optional[_Union[Stop, _Mapping]] = ...) -> None: ...

class ZoneStatus(_message.Message):
    __slots__ = ["healthy", "members", "rejected", "states"]
    class StatesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    MEMBERS_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    healthy: int
    members: int
    rejected: int
    states: _containers.ScalarMap[str, int]
    def __init__(self, members: _Optional[int] = ..., healthy: _Optional[int] = ..., rejected: _Optional[int] = ..., states: _Optional[_Mapping[str, int]] = ...) -> None: ...

class InstanceState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class RejectCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
