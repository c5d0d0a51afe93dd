from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from pawl.v1 import validator_pb2 as _validator_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ACK_POLICY_KIND_ALL: AckPolicyKind
ACK_POLICY_KIND_CRITICAL_ROLE: AckPolicyKind
ACK_POLICY_KIND_FRACTION: AckPolicyKind
ACK_POLICY_KIND_TRAFFIC_WEIGHT: AckPolicyKind
ACK_POLICY_KIND_UNSPECIFIED: AckPolicyKind
ACK_POLICY_KIND_ZONE_QUORUM: AckPolicyKind
DESCRIPTOR: _descriptor.FileDescriptor
RELEASE_STATE_ACTIVE: ReleaseState
RELEASE_STATE_CANDIDATE: ReleaseState
RELEASE_STATE_REVOKED: ReleaseState
RELEASE_STATE_ROLLED_BACK: ReleaseState
RELEASE_STATE_STOPPED: ReleaseState
RELEASE_STATE_SUPERSEDED: ReleaseState
RELEASE_STATE_UNSPECIFIED: ReleaseState

class AckPolicy(_message.Message):
    __slots__ = ["fraction", "kind", "max_rejected", "role"]
    FRACTION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    MAX_REJECTED_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    fraction: float
    kind: AckPolicyKind
    max_rejected: int
    role: str
    def __init__(self, kind: _Optional[_Union[AckPolicyKind, str]] = ..., fraction: _Optional[float] = ..., role: _Optional[str] = ..., max_rejected: _Optional[int] = ...) -> None: ...

class CreateReleaseRequest(_message.Message):
    __slots__ = ["spec"]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: ReleaseSpec
    def __init__(self, spec: _Optional[_Union[ReleaseSpec, _Mapping]] = ...) -> None: ...

class CreateReleaseResponse(_message.Message):
    __slots__ = ["release"]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    release: Release
    def __init__(self, release: _Optional[_Union[Release, _Mapping]] = ...) -> None: ...

class GetReleaseRequest(_message.Message):
    __slots__ = ["config_id", "generation", "omit_membership", "workload_identity"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    OMIT_MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    generation: int
    omit_membership: bool
    workload_identity: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., omit_membership: bool = ..., workload_identity: _Optional[str] = ...) -> None: ...

class GetReleaseResponse(_message.Message):
    __slots__ = ["release"]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    release: Release
    def __init__(self, release: _Optional[_Union[Release, _Mapping]] = ...) -> None: ...

class HealthBudget(_message.Message):
    __slots__ = ["max_error_rate", "max_p99_latency"]
    MAX_ERROR_RATE_FIELD_NUMBER: _ClassVar[int]
    MAX_P99_LATENCY_FIELD_NUMBER: _ClassVar[int]
    max_error_rate: float
    max_p99_latency: _duration_pb2.Duration
    def __init__(self, max_error_rate: _Optional[float] = ..., max_p99_latency: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ListReleasesRequest(_message.Message):
    __slots__ = ["config_id", "include_content", "include_membership", "page_size", "page_token"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CONTENT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    include_content: bool
    include_membership: bool
    page_size: int
    page_token: str
    def __init__(self, config_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., include_membership: bool = ..., include_content: bool = ...) -> None: ...

class ListReleasesResponse(_message.Message):
    __slots__ = ["next_page_token", "releases"]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    RELEASES_FIELD_NUMBER: _ClassVar[int]
    next_page_token: str
    releases: _containers.RepeatedCompositeFieldContainer[Release]
    def __init__(self, releases: _Optional[_Iterable[_Union[Release, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class Member(_message.Message):
    __slots__ = ["app_version", "labels", "role", "traffic_weight", "workload_identity", "zone"]
    class LabelsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    ZONE_FIELD_NUMBER: _ClassVar[int]
    app_version: str
    labels: _containers.ScalarMap[str, str]
    role: str
    traffic_weight: float
    workload_identity: str
    zone: str
    def __init__(self, workload_identity: _Optional[str] = ..., zone: _Optional[str] = ..., role: _Optional[str] = ..., traffic_weight: _Optional[float] = ..., labels: _Optional[_Mapping[str, str]] = ..., app_version: _Optional[str] = ...) -> None: ...

class Release(_message.Message):
    __slots__ = ["content_digest", "created_at", "created_by", "generation", "ineligible", "member_count", "membership", "membership_epoch", "predecessor", "revision", "spec", "state"]
    CONTENT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INELIGIBLE_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_EPOCH_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_FIELD_NUMBER: _ClassVar[int]
    MEMBER_COUNT_FIELD_NUMBER: _ClassVar[int]
    PREDECESSOR_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    content_digest: str
    created_at: _timestamp_pb2.Timestamp
    created_by: str
    generation: int
    ineligible: _containers.RepeatedCompositeFieldContainer[Member]
    member_count: int
    membership: _containers.RepeatedCompositeFieldContainer[Member]
    membership_epoch: int
    predecessor: int
    revision: int
    spec: ReleaseSpec
    state: ReleaseState
    def __init__(self, spec: _Optional[_Union[ReleaseSpec, _Mapping]] = ..., generation: _Optional[int] = ..., predecessor: _Optional[int] = ..., content_digest: _Optional[str] = ..., membership: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., state: _Optional[_Union[ReleaseState, str]] = ..., created_at: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., created_by: _Optional[str] = ..., revision: _Optional[int] = ..., membership_epoch: _Optional[int] = ..., ineligible: _Optional[_Iterable[_Union[Member, _Mapping]]] = ..., member_count: _Optional[int] = ...) -> None: ...

class ReleaseRejected(_message.Message):
    __slots__ = ["validator_digest", "violations"]
    VALIDATOR_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VIOLATIONS_FIELD_NUMBER: _ClassVar[int]
    validator_digest: str
    violations: _containers.RepeatedCompositeFieldContainer[_validator_pb2.Violation]
    def __init__(self, validator_digest: _Optional[str] = ..., violations: _Optional[_Iterable[_Union[_validator_pb2.Violation, _Mapping]]] = ...) -> None: ...

class ReleaseSpec(_message.Message):
    __slots__ = ["config_id", "content", "deadline", "dependencies", "health_window", "media_type", "min_app_version", "min_coverage", "require_instance_credential", "secret_refs", "selector", "stages", "validator_digest", "validator_params"]
    class DependenciesEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class SelectorEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    HEALTH_WINDOW_FIELD_NUMBER: _ClassVar[int]
    MEDIA_TYPE_FIELD_NUMBER: _ClassVar[int]
    MIN_APP_VERSION_FIELD_NUMBER: _ClassVar[int]
    MIN_COVERAGE_FIELD_NUMBER: _ClassVar[int]
    REQUIRE_INSTANCE_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    SECRET_REFS_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_DIGEST_FIELD_NUMBER: _ClassVar[int]
    VALIDATOR_PARAMS_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    content: bytes
    deadline: _duration_pb2.Duration
    dependencies: _containers.ScalarMap[str, int]
    health_window: _duration_pb2.Duration
    media_type: str
    min_app_version: str
    min_coverage: float
    require_instance_credential: bool
    secret_refs: _containers.RepeatedScalarFieldContainer[str]
    selector: _containers.ScalarMap[str, str]
    stages: _containers.RepeatedCompositeFieldContainer[Stage]
    validator_digest: str
    validator_params: bytes
    def __init__(self, config_id: _Optional[str] = ..., content: _Optional[bytes] = ..., media_type: _Optional[str] = ..., validator_digest: _Optional[str] = ..., validator_params: _Optional[bytes] = ..., selector: _Optional[_Mapping[str, str]] = ..., dependencies: _Optional[_Mapping[str, int]] = ..., secret_refs: _Optional[_Iterable[str]] = ..., min_app_version: _Optional[str] = ..., stages: _Optional[_Iterable[_Union[Stage, _Mapping]]] = ..., health_window: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., deadline: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., min_coverage: _Optional[float] = ..., require_instance_credential: bool = ...) -> None: ...

class RetireMemberRequest(_message.Message):
    __slots__ = ["config_id", "generation", "reason", "workload_identity"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    generation: int
    reason: str
    workload_identity: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., workload_identity: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RetireMemberResponse(_message.Message):
    __slots__ = ["retirement"]
    RETIREMENT_FIELD_NUMBER: _ClassVar[int]
    retirement: Retirement
    def __init__(self, retirement: _Optional[_Union[Retirement, _Mapping]] = ...) -> None: ...

class Retirement(_message.Message):
    __slots__ = ["actor", "config_id", "generation", "membership_generation", "reason", "revision", "time", "workload_identity"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    MEMBERSHIP_GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    WORKLOAD_IDENTITY_FIELD_NUMBER: _ClassVar[int]
    actor: str
    config_id: str
    generation: int
    membership_generation: int
    reason: str
    revision: int
    time: _timestamp_pb2.Timestamp
    workload_identity: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., workload_identity: _Optional[str] = ..., reason: _Optional[str] = ..., actor: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., revision: _Optional[int] = ..., membership_generation: _Optional[int] = ...) -> None: ...

class Revocation(_message.Message):
    __slots__ = ["actor", "config_id", "generation", "reason", "revision", "time"]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REVISION_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    actor: str
    config_id: str
    generation: int
    reason: str
    revision: int
    time: _timestamp_pb2.Timestamp
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., reason: _Optional[str] = ..., actor: _Optional[str] = ..., time: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., revision: _Optional[int] = ...) -> None: ...

class RevokeReleaseRequest(_message.Message):
    __slots__ = ["config_id", "generation", "reason"]
    CONFIG_ID_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    config_id: str
    generation: int
    reason: str
    def __init__(self, config_id: _Optional[str] = ..., generation: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class RevokeReleaseResponse(_message.Message):
    __slots__ = ["revocation"]
    REVOCATION_FIELD_NUMBER: _ClassVar[int]
    revocation: Revocation
    def __init__(self, revocation: _Optional[_Union[Revocation, _Mapping]] = ...) -> None: ...

class Stage(_message.Message):
    __slots__ = ["budget", "name", "policy", "selector", "shadow"]
    class SelectorEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    SELECTOR_FIELD_NUMBER: _ClassVar[int]
    SHADOW_FIELD_NUMBER: _ClassVar[int]
    budget: HealthBudget
    name: str
    policy: AckPolicy
    selector: _containers.ScalarMap[str, str]
    shadow: bool
    def __init__(self, name: _Optional[str] = ..., selector: _Optional[_Mapping[str, str]] = ..., policy: _Optional[_Union[AckPolicy, _Mapping]] = ..., shadow: bool = ..., budget: _Optional[_Union[HealthBudget, _Mapping]] = ...) -> None: ...

class AckPolicyKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class ReleaseState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
